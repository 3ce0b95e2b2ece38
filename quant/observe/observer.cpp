#include "quant/observe/observer.h"


#include <algorithm>
#include <limits>
#include <sstream>

#include "core/ops/common.h"

namespace qat::quant {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int kLanes = 32;             // two AVX-512 registers per accumulator
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
  const float* px = xc.data<float>();
  const Shape& sz = xc.sizes();
  int64_t outer = 1, C = 1, inner = 1;
  if (per_channel) {
    QAT_CHECK(axis >= 0 && axis < xc.dim(), "observer: channel axis ", axis, " out of range for shape ", sz);
    for (int64_t d = 0; d < axis; ++d) outer *= sz[d];
    C = sz[axis];
    for (int64_t d = axis + 1; d < xc.dim(); ++d) inner *= sz[d];
  } else {
    inner = xc.numel();
  }
  std::fill(cur_min, cur_min + C, kInf);
  std::fill(cur_max, cur_max + C, -kInf);
  const int64_t n = xc.numel();
  if (n == 0) return;

  if (inner == 1 && C > 1) {
    // Channels innermost ((N, C) activations): blocks of rows, per-thread partials.
    const int64_t rows_per_item = std::max<int64_t>(1, kPiece / C);
    const int64_t items = (outer + rows_per_item - 1) / rows_per_item;
#pragma omp parallel if (n > detail::kParallelGrain && items > 1)
    {
      std::vector<float> lmn(C, kInf), lmx(C, -kInf);
#pragma omp for schedule(static)
      for (int64_t it = 0; it < items; ++it) {
        const int64_t r1 = std::min(outer, (it + 1) * rows_per_item);
        for (int64_t r = it * rows_per_item; r < r1; ++r) minmax_row(px + r * C, C, lmn.data(), lmx.data());
      }
#pragma omp critical(qat_observer_merge)
      for (int64_t c = 0; c < C; ++c) {
        cur_min[c] = lmn[c] < cur_min[c] ? lmn[c] : cur_min[c];
        cur_max[c] = lmx[c] > cur_max[c] ? lmx[c] : cur_max[c];
      }
    }
    return;
  }

  // Rows of `inner` contiguous elements (row r belongs to channel r % C), each
  // cut into pieces of at most kPiece; the pieces are the parallel work items.
  const int64_t rows = outer * C;
  const int64_t pieces = (inner + kPiece - 1) / kPiece;
  const int64_t items = rows * pieces;
#pragma omp parallel if (n > detail::kParallelGrain && items > 1)
  {
    std::vector<float> lmn(C, kInf), lmx(C, -kInf);
#pragma omp for schedule(static)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t r = it / pieces, k = it % pieces;
      const int64_t c = r % C;
      const int64_t b = k * kPiece, e = std::min(inner, b + kPiece);
      minmax_span(px + r * inner + b, e - b, lmn[c], lmx[c]);
    }
#pragma omp critical(qat_observer_merge)
    for (int64_t c = 0; c < C; ++c) {
      cur_min[c] = lmn[c] < cur_min[c] ? lmn[c] : cur_min[c];
      cur_max[c] = lmx[c] > cur_max[c] ? lmx[c] : cur_max[c];
    }
  }
}

Observer::Observer(const QuantSpec& spec, int64_t channels) : spec_(spec) {
  spec_.validate("observer");
  QAT_CHECK(channels >= 1, "observer: channels must be >= 1, got ", channels);
  QAT_CHECK(spec_.per_channel || channels == 1, "observer: a per-tensor spec (", spec_.describe(),
            ") takes channels = 1, got ", channels);
  min_val_ = Tensor::full({channels}, kInf);
  max_val_ = Tensor::full({channels}, -kInf);
}

bool Observer::initialized() const {
  const float* mn = min_val_.data<float>();
  const float* mx = max_val_.data<float>();
  return !(mn[0] == kInf && mx[0] == -kInf);
}

void Observer::reset() {
  min_val_.fill_(kInf);
  max_val_.fill_(-kInf);
}

void Observer::observe(const Tensor& x) {
  if (!enabled) return;
  QAT_PROFILE("observer.observe");
  detail::check_f32(x, "observer", "input");
  if (x.numel() == 0) return;
  const int64_t C = channels();
  if (spec_.per_channel) {
    QAT_CHECK(spec_.axis < x.dim(), "observer: channel axis ", spec_.axis, " out of range for input shape ",
              x.sizes());
    QAT_CHECK(x.size(spec_.axis) == C, "observer: expected ", C, " channels along axis ", spec_.axis,
              ", got input shape ", x.sizes());
  }
  QAT_CHECK(min_val_.numel() == C && max_val_.numel() == C && min_val_.is_contiguous() && max_val_.is_contiguous(),
            "observer: state tensors were replaced (shapes ", min_val_.sizes(), ", ", max_val_.sizes(), ")");
  std::vector<float> cur_min(C), cur_max(C);
  reduce_minmax(x, spec_.per_channel, spec_.axis, cur_min.data(), cur_max.data());
  update(0, C, cur_min.data(), cur_max.data());
  min_val_.bump_version();
  max_val_.bump_version();
}

void MinMaxObserver::update(int64_t c0, int64_t c1, const float* cur_min, const float* cur_max) {
  float* mn = min_val_.data<float>();
  float* mx = max_val_.data<float>();
  for (int64_t c = c0; c < c1; ++c) {
    mn[c] = cur_min[c - c0] < mn[c] ? cur_min[c - c0] : mn[c];
    mx[c] = cur_max[c - c0] > mx[c] ? cur_max[c - c0] : mx[c];
  }
}

std::string MinMaxObserver::describe() const { return "MinMaxObserver(" + spec_.describe() + ")"; }

MovingAverageMinMaxObserver::MovingAverageMinMaxObserver(const QuantSpec& spec, int64_t channels,
                                                         float averaging_constant)
    : Observer(spec, channels), c_(averaging_constant) {
  QAT_CHECK(c_ > 0.f && c_ <= 1.f, "MovingAverageMinMaxObserver: averaging constant must be in (0, 1], got ", c_);
}

void MovingAverageMinMaxObserver::update(int64_t c0, int64_t c1, const float* cur_min, const float* cur_max) {
  float* mn = min_val_.data<float>();
  float* mx = max_val_.data<float>();
  for (int64_t c = c0; c < c1; ++c) {
    const float lo = cur_min[c - c0], hi = cur_max[c - c0];
    if (!(lo <= hi)) continue;               // channel held only NaNs
    if (mn[c] == kInf && mx[c] == -kInf) {  // first observation initialises
      mn[c] = lo;
      mx[c] = hi;
    } else {
      mn[c] = moving_average(mn[c], lo, c_);
      mx[c] = moving_average(mx[c], hi, c_);
    }
  }
}

std::string MovingAverageMinMaxObserver::describe() const {
  std::ostringstream os;
  os << "MovingAverageMinMaxObserver(" << spec_.describe() << ", c=" << c_ << ")";
  return os.str();
}

std::unique_ptr<Observer> make_observer(ObserverKind kind, const QuantSpec& spec, int64_t channels,
                                        float averaging_constant) {
  switch (kind) {
    case ObserverKind::minmax:
      return std::make_unique<MinMaxObserver>(spec, channels);
    case ObserverKind::moving_average:
      return std::make_unique<MovingAverageMinMaxObserver>(spec, channels, averaging_constant);
  }
  QAT_FAIL("make_observer: unknown observer kind");
}

}  // namespace qat::quant
