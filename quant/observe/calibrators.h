#pragma once
// Post-training calibrators: each chooses a saturation threshold T from a
// histogram of |x| (histogram.h), in units of bins; T = i * bin width,
// capped at the observed max |x| (docs/math/calibration.md).
//   max         T = the observed max |x|
//   percentile  the smallest i whose bins 0..i-1 hold >= p % of the counts (p = 99.99)
//   mse         the i minimising the expected squared error of a quantizer
//               clipping at T with L positive levels (step s = T / L): bins
//               below T contribute s^2 / 12 (uniform rounding noise) per
//               count, bins above (their centres) the squared clipping error
//   entropy     TensorRT's KL search (Migacz, GTC 2017): for i from 128 (or
//               L + 1 when larger: 256 for uint8 after a ReLU) to
//               the number of bins, P = bins 0..i-1 with every count beyond
//               folded into bin i-1, Q = the unfolded bins merged into L + 1
//               groups (bin j in group floor(j (L + 1) / i)) and spread
//               evenly over each group's non-empty bins; the i with the
//               smallest KL(P || Q) (ties: the smallest i)
// Exact zeros (counted in bin 0) are left out of the mse and entropy searches
// (they are exact on every grid; in the KL search the ReLU zero spike would
// pick the first candidate); percentile counts them.
// L, the levels on the data's side of zero: 127 for int8 symmetric (also
// narrow and unsigned-symmetric), 255 for uint8 affine over data of one sign
// (non-negative after a ReLU, or non-positive: the grid is then [-T, 0] in
// 255 steps), (qmax - qmin) / 2 for an affine grid over data of both signs.
//
// Weights are not calibrated from histograms: their grid takes the max per
// channel (a min/max observer).
#include <array>
#include <cstdint>
#include <iterator>
#include <vector>

#include "core/enum_names.h"
#include "quant/qparams.h"
#include "quant/spec.h"

namespace qat::quant {

enum class Calibrator { max, percentile, mse, entropy };

// The calibrators, one row each, in the order reports list them: the name
// the CLI and configs use, and the name TensorRT's calibration cache header
// gives it. Everything that lists calibrators (the CLI, --compare, the
// cache reader and writer) iterates this table.
struct CalibratorRow {
  Calibrator id;
  const char* name;
  const char* cache_name;  // TRT-<version>-<cache_name>
};
inline constexpr CalibratorRow kCalibrators[] = {
    {Calibrator::max, "max", "MinMaxCalibration"},
    {Calibrator::percentile, "percentile", "PercentileCalibration"},
    {Calibrator::mse, "mse", "MSECalibration"},
    {Calibrator::entropy, "entropy", "EntropyCalibration2"},
};
constexpr auto enum_names(Calibrator) {
  std::array<EnumName<Calibrator>, std::size(kCalibrators)> names{};
  for (size_t i = 0; i < names.size(); ++i) names[i] = {kCalibrators[i].id, kCalibrators[i].name};
  return names;
}
const char* calibrator_name(Calibrator c);
const CalibratorRow& calibrator_row(Calibrator c);

struct CalibratorOptions {
  double percentile = 99.99;     // (0, 100]
  int64_t entropy_start_bin = 128;
};

// The calibrators on raw counts (bins of equal width); each returns the
// number of bins i below the threshold (1..counts.size()). An all-zero
// histogram gives counts.size().
int64_t percentile_bins(const std::vector<uint64_t>& counts, double percentile);
int64_t mse_bins(const std::vector<uint64_t>& counts, int64_t levels);
// levels: the quantized levels Q of the KL search (L + 1: 128 for int8).
int64_t entropy_bins(const std::vector<uint64_t>& counts, int64_t levels, int64_t start_bin);

// L for a spec and the observed range (see above).
int64_t positive_levels(const QuantSpec& spec, float observed_min, float observed_max);

class AbsHistogram;
// T for one calibrator on one histogram; levels: positive_levels().
float choose_threshold(const AbsHistogram& h, Calibrator c, const CalibratorOptions& o, int64_t levels);

// The calibration cache stores TensorRT's scale, T / 127, per tensor
// (calibration_cache.h). qat applies the scale it stored, so that a
// calibration and a later read of its cache give the same bits:
//   cache_scale(T) = T / 127 (float32)
//   qparams_for_cache_scale: T' = c * 127; TensorRT's int8 grid (formula
//   amax_over_qmax, qmax 127) takes s = c itself, as TensorRT does (not
//   T' / 127, which can be one ulp off); any other grid the qparams (qparams.h) of the observed
//   range [min_val, max_val] clipped to [-T', T'] (a symmetric one: [-T', T']).
float cache_scale(float threshold);
QParams qparams_for_cache_scale(const QuantSpec& spec, float scale, float min_val, float max_val);

}  // namespace qat::quant
