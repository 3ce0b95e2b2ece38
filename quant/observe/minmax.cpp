#include "quant/observe/minmax.h"

#include <algorithm>
#include <limits>
#include <sstream>
#include <vector>

#include "core/collective.h"
#include "core/ops/common.h"
#include "quant/observe/channel_layout.h"
#if QAT_WITH_CUDA
#include "quant/observe/cuda_twins.h"
#endif

namespace qat::quant {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int kLanes = 32;                    // two AVX-512 registers per accumulator
constexpr int64_t kPiece = int64_t{1} << 15;  // elements per parallel work item

// min/max of p[0..n) folded into (mn, mx). `v < m ? v : m` is exactly
// vminps's semantics, so this vectorises without -ffast-math; NaN never wins.
inline void minmax_span(const float* __restrict p, int64_t n, float& mn, float& mx) {
  float lmn[kLanes], lmx[kLanes];
  for (int j = 0; j < kLanes; ++j) lmn[j] = mn, lmx[j] = mx;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const float v = p[i + j];
      lmn[j] = v < lmn[j] ? v : lmn[j];
      lmx[j] = v > lmx[j] ? v : lmx[j];
    }
  }
  for (; i < n; ++i) {
    const float v = p[i];
    lmn[0] = v < lmn[0] ? v : lmn[0];
    lmx[0] = v > lmx[0] ? v : lmx[0];
  }
  for (int j = 0; j < kLanes; ++j) {
    mn = lmn[j] < mn ? lmn[j] : mn;
    mx = lmx[j] > mx ? lmx[j] : mx;
  }
}

// Elementwise: mn[c] = min(mn[c], row[c]) for c < C (channels innermost).
inline void minmax_row(const float* __restrict row, int64_t C, float* __restrict mn, float* __restrict mx) {
  for (int64_t c = 0; c < C; ++c) {
    const float v = row[c];
    mn[c] = v < mn[c] ? v : mn[c];
    mx[c] = v > mx[c] ? v : mx[c];
  }
}

// m + c (cur - m) in float32 with the product rounded on its own, as
// PyTorch's separate tensor ops do (volatile: no FMA contraction).
inline float moving_average(float m, float cur, float c) {
  const float d = cur - m;
  volatile float u = c * d;
  return m + u;
}

}  // namespace

void reduce_minmax(const Tensor& x, bool per_channel, int64_t axis, float* cur_min, float* cur_max) {
  const Tensor xc = x.contiguous();
  const ChannelLayout l = ChannelLayout::of(xc, per_channel, axis);
  const int64_t C = l.channels;
  std::fill(cur_min, cur_min + C, kInf);
  std::fill(cur_max, cur_max + C, -kInf);
  const int64_t n = xc.numel();
  if (n == 0) return;
#if QAT_WITH_CUDA
  if (xc.device() == Device::cuda) return cuda_twin::reduce_minmax(xc, {l.outer, l.channels, l.inner}, cur_min, cur_max);
#endif
  const float* px = xc.data<float>();

  if (l.channels_innermost()) {
    // Blocks of rows, per-thread partials.
    const int64_t items = l.block_count(kPiece);
#pragma omp parallel if (n > detail::kParallelGrain && items > 1)
    {
      std::vector<float> lmn(C, kInf), lmx(C, -kInf);
#pragma omp for schedule(static)
      for (int64_t it = 0; it < items; ++it) {
        const auto [r0, r1] = l.block(it, kPiece);
        for (int64_t r = r0; r < r1; ++r) minmax_row(px + r * C, C, lmn.data(), lmx.data());
      }
#pragma omp critical(qat_observer_merge)
      for (int64_t c = 0; c < C; ++c) {
        cur_min[c] = lmn[c] < cur_min[c] ? lmn[c] : cur_min[c];
        cur_max[c] = lmx[c] > cur_max[c] ? lmx[c] : cur_max[c];
      }
    }
    return;
  }

  const int64_t items = l.run_count(kPiece);
#pragma omp parallel if (n > detail::kParallelGrain && items > 1)
  {
    std::vector<float> lmn(C, kInf), lmx(C, -kInf);
#pragma omp for schedule(static)
    for (int64_t it = 0; it < items; ++it) {
      const ChannelLayout::Run run = l.run(it, kPiece);
      minmax_span(px + run.offset, run.length, lmn[run.channel], lmx[run.channel]);
    }
#pragma omp critical(qat_observer_merge)
    for (int64_t c = 0; c < C; ++c) {
      cur_min[c] = lmn[c] < cur_min[c] ? lmn[c] : cur_min[c];
      cur_max[c] = lmx[c] > cur_max[c] ? lmx[c] : cur_max[c];
    }
  }
}

