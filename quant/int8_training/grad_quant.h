#pragma once
// Gradient quantization for INT8 training (Zhu et al. 2020): the per-tensor
// quantizer of a backward gradient, its direction error, the clip search that
// minimises that error and the learning-rate scale derived from it. Pure
// functions on float arrays; no tensors, no autograd, no state.
//
// Note [gradient quantization]
// ----------------------------
// A gradient tensor g is quantized symmetrically per tensor on b bits with a
// clip c > 0:
//   qmax = 2^(b-1) - 1,   s = c / qmax,   x = g / s   (computed as g * (1/s))
//   stochastic: q = clamp(floor(x + u), -qmax, qmax),   u ~ U[0, 1)
//   nearest:    q = clamp(nearbyint(x), -qmax, qmax)
// and stands for g ~ q s. Stochastic rounding (Banner et al. 2018, "Scalable
// Methods for 8-bit Training of Neural Networks") is unbiased inside the
// range: with f = x - floor(x), q = floor(x) + 1 with probability f, so
// E[q] = floor(x) + f = x, i.e. E[q s] = g; SGD then sees the true gradient in
// expectation. Nearest rounding is biased (E[q] = round(x)), and the bias does
// not average out over steps. Here u is drawn on a 2^-24 grid, so E[q] is x to
// within 2^-24, and u is a pure function of (key, element index), so a
// quantized gradient is reproducible and independent of the thread count.
//
// Zhu et al. 2020 ("Towards Unified INT8 Training for Convolutional Neural
// Network", CVPR) observe that gradients are long-tailed and that what hurts
// training is the error in the gradient's direction. They measure it as
//   d(c) = 1 - cos(g, Q_c(g)) = 1 - <g, q s> / (|g| |q s|),
// which does not depend on s (it cancels), and
//  - direction-sensitive gradient clipping: pick the c in (0, max|g|] that
//    minimises d(c) (here measured with nearest rounding, so d(c) is a
//    deterministic function of c to search over), and
//  - deviation-counteractive learning-rate scaling: scale the learning rate by
//    phi(d) = max(exp(-alpha d), beta)   (alpha > 0, 0 < beta <= 1: hyperparameters),
//    so a step with a badly pointed gradient moves less, but never below beta.
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/enum_names.h"
#include "core/host_device.h"

