#include "quant/int8_training/grad_quant.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "quant/int8_training/grad_simd.h"

namespace qat::quant {

namespace {

// Elements per work item. The stats are summed inside a chunk in a fixed
// order, then over chunks in index order, so the thread count never changes a
// bit of the result. Work goes to OpenMP threads only when there are at least
// two chunks' worth (a thread fork costs more than a small tensor's pass).
constexpr int64_t kChunk = int64_t{1} << 14;
// Independent partial sums inside a chunk: a fixed lane per element keeps the
// order fixed while giving the adds eight chains instead of one.
constexpr int kLanes = 8;

inline int64_t chunk_count(int64_t n) { return (n + kChunk - 1) / kChunk; }

// The lanes' sums, lane 0 first.
GradQuantStats fold_lanes(const double* dot, const double* qq, const double* gg) {
  GradQuantStats s;
  for (int j = 0; j < kLanes; ++j) s.add({dot[j], qq[j], gg[j]});
  return s;
}

// Runs chunk(c) -> GradQuantStats for every chunk and sums them in order.
template <class F>
GradQuantStats sum_chunks(int64_t n, F chunk) {
  const int64_t nc = chunk_count(n);
  std::vector<GradQuantStats> part(static_cast<size_t>(nc));
#pragma omp parallel for schedule(static) if (nc > 1)
  for (int64_t c = 0; c < nc; ++c) part[static_cast<size_t>(c)] = chunk(c * kChunk, std::min(n, (c + 1) * kChunk));
  GradQuantStats total;
  for (const GradQuantStats& p : part) total.add(p);
  return total;
}

// One chunk [b, e): q from quantize_grad_value (stored when kStore), the
// sums over element b + k kept in lane k % kLanes and folded lane 0 first
// (Note [clip search lanes]). u is drawn only for stochastic rounding. The
// sums take x in double: g * inv is exact there (24 x 24 bits), so d is the
// cosine of g and q s up to the sums' rounding, not off by the float
// product's (~1e-9 in d).
template <GradRounding R, bool kStore>
GradQuantStats quantize_chunk(const float* __restrict g, int64_t b, int64_t e, float inv, int qmax, uint64_t key,
                              uint64_t index0, int8_t* __restrict out) {
  double dot[kLanes] = {}, qq[kLanes] = {}, gg[kLanes] = {};
  const uint64_t mixed = mix64(key);
  auto step = [&](int64_t i, int j) {
    const float u = R == GradRounding::stochastic ? sr_uniform_mixed(mixed, index0 + static_cast<uint64_t>(i)) : 0.f;
    const int8_t q = quantize_grad_value(g[i], inv, qmax, R, u);
    if constexpr (kStore) out[i] = q;
    const double x = static_cast<double>(g[i]) * inv, qd = q;
    dot[j] = std::fma(x, qd, dot[j]);
    qq[j] = std::fma(qd, qd, qq[j]);
    gg[j] = std::fma(x, x, gg[j]);
  };
  int64_t i = b;
  for (; i + kLanes <= e; i += kLanes)
    for (int j = 0; j < kLanes; ++j) step(i + j, j);
  for (int j = 0; i < e; ++i, ++j) step(i, j);
  return fold_lanes(dot, qq, gg);
}

#if defined(__x86_64__)
// quantize_chunk<nearest, false> on AVX-512: lane j of each vector is lane j
// of the scalar loop, every operation the scalar one (grad_simd.h's
// rounding and clamp; q to double through int32), so the same bits.
// Sixteen elements a turn:
// the first eight, then the next eight, as the scalar loop meets them.
#define QAT_GQ_AVX512 __attribute__((target("avx512f,avx512vl")))
struct LaneSums512 {
  __m512d dot, qq, gg;
};

// Eight elements (lanes `live`) of g in double, with their q.
QAT_GQ_AVX512 inline void add8(LaneSums512& s, __m256 g8, __m256i q8, __m512d inv, __mmask8 live) {
  const __m512d x = _mm512_mul_pd(_mm512_cvtps_pd(g8), inv);
  const __m512d qd = _mm512_cvtepi32_pd(q8);
  s.dot = _mm512_mask3_fmadd_pd(x, qd, s.dot, live);
  s.qq = _mm512_mask3_fmadd_pd(qd, qd, s.qq, live);
  s.gg = _mm512_mask3_fmadd_pd(x, x, s.gg, live);
}

// Sixteen floats (lanes `live`) to their nearest-rounded, clamped integers.
QAT_GQ_AVX512 inline __m512i nearest16(__m512 g, __m512 inv, __m512 hi, __mmask16 live) {
  return grad_simd::clamped_integers(grad_simd::nearest(g, inv), hi, live);
}

QAT_GQ_AVX512 GradQuantStats nearest_chunk_avx512(const float* g, int64_t b, int64_t e, float inv, int qmax) {
  const __m512 vinv = _mm512_set1_ps(inv), hi = _mm512_set1_ps(static_cast<float>(qmax));
  const __m512d dinv = _mm512_set1_pd(static_cast<double>(inv));
  LaneSums512 s{_mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd()};
  int64_t i = b;
  for (; i + 16 <= e; i += 16) {
    const __m512 gv = _mm512_loadu_ps(g + i);
    const __m512i q = nearest16(gv, vinv, hi, 0xFFFF);
    add8(s, _mm512_castps512_ps256(gv), _mm512_castsi512_si256(q), dinv, 0xFF);
    add8(s, _mm256_loadu_ps(g + i + 8), _mm512_extracti64x4_epi64(q, 1), dinv, 0xFF);
  }
  if (i < e) {  // the tail: lanes 0.. of the next eight, then of the eight after
    const __mmask16 live = static_cast<__mmask16>((1u << (e - i)) - 1);
    const __m512 gv = _mm512_maskz_loadu_ps(live, g + i);
    const __m512i q = nearest16(gv, vinv, hi, live);
    add8(s, _mm512_castps512_ps256(gv), _mm512_castsi512_si256(q), dinv, static_cast<__mmask8>(live));
    add8(s, _mm256_maskz_loadu_ps(static_cast<__mmask8>(live >> 8), g + i + 8), _mm512_extracti64x4_epi64(q, 1), dinv,
         static_cast<__mmask8>(live >> 8));
  }
  alignas(64) double dot[kLanes], qq[kLanes], gg[kLanes];
  _mm512_store_pd(dot, s.dot);
  _mm512_store_pd(qq, s.qq);
  _mm512_store_pd(gg, s.gg);
  return fold_lanes(dot, qq, gg);
}
#undef QAT_GQ_AVX512
#endif

GradQuantStats nearest_chunk(const float* g, int64_t b, int64_t e, float inv, int qmax, GradStatsKernel kernel) {
#if defined(__x86_64__)
  if (kernel == GradStatsKernel::avx512) return nearest_chunk_avx512(g, b, e, inv, qmax);
#endif
  return quantize_chunk<GradRounding::nearest, false>(g, b, e, inv, qmax, 0, 0, nullptr);
}

// 1 / s for clip c on a b-bit grid; checks that it is usable.
float inverse_step(float clip, int qmax, const char* op) {
  const float s = clip / static_cast<float>(qmax);
  const float inv = 1.0f / s;
  QAT_CHECK(std::isfinite(clip) && clip > 0 && std::isfinite(inv), op, ": clip must be positive, finite and ",
            "not so small that 1 / (clip / qmax) overflows; got clip ", clip, " (qmax ", qmax, ")");
  return inv;
}

// out == nullptr: d(c)'s sums only (nearest rounding), on `kernel`.
GradQuantStats quantize_all(const float* g, int64_t n, float clip, int bits, GradRounding r, uint64_t key,
                            uint64_t index0, int8_t* out, const char* op,
                            GradStatsKernel kernel = GradStatsKernel::scalar) {
  QAT_CHECK(n >= 0, op, ": negative element count ", n);
  const int qmax = grad_qmax(bits);
  const float inv = inverse_step(clip, qmax, op);
  using enum GradRounding;
  return sum_chunks(n, [&](int64_t b, int64_t e) {
    if (!out) return nearest_chunk(g, b, e, inv, qmax, kernel);
    return r == stochastic ? quantize_chunk<stochastic, true>(g, b, e, inv, qmax, key, index0, out)
                           : quantize_chunk<nearest, true>(g, b, e, inv, qmax, key, index0, out);
  });
}

}  // namespace


int grad_qmax(int bits) {
  QAT_CHECK(bits >= 2 && bits <= 8, "grad_qmax: bits must be in [2, 8] (int8 storage), got ", bits);
  return (1 << (bits - 1)) - 1;
}

double cosine_distance(const GradQuantStats& s) {
  if (s.gg == 0) return 0;
  if (s.qq == 0) return s.gg > 0 ? 1 : std::numeric_limits<double>::quiet_NaN();
  // sqrt of the product, not a product of square roots: for q == x the
  // product is a perfect square and sqrt is exact, so d is exactly 0.
  const double d = 1 - s.dot / std::sqrt(s.qq * s.gg);
  return d != d ? d : std::clamp(d, 0.0, 2.0);
}

GradQuantStats quantize_grad(const float* g, int64_t n, float clip, int bits, GradRounding r, uint64_t key,
                             uint64_t index0, int8_t* out) {
  QAT_CHECK(n <= 0 || (g && out), "quantize_grad: null input or output for ", n, " elements");
  if (clip == 0) {  // nothing to quantize: all zeros (see the header)
    QAT_CHECK(n >= 0, "quantize_grad: negative element count ", n);
    grad_qmax(bits);  // still reject a bad bit width
    std::fill(out, out + n, int8_t{0});
    GradQuantStats s;
    for (int64_t i = 0; i < n; ++i) s.gg += static_cast<double>(g[i]) * g[i];
    return s;
  }
  return quantize_all(g, n, clip, bits, r, key, index0, out, "quantize_grad");
}

bool grad_stats_kernel_runs_here(GradStatsKernel kernel) {
  switch (kernel) {
    case GradStatsKernel::scalar: return true;
    case GradStatsKernel::avx2: return cpu_has_avx2() && __builtin_cpu_supports("fma");
    case GradStatsKernel::avx512: return cpu_has_avx512_dq();
  }
  return false;
}

GradStatsKernel best_grad_stats_kernel() {
  for (const GradStatsKernel k : {GradStatsKernel::avx512, GradStatsKernel::avx2})
    if (grad_stats_kernel_runs_here(k)) return k;
  return GradStatsKernel::scalar;
}

void check_grad_stats_kernel(GradStatsKernel kernel, const char* op) {
  QAT_CHECK(grad_stats_kernel_runs_here(kernel), op, ": kernel ", enum_name(kernel), " does not run on this CPU");
}

GradQuantStats clip_cosine_stats(const float* g, int64_t n, float clip, int bits, GradStatsKernel kernel) {
  check_grad_stats_kernel(kernel, "clip_cosine_stats");
  return quantize_all(g, n, clip, bits, GradRounding::nearest, 0, 0, nullptr, "clip_cosine_distance", kernel);
}

double clip_cosine_distance(const float* g, int64_t n, float clip, int bits) {
  return cosine_distance(clip_cosine_stats(g, n, clip, bits, best_grad_stats_kernel()));
}

SpanAbsMax span_abs_max(const float* g, int64_t n, float s) {
  return abs_max_lanes(g, n, [s](int64_t) { return s; });
}

float max_abs(const float* g, int64_t n) {
  QAT_CHECK(n >= 0, "max_abs: negative element count ", n);
  const int64_t nc = chunk_count(n);
  std::vector<float> part(static_cast<size_t>(nc), 0.f);
#pragma omp parallel for schedule(static) if (nc > 1)
  for (int64_t c = 0; c < nc; ++c) {
    const int64_t b = c * kChunk;
    const SpanAbsMax m = span_abs_max(g + b, std::min(n, b + kChunk) - b, 1.f);
    part[static_cast<size_t>(c)] = m.nan ? std::numeric_limits<float>::quiet_NaN() : m.max;
  }
  float m = 0;
  for (const float p : part) {
    if (p != p) return p;
    m = std::max(m, p);
  }
  return m;
}

namespace {
float least_usable_clip(int bits) {
  const int qmax = grad_qmax(bits);
  // The least step with a finite inverse, then the least clip giving at least that step.
  float step = 1.0f / std::numeric_limits<float>::max();
  while (!std::isfinite(1.0f / step)) step = std::nextafter(step, 1.0f);
  float c = step * static_cast<float>(qmax);
  while (!std::isfinite(1.0f / (c / static_cast<float>(qmax)))) c = std::nextafter(c, 1.0f);
  return c;
}
}  // namespace

float usable_clip_min(int bits) {
  grad_qmax(bits);  // checks bits in [2, 8]
  static const std::array<float, 9> least = [] {
    std::array<float, 9> a{};
    for (int b = 2; b <= 8; ++b) a[static_cast<size_t>(b)] = least_usable_clip(b);
    return a;
  }();
  return least[static_cast<size_t>(bits)];
}

float usable_clip(float c, int bits) { return c >= usable_clip_min(bits) ? c : 0.0f; }

ClipSearch search_clip(const float* g, int64_t n, int bits) {
  constexpr int kPerOctave = 4;  // grid ratio 2^(1/4): ~19% apart
  constexpr int kOctaves = 12;   // down to max|g| / 4096
  constexpr int kRefine = 12;    // golden-section evaluations
  grad_qmax(bits);
  const float m = max_abs(g, n);
  QAT_CHECK(std::isfinite(m), "search_clip: the gradient has a non-finite element (max|g| = ", m, ")");
  ClipSearch best;
  const float lowest = usable_clip_min(bits);
  if (m < lowest) return best;  // all zeros, or too small to quantize: zeros (see the header)

  // Evaluates d at clip c (in double, as the search's coordinate), keeping the best.
  best.distance = std::numeric_limits<double>::infinity();
  auto eval = [&](double c) {
    const float cf = std::min(static_cast<float>(c), m);  // exp(log(m)) may round above m
    if (cf < lowest) return std::numeric_limits<double>::infinity();  // 1 / step would overflow
    const double d = clip_cosine_distance(g, n, cf, bits);
    ++best.evaluations;
    if (d < best.distance) best.distance = d, best.clip = cf;
    return d;
  };
  auto grid = [&](int j) { return static_cast<double>(m) * std::exp2(-static_cast<double>(j) / kPerOctave); };

  // Coarse: the best grid point (the first of equals, i.e. the largest clip).
  constexpr int kLast = kPerOctave * kOctaves;
  int jbest = 0;
  double dbest = std::numeric_limits<double>::infinity();
  for (int j = 0; j <= kLast; ++j) {
    const double d = eval(grid(j));
    if (d < dbest) dbest = d, jbest = j;
  }
  if (dbest == 0) return best;  // g is already on that grid: nothing to refine

  // Refine: golden section over t = log c between the neighbouring grid points
  // (the upper end capped at max|g|: a larger clip only coarsens the grid).
  // With d unimodal there this converges to its minimum; where rounding makes
  // it jagged it still only returns a point at least as good as the grid's.
  double a = std::log(grid(jbest + 1));
  double b = std::log(jbest == 0 ? static_cast<double>(m) : grid(jbest - 1));
  const double r = (std::sqrt(5.0) - 1) / 2;  // 0.618...
  double t1 = b - r * (b - a), t2 = a + r * (b - a);
  double d1 = eval(std::exp(t1)), d2 = eval(std::exp(t2));
  for (int k = 2; k < kRefine; ++k) {
    if (d1 <= d2) {  // the minimum is in [a, t2]
      b = t2, t2 = t1, d2 = d1;
      t1 = b - r * (b - a);
      d1 = eval(std::exp(t1));
    } else {  // in [t1, b]
      a = t1, t1 = t2, d1 = d2;
      t2 = a + r * (b - a);
      d2 = eval(std::exp(t2));
    }
  }
  return best;
}

double lr_scale_for(double distance, double alpha, double beta) { return std::max(std::exp(-alpha * distance), beta); }

}  // namespace qat::quant