MinMaxStateObserver::MinMaxStateObserver(const QuantSpec& spec, int64_t channels) : Observer(spec, channels) {
  min_val_ = Tensor::full({channels}, kInf);
  max_val_ = Tensor::full({channels}, -kInf);
}

void MinMaxStateObserver::reset() {
  min_val_.fill_(kInf);
  max_val_.fill_(-kInf);
}

void MinMaxStateObserver::update(const Tensor& x) {
  const int64_t C = channels();
  QAT_CHECK(min_val_.numel() == C && max_val_.numel() == C && min_val_.is_contiguous() && max_val_.is_contiguous(),
            "observer: state tensors were replaced (shapes ", min_val_.sizes(), ", ", max_val_.sizes(), ")");
  std::vector<float> cur_min(C), cur_max(C);
  reduce_minmax(x, spec_.per_channel, spec_.axis, cur_min.data(), cur_max.data());
  // Data-parallel runs: the range of the global batch, so that every process
  // folds the same values and keeps the same qparams (core/collective.h).
  if (Collective* all = collective()) {
    all->min(cur_min.data(), C);
    all->max(cur_max.data(), C);
  }
  for (int64_t c = 0; c < C; ++c) fold_channel(c, cur_min[c], cur_max[c]);
  end_fold();
}

void MinMaxStateObserver::channel_range(int64_t c, float& lo, float& hi) const {
  lo = min_val_.data<float>()[c];
  hi = max_val_.data<float>()[c];
}

void MinMaxStateObserver::end_fold() {
  min_val_.bump_version();
  max_val_.bump_version();
}

void MinMaxStateObserver::fold_channel(int64_t c, float cur_min, float cur_max) {
  fold(min_val_.data<float>()[c], max_val_.data<float>()[c], cur_min, cur_max);
}

void MinMaxStateObserver::preview_channel(int64_t c, float cur_min, float cur_max, float& lo, float& hi) const {
  channel_range(c, lo, hi);
  fold(lo, hi, cur_min, cur_max);
}

void MinMaxObserver::fold(float& mn, float& mx, float cur_min, float cur_max) const {
  mn = cur_min < mn ? cur_min : mn;
  mx = cur_max > mx ? cur_max : mx;
}

std::string MinMaxObserver::describe() const { return "MinMaxObserver(" + spec_.describe() + ")"; }

MovingAverageMinMaxObserver::MovingAverageMinMaxObserver(const QuantSpec& spec, int64_t channels,
                                                         float averaging_constant)
    : MinMaxStateObserver(spec, channels), c_(averaging_constant) {
  QAT_CHECK(c_ > 0.f && c_ <= 1.f, "MovingAverageMinMaxObserver: averaging constant must be in (0, 1], got ", c_);
}

void MovingAverageMinMaxObserver::fold(float& mn, float& mx, float lo, float hi) const {
  if (!(lo <= hi)) return;  // channel held only NaNs
  if (mn == kInf && mx == -kInf) {  // first observation initialises
    mn = lo;
    mx = hi;
  } else {
    mn = moving_average(mn, lo, c_);
    mx = moving_average(mx, hi, c_);
  }
}

std::string MovingAverageMinMaxObserver::describe() const {
  std::ostringstream os;
  os << "MovingAverageMinMaxObserver(" << spec_.describe() << ", c=" << c_ << ")";
  return os.str();
}

std::unique_ptr<Observer> make_observer(QuantMethod method, const QuantSpec& spec, int64_t channels,
                                        float averaging_constant) {
  switch (method) {
    case QuantMethod::minmax:
      return std::make_unique<MinMaxObserver>(spec, channels);
    case QuantMethod::moving_average:
      return std::make_unique<MovingAverageMinMaxObserver>(spec, channels, averaging_constant);
    case QuantMethod::lsq:
    case QuantMethod::lsq_plus:
      break;
  }
  QAT_FAIL("make_observer: method '", method_name(method), "' learns its qparams; it has no observer");
}

}  // namespace qat::quant