namespace qat::quant {

enum class GradRounding { stochastic, nearest };
constexpr auto enum_names(GradRounding) {
  return std::to_array<EnumName<GradRounding>>(
      {{GradRounding::stochastic, "stochastic"}, {GradRounding::nearest, "nearest"}});
}

// splitmix64's finaliser (Steele, Lea, Flood 2014): a bijection of 64 bits
// whose outputs for consecutive inputs look independent.
QAT_HOST_DEVICE inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// sr_uniform with the key already mixed (mix64(key)): position `index` of a
// splitmix64 stream. Inline: the quantization loops call it per element.
QAT_HOST_DEVICE inline float sr_uniform_mixed(uint64_t mixed_key, uint64_t index) {
  const uint64_t z = mixed_key + (index + 1) * 0x9E3779B97F4A7C15ull;
  return static_cast<float>(mix64(z) >> 40) * 0x1.0p-24f;  // top 24 bits: exact, < 1
}

// Counter-based uniform in [0, 1) on a 2^-24 grid (every value exact in float):
// a pure function of (key, index), so element i's draw does not depend on
// which thread, or in which order, it is made. Mixing the key first keeps
// nearby keys (seed, seed + 1) from sharing streams shifted by a few indices.
QAT_HOST_DEVICE inline float sr_uniform(uint64_t key, uint64_t index) { return sr_uniform_mixed(mix64(key), index); }

// Largest integer magnitude of a symmetric b-bit gradient grid: 2^(b-1) - 1
// (127 for 8 bits; -128 is left out so the grid is symmetric). bits in [2, 8].
int grad_qmax(int bits);

// One element (Note [gradient quantization]); u in [0, 1) is used only by
// stochastic rounding. floor(x + u) is taken in double: x + u is then exact,
// so the rounding up happens with probability exactly frac(x) (to u's 2^-24
// grid); a float sum would round near the integer boundaries. NaN gives 0 (a
// cast of NaN to an integer is undefined); max_abs() is where a NaN shows.
// Host and device (INT8 training's CUDA twins, quant/int8_training/int8_device.h).
QAT_HOST_DEVICE inline int8_t quantize_grad_value(float g, float inv_s, int qmax, GradRounding r, float u) {
  const float x = g * inv_s;
  // Back in float the integer is exact wherever it is not clamped (|v| <= 2^24).
#if defined(__CUDA_ARCH__)
  float v = r == GradRounding::stochastic ? static_cast<float>(floor(static_cast<double>(x) + static_cast<double>(u)))
                                          : nearbyintf(x);
#else
  float v = r == GradRounding::stochastic
                ? static_cast<float>(std::floor(static_cast<double>(x) + static_cast<double>(u)))
                : std::nearbyint(x);
#endif
  v = v == v ? v : 0.0f;  // selects, not branches: the loops over it vectorise
  const float hi = static_cast<float>(qmax);
  return static_cast<int8_t>(v < -hi ? -hi : (v > hi ? hi : v));
}

// Sums that give the cosine between g and its quantized value q s, with g in
// units of s (x = g / s): dot = sum x q, qq = sum q^2, gg = sum x^2.
struct GradQuantStats {
  double dot = 0, qq = 0, gg = 0;
  void add(const GradQuantStats& o) {
    dot += o.dot;
    qq += o.qq;
    gg += o.gg;
  }
};

// d = 1 - dot / sqrt(qq gg), kept in [0, 2] (rounding may push a cosine of 1 a
// hair above 1); 0 when gg == 0 (an all-zero gradient is reproduced exactly);
// 1 when qq == 0 and gg > 0 (everything rounded to 0: no direction left). NaN
// sums give NaN.
double cosine_distance(const GradQuantStats& s);

// Quantizes n contiguous floats with clip c >= 0 (finite; s = c / qmax) into
// out[0..n). Stochastic rounding draws u = sr_uniform(key, index0 + i) for
// element i, so a tensor quantized in pieces (index0 = the piece's offset)
// equals the tensor quantized whole. clip == 0 means "nothing to quantize"
// (search_clip's answer for an all-zero g): out is all 0 and the stats have
// dot = qq = 0 and gg = sum g^2 (so the distance is 0 only for an all-zero g).
// OpenMP over fixed chunks when n is large; the stats are summed per chunk
// and then over chunks in order, so they are independent of the thread count.
GradQuantStats quantize_grad(const float* g, int64_t n, float clip, int bits, GradRounding r, uint64_t key,
                             uint64_t index0, int8_t* out);

// d(c) = 1 - cos(g, Q_c(g)) with nearest rounding, without storing q (same
// sums, same threading rule as quantize_grad). clip > 0 and finite.
double clip_cosine_distance(const float* g, int64_t n, float clip, int bits);

// Note [clip search lanes]: the search evaluates d(c) some sixty times per
// gradient, so its sums run eight independent chains, one per SIMD lane. The
// n values are cut into chunks of 2^14 (the last one shorter); element b + k
// of the chunk starting at b goes to lane k % 8; each lane sums its elements
// in order, one fused multiply-add per term; a chunk's lanes are added lane 0
// first, and the chunks' sums in order. Every kernel below keeps exactly
// that order and those operations, so the sums (and the clip found) are the
// same bits on every CPU and in every build. (The avx2 kernel runs G and
// Gx, grad_rows.h; its clip search is the scalar loop.)
enum class GradStatsKernel { scalar, avx2, avx512 };
constexpr auto enum_names(GradStatsKernel) {
  return std::to_array<EnumName<GradStatsKernel>>(
      {{GradStatsKernel::scalar, "scalar"}, {GradStatsKernel::avx2, "avx2"}, {GradStatsKernel::avx512, "avx512"}});
}
bool grad_stats_kernel_runs_here(GradStatsKernel kernel);
GradStatsKernel best_grad_stats_kernel();
// Throws qat::Error naming `op` when `kernel` does not run on this CPU.
void check_grad_stats_kernel(GradStatsKernel kernel, const char* op);
// clip_cosine_distance's sums on one kernel (the tests run each the CPU has).
GradQuantStats clip_cosine_stats(const float* g, int64_t n, float clip, int bits, GradStatsKernel kernel);

// max |g_i|: 0 for n == 0, NaN if any element is NaN (never hidden by the max).
float max_abs(const float* g, int64_t n);

// One pass over |g_i s_i| (the product in float, as the quantizers form it):
// its largest value (NaN left out), and whether one was NaN or not finite.
struct SpanAbsMax {
  float max = 0;
  bool nan = false, non_finite = false;
};
// s(i): element i's scale. Written in lanes, so it vectorises without
// -ffast-math: `a > m ? a : m` is vmaxps's semantics (a NaN never wins), so
// NaN and non-finite values are flagged in lanes of their own.
template <class Scale>
SpanAbsMax abs_max_lanes(const float* __restrict g, int64_t n, Scale s) {
  constexpr int kLanes = 32;  // two AVX-512 registers per accumulator
  float mx[kLanes] = {}, nan[kLanes] = {}, bad[kLanes] = {};
  auto step = [&](int j, int64_t i) {
    const float a = std::fabs(g[i] * s(i));
    mx[j] = a > mx[j] ? a : mx[j];
    nan[j] = a != a ? 1.f : nan[j];
    bad[j] = a <= std::numeric_limits<float>::max() ? bad[j] : 1.f;  // (NaN and inf fail it)
  };
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) step(j, i + j);
  for (; i < n; ++i) step(0, i);
  SpanAbsMax r;
  for (int j = 0; j < kLanes; ++j) {
    r.max = mx[j] > r.max ? mx[j] : r.max;
    r.nan |= nan[j] != 0.f;
    r.non_finite |= bad[j] != 0.f;
  }
  return r;
}
// The same with one scale for the whole span.
SpanAbsMax span_abs_max(const float* g, int64_t n, float s);

