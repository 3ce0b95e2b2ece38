#include "quant/observe/histogram.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "core/profiler.h"
#include "quant/observe/minmax.h"

namespace qat::quant {

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int64_t kPiece = int64_t{1} << 16;  // elements per parallel work item
constexpr double kPresetSlack = 1e-5;          // relative: see grow_to

// Bin of |v| (v finite) for `bins` bins over [0, range]; the top bin is
// closed. In double: in float, bins / range overflows for a range below
// about 6e-36, and the cap (1e30) that kept it finite put every value of a
// tensor whose range is below 2e-27 in too low a bin (all in bin 0 at
// 1e-37); in double it is at most bins / 1.4e-45, finite.
inline int64_t bin_of(float av, double per_unit, int64_t bins) {
  const double f = static_cast<double>(av) * per_unit;
  return f < static_cast<double>(bins) ? static_cast<int64_t>(f) : bins - 1;
}
}  // namespace

AbsHistogram::AbsHistogram(int64_t bins) : counts_(static_cast<size_t>(bins), 0) {
  QAT_CHECK(bins >= 2, "histogram: bins must be >= 2, got ", bins);
}

void AbsHistogram::grow_to(float amax) {
  if (!started_ || range_ == 0) {  // nothing but zeros so far: they stay in bin 0
    range_ = amax;
    started_ = true;
    return;
  }
  if (amax <= range_) return;
  // A second pass whose forward rounds a hair differently (another kernel,
  // nondeterministic sums) must not halve the resolution the first pass
  // fixed: such values go to the top bin, as |x| = R does.
  if (preset_ && static_cast<double>(amax) <= static_cast<double>(range_) * (1 + kPresetSlack)) return;
  const double ratio = static_cast<double>(amax) / range_;
  if (ratio >= static_cast<double>(bins())) {  // every old bin lands in new bin 0
    uint64_t all = 0;
    for (uint64_t c : counts_) all += c;
    std::fill(counts_.begin(), counts_.end(), 0);
    counts_[0] = all;
    range_ = amax;
    return;
  }
  // The smallest integer k >= 2 with k R >= amax; k old bins -> one new bin.
  const int64_t k = std::max<int64_t>(2, static_cast<int64_t>(std::ceil(ratio)));
  std::vector<uint64_t> merged(counts_.size(), 0);
  for (size_t j = 0; j < counts_.size(); ++j) merged[j / static_cast<size_t>(k)] += counts_[j];
  counts_.swap(merged);
  range_ = static_cast<float>(static_cast<double>(range_) * static_cast<double>(k));
}

void AbsHistogram::start_at(float range) {
  QAT_CHECK(empty() && !started_, "histogram: start_at(", range, ") after values were added");
  QAT_CHECK(std::isfinite(range) && range >= 0, "histogram: start_at needs a finite range >= 0, got ", range);
  if (range == 0) return;  // nothing but zeros ranged: the first non-zero tensor sets R
  range_ = range;
  started_ = true;
  preset_ = true;
}

void AbsHistogram::add(const float* x, int64_t n, float amax, const std::string& where) {
  QAT_CHECK(std::isfinite(amax), "histogram of ", where, ": the tensor holds an infinity (max |x| = ", amax,
            "); no finite threshold covers it");
  if (n == 0) return;
  grow_to(amax);
  amax_ = std::max(amax_, amax);
  const int64_t B = bins();
  const double per_unit = range_ > 0 ? static_cast<double>(B) / range_ : 0.0;
  const int64_t items = (n + kPiece - 1) / kPiece;
  uint64_t counted = 0, zeros = 0;
#pragma omp parallel reduction(+ : counted, zeros)
  {
    std::vector<uint64_t> local(static_cast<size_t>(B), 0);
#pragma omp for schedule(static)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t lo = it * kPiece, hi = std::min(n, lo + kPiece);
      for (int64_t i = lo; i < hi; ++i) {
        const float v = x[i];
        if (std::isnan(v)) continue;
        zeros += v == 0.f ? 1 : 0;
        ++local[static_cast<size_t>(bin_of(std::fabs(v), per_unit, B))];
        ++counted;
      }
    }
#pragma omp critical
    for (int64_t j = 0; j < B; ++j) counts_[static_cast<size_t>(j)] += local[static_cast<size_t>(j)];
  }
  total_ += counted;
  zeros_ += zeros;
}

std::vector<uint64_t> AbsHistogram::nonzero_counts() const {
  std::vector<uint64_t> c = counts_;
  c[0] -= zeros_;
  return c;
}

