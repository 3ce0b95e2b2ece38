#pragma once
// Histogram observer for post-training calibration (docs/math/calibration.md):
// a histogram of |x| over every tensor seen, from which a calibrator
// (calibrators.h: max, percentile, mse, entropy) chooses the saturation
// threshold T; the qparams are then those of the observed range clipped to
// [-T, T].
//
// AbsHistogram: `bins` bins (2048 by default) over [0, R]; bin j holds the
// values with j w <= |x| < (j + 1) w, w = R / bins, the top bin also |x| = R.
// R is set by start_at() (the calibration set's max |x|, from a first pass:
// the reference's 2048 bins over [0, absmax]), else by the first tensor's max
// |x|. A later tensor with a larger max grows R by the smallest integer
// factor k >= 2 that covers it: every k old bins merge into one new bin,
// exactly (an old bin lies inside one new bin), so no count is lost or moved
// across an edge; but then only bins/k..bins of the bins are in use and the
// thresholds depend on the order the tensors came in, which is why
// calibration makes two passes (Note [two calibration passes]). Counts are integers: the result does
// not depend on the thread count. NaNs are not counted; an infinity is an
// error (no finite threshold covers it).
#include <cstdint>
#include <string>
#include <vector>

#include "quant/observe/calibrators.h"
#include "quant/observe/observer.h"

namespace qat::quant {

class AbsHistogram {
 public:
  explicit AbsHistogram(int64_t bins = 2048);

  // Adds |x[i]| for i < n; amax: max |x[i]| over the finite values (the
  // caller has it from its min/max pass), where: named in errors.
  void add(const float* x, int64_t n, float amax, const std::string& where);
  // Fixes R before anything is added (range >= 0 finite; 0: R is set by the
  // first tensor with a non-zero value, as without start_at()). A later max
  // above R by a relative 1e-5 or less (a forward that rounds a hair
  // differently) counts in the top bin; a larger one grows R as add() does.
  void start_at(float range);
  // Adds another histogram's counts: this grows (as add does) to cover its
  // range, then each of its bins goes, whole, into the bin holding its
  // centre. Keeps every count; exact when both have the same range.
  void merge(const AbsHistogram& other);

  int64_t bins() const { return static_cast<int64_t>(counts_.size()); }
  const std::vector<uint64_t>& counts() const { return counts_; }
  float range() const { return range_; }   // R (0: nothing but zeros seen yet)
  float amax() const { return amax_; }     // the largest |x| counted
  uint64_t total() const { return total_; }
  uint64_t zeros() const { return zeros_; }  // exact zeros, counted in bin 0
  // counts() without the exact zeros (bin 0 less zeros()): what the entropy
  // and MSE searches read (calibrators.h).
  std::vector<uint64_t> nonzero_counts() const;
  bool empty() const { return total_ == 0; }

 private:
  void grow_to(float amax);
  std::vector<uint64_t> counts_;
  float range_ = 0, amax_ = 0;
  uint64_t total_ = 0, zeros_ = 0;
  bool started_ = false;
  bool preset_ = false;  // R from start_at(): a max above it by 1e-5 or less goes to the top bin
};

// Per-tensor only. State (registered by the owning quantizer, so a
// checkpoint's layout is that of a min/max observer): min_val, max_val (1),
// the observed range. qparams(): the range clipped to the calibrator's
// threshold (threshold() below).
class HistogramObserver final : public Observer {
 public:
  HistogramObserver(const QuantSpec& spec, Calibrator calibrator = Calibrator::entropy,
                    CalibratorOptions options = {}, int64_t bins = 2048);
  Range range() const override { return {min_val_, max_val_}; }
  QParams qparams() const override;
  void reset() override;
  NamedTensors state() const override { return {{"min_val", min_val_}, {"max_val", max_val_}}; }
  std::string describe() const override;

  const AbsHistogram& histogram() const { return hist_; }
  // The chosen threshold for a calibrator (this observer's own by default).
  float threshold(Calibrator c, const CalibratorOptions& o) const;
  float threshold() const { return threshold(calibrator_, options_); }

  // Note [two calibration passes]. While ranging, observations set only the
  // range (min_val, max_val); begin_histogram() then starts the histogram at
  // the range's max |x| and later observations fill it. An observer never
  // set ranging fills its histogram from the first observation (one pass,
  // growing the range as it must).
  void set_ranging(bool on);
  void begin_histogram();
  bool ranging() const { return ranging_; }

 protected:
  void update(const Tensor& x) override;

 private:
  Calibrator calibrator_;
  CalibratorOptions options_;
  AbsHistogram hist_;
  Tensor min_val_, max_val_;
  bool ranging_ = false;
};

}  // namespace qat::quant