// Direction-sensitive clipping: the clip in (0, max|g|] with the least d(c).
// d is not unimodal in general (rounding makes it jagged), so: a coarse
// geometric grid c = max|g| 2^(-j/4), j = 0..48 (down to max|g| / 2^12),
// then a golden-section search over log c on the bracket between the best grid
// point's neighbours, 12 evaluations. Returns the best clip evaluated, its
// distance and the number of evaluations of d. All-zero (or empty) g: clip 0,
// distance 0, no evaluations; so too a g whose max|g| is not a usable clip
// (below usable_clip_min: tiny, finite values whose grid step's inverse
// overflows float), and grid points below it are not evaluated (they threw).
// Throws qat::Error when g has a NaN or an inf.
// The smallest clip whose grid step s = clip / qmax has a finite 1 / s (about
// 3.7e-37 at 8 bits); a gradient of smaller magnitude quantizes to zeros
// (clip 0), as an all-zero one does.
float usable_clip_min(int bits);
// c itself, or 0 (nothing to quantize) when c is below usable_clip_min(bits).
float usable_clip(float c, int bits);

struct ClipSearch {
  float clip = 0;
  double distance = 0;
  int evaluations = 0;
};
ClipSearch search_clip(const float* g, int64_t n, int bits);

// Error-sensitive learning-rate scale phi(d) = max(exp(-alpha d), beta).
double lr_scale_for(double distance, double alpha, double beta);

}  // namespace qat::quant