void AbsHistogram::merge(const AbsHistogram& other) {
  QAT_CHECK(other.bins() == bins(), "histogram merge: ", other.bins(), " bins into ", bins());
  if (other.empty()) return;
  grow_to(other.range_ > 0 ? other.range_ : 0.f);
  amax_ = std::max(amax_, other.amax_);
  const int64_t B = bins();
  const double w_other = static_cast<double>(other.range_) / static_cast<double>(B);
  const double per_unit = range_ > 0 ? static_cast<double>(B) / range_ : 0.0;
  for (int64_t j = 0; j < B; ++j) {
    const uint64_t c = other.counts_[static_cast<size_t>(j)];
    if (c == 0) continue;
    // Same range: the same bin (j + 0.5 lands inside bin j). Otherwise the bin holding the centre.
    const int64_t t = std::min<int64_t>(B - 1, static_cast<int64_t>((static_cast<double>(j) + 0.5) * w_other * per_unit));
    counts_[static_cast<size_t>(t)] += c;
  }
  total_ += other.total_;
  zeros_ += other.zeros_;
}

// ---------------------------------------------------------------- observer
HistogramObserver::HistogramObserver(const QuantSpec& spec, Calibrator calibrator, CalibratorOptions options,
                                     int64_t bins)
    : Observer(spec, 1),
      calibrator_(calibrator),
      options_(options),
      hist_(bins),
      min_val_(Tensor::full({1}, kInf)),
      max_val_(Tensor::full({1}, -kInf)) {
  QAT_CHECK(!spec.per_channel, "histogram observer: per-tensor only (activations); got ", spec.describe());
}

void HistogramObserver::update(const Tensor& x) {
  QAT_PROFILE("observer.histogram");
  const Tensor c = x.contiguous();
  float mn = kInf, mx = -kInf;
  reduce_minmax(c, false, 0, &mn, &mx);
  if (mn > mx) return;  // only NaNs
  QAT_CHECK(!ranging_ || (std::isfinite(mn) && std::isfinite(mx)), "histogram observer (", spec_.describe(),
            "): the tensor holds an infinity (min ", mn, ", max ", mx, "); no finite threshold covers it");
  float* lo = min_val_.data<float>();
  float* hi = max_val_.data<float>();
  lo[0] = std::min(lo[0], mn);
  hi[0] = std::max(hi[0], mx);
  min_val_.bump_version();
  max_val_.bump_version();
  if (ranging_) return;
  hist_.add(c.data<float>(), c.numel(), std::max(-mn, mx), "histogram observer (" + spec_.describe() + ")");
}

void HistogramObserver::set_ranging(bool on) {
  QAT_CHECK(!on || hist_.empty(), "histogram observer: ranging asked for after the histogram was filled");
  ranging_ = on;
}

void HistogramObserver::begin_histogram() {
  QAT_CHECK(ranging_, "histogram observer: begin_histogram() without a ranging pass before it");
  QAT_CHECK(hist_.empty(), "histogram observer: begin_histogram() on a histogram already filled");
  ranging_ = false;
  const float lo = min_val_.data<float>()[0], hi = max_val_.data<float>()[0];
  if (lo <= hi) hist_.start_at(std::max(-lo, hi));  // else nothing finite was ranged: the first tensor sets R
}

void HistogramObserver::reset() {
  ranging_ = false;
  hist_ = AbsHistogram(hist_.bins());
  min_val_.data<float>()[0] = kInf;
  max_val_.data<float>()[0] = -kInf;
  min_val_.bump_version();
  max_val_.bump_version();
}

float HistogramObserver::threshold(Calibrator c, const CalibratorOptions& o) const {
  QAT_CHECK(!hist_.empty(), "histogram observer: nothing observed; no threshold to choose");
  return choose_threshold(hist_, c, o, positive_levels(spec_, min_val_.data<float>()[0], max_val_.data<float>()[0]));
}

QParams HistogramObserver::qparams() const {
  if (hist_.empty()) return Observer::qparams();  // s = 1, z = 0 like every observer that saw nothing
  const float lo = min_val_.data<float>()[0], hi = max_val_.data<float>()[0];
  const float t = threshold();
  if (t == 0) return compute_qparams(spec_, min_val_, max_val_);  // only zeros seen: the floor scale
  return qparams_for_cache_scale(spec_, cache_scale(t), lo, hi);
}

std::string HistogramObserver::describe() const {
  std::ostringstream s;
  s << "HistogramObserver(" << hist_.bins() << " bins, " << calibrator_name(calibrator_);
  if (calibrator_ == Calibrator::percentile) s << " " << options_.percentile;
  s << ")";
  return s.str();
}

}  // namespace qat::quant
