#include "quant/observe/calibrators.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "quant/observe/histogram.h"

namespace qat::quant {

const char* calibrator_name(Calibrator c) { return enum_name(c); }

const CalibratorRow& calibrator_row(Calibrator c) {
  for (const CalibratorRow& r : kCalibrators)
    if (r.id == c) return r;
  QAT_FAIL("calibrator_row: unknown calibrator ", static_cast<int>(c));
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double total_of(const std::vector<uint64_t>& counts) {
  double t = 0;
  for (uint64_t c : counts) t += static_cast<double>(c);
  return t;
}

// KL(P || Q) of the candidate keeping the first i bins (calibrators.h).
// group_sum / group_nonzero: scratch of `levels` entries.
double candidate_kl(const std::vector<uint64_t>& counts, int64_t i, int64_t levels, std::vector<double>& group_sum,
                    std::vector<int64_t>& group_nonzero) {
  std::fill(group_sum.begin(), group_sum.end(), 0.0);
  std::fill(group_nonzero.begin(), group_nonzero.end(), 0);
  double outliers = 0;
  for (size_t j = static_cast<size_t>(i); j < counts.size(); ++j) outliers += static_cast<double>(counts[j]);
  double p_sum = 0, q_sum = 0;
  for (int64_t j = 0; j < i; ++j) {
    const double c = static_cast<double>(counts[j]);
    const int64_t g = j * levels / i;
    group_sum[g] += c;
    if (counts[j] != 0) ++group_nonzero[g];
    p_sum += c;
  }
  p_sum += outliers;
  for (int64_t j = 0; j < i; ++j)
    if (counts[j] != 0) q_sum += group_sum[j * levels / i] / static_cast<double>(group_nonzero[j * levels / i]);
  if (q_sum == 0) return kInf;
  double kl = 0;
  for (int64_t j = 0; j < i; ++j) {
    const double p = (static_cast<double>(counts[j]) + (j == i - 1 ? outliers : 0.0)) / p_sum;
    if (p == 0) continue;
    if (counts[j] == 0) return kInf;  // P has mass (folded outliers) where Q has none
    const int64_t g = j * levels / i;
    const double q = group_sum[g] / static_cast<double>(group_nonzero[g]) / q_sum;
    kl += p * std::log(p / q);
  }
  return kl;
}

}  // namespace

int64_t percentile_bins(const std::vector<uint64_t>& counts, double percentile) {
  QAT_CHECK(!counts.empty(), "percentile calibrator: empty histogram");
  QAT_CHECK(percentile > 0 && percentile <= 100, "percentile calibrator: percentile must be in (0, 100], got ",
            percentile);
  const double target = total_of(counts) * percentile / 100.0;
  double cum = 0;
  for (size_t k = 0; k < counts.size(); ++k) {
    cum += static_cast<double>(counts[k]);
    if (cum >= target && cum > 0) return static_cast<int64_t>(k) + 1;
  }
  return static_cast<int64_t>(counts.size());
}

int64_t mse_bins(const std::vector<uint64_t>& counts, int64_t levels) {
  QAT_CHECK(!counts.empty(), "mse calibrator: empty histogram");
  QAT_CHECK(levels >= 1, "mse calibrator: levels must be >= 1, got ", levels);
  const int64_t B = static_cast<int64_t>(counts.size());
  int64_t best = B;
  double best_err = kInf, below = 0;
  // In units of the bin width; bin j's values sit at its centre j + 0.5.
  for (int64_t i = 1; i <= B; ++i) {
    below += static_cast<double>(counts[i - 1]);
    const double s = static_cast<double>(i) / static_cast<double>(levels);
    double clipped = 0;
    for (int64_t j = i; j < B; ++j) {
      const double d = static_cast<double>(j) + 0.5 - static_cast<double>(i);
      clipped += static_cast<double>(counts[j]) * d * d;
    }
    const double err = s * s / 12.0 * below + clipped;
    if (err < best_err) best_err = err, best = i;
  }
  return best;
}

int64_t entropy_bins(const std::vector<uint64_t>& counts, int64_t levels, int64_t start_bin) {
  QAT_CHECK(levels >= 2, "entropy calibrator: levels must be >= 2, got ", levels);
  QAT_CHECK(start_bin >= levels, "entropy calibrator: the first candidate (", start_bin,
            " bins) must hold at least one bin per level (", levels, ")");
  const int64_t B = static_cast<int64_t>(counts.size());
  if (start_bin >= B) return B;
  std::vector<double> group_sum(static_cast<size_t>(levels));
  std::vector<int64_t> group_nonzero(static_cast<size_t>(levels));
  int64_t best = B;
  double best_kl = kInf;
  for (int64_t i = start_bin; i <= B; ++i) {
    const double kl = candidate_kl(counts, i, levels, group_sum, group_nonzero);
    if (kl < best_kl) best_kl = kl, best = i;
  }
  return best;
}

int64_t positive_levels(const QuantSpec& spec, float observed_min, float observed_max) {
  const int64_t span = static_cast<int64_t>(spec.qmax()) - spec.qmin();
  if (!spec.symmetric && (observed_min >= 0 || observed_max <= 0)) return span;  // one sign: the whole grid
  return span / 2;
}

float choose_threshold(const AbsHistogram& h, Calibrator c, const CalibratorOptions& o, int64_t levels) {
  if (c == Calibrator::max || h.range() == 0) return h.amax();
  int64_t i = 0;
  switch (c) {
    case Calibrator::percentile: i = percentile_bins(h.counts(), o.percentile); break;
    // Exact zeros (ReLU outputs: often half of them) are exact on every grid:
    // they carry no rounding or clipping error, and in the KL search their
    // spike in bin 0, spread over its group by Q, would drive T to the first
    // candidate. Both searches leave them out.
    case Calibrator::mse: i = mse_bins(h.nonzero_counts(), levels); break;
    case Calibrator::entropy:  // uint8 over non-negative data: 256 levels, so the search starts at bin 256
      i = entropy_bins(h.nonzero_counts(), levels + 1, std::max(o.entropy_start_bin, levels + 1));
      break;
    case Calibrator::max: break;
  }
  const double t = static_cast<double>(h.range()) * static_cast<double>(i) / static_cast<double>(h.bins());
  return std::min(static_cast<float>(t), h.amax());
}

float cache_scale(float threshold) { return threshold / 127.0f; }

QParams qparams_for_cache_scale(const QuantSpec& spec, float scale, float min_val, float max_val) {
  QAT_CHECK(std::isfinite(scale) && scale > 0, "calibration scale must be finite and > 0, got ", scale);
  QParams q{Tensor::empty({1}), Tensor::empty({1}, DType::i32)};
  float& s = q.scale.data<float>()[0];
  int32_t& z = q.zero_point.data<int32_t>()[0];
  const float t = scale * 127.0f;
  if (spec.symmetric) {
    qparams_from_range(spec, -t, t, s, z);
    if (spec.formula == ScaleFormula::amax_over_qmax && spec.qmax() == 127) s = std::max(scale, scale_floor(spec));
    return q;
  }
  QAT_CHECK(min_val <= max_val, "calibration: an affine grid needs the observed range, got [", min_val, ", ",
            max_val, "]");
  qparams_from_range(spec, std::max(min_val, -t), std::min(max_val, t), s, z);
  return q;
}

}  // namespace qat::quant
