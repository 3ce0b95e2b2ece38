#include "quant/int8_training/grad_rows.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "quant/int8_training/grad_simd.h"
#include "quant/int8_training/int8_math.h"

namespace qat::quant {

namespace {

// ---------------------------------------------------------------- scalar
template <GradRounding R>
int64_t quantize_run_scalar(const float* v, int64_t n, float inv, int qmax, uint64_t mixed_key, uint64_t index0,
                            int8_t* q, float* qf) {
  int64_t sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float u =
        R == GradRounding::stochastic ? sr_uniform_mixed(mixed_key, index0 + static_cast<uint64_t>(i)) : 0.f;
    const int8_t k = quantize_grad_value(v[i], inv, qmax, R, u);
    q[i] = k;
    qf[i] = k;
    sum += k;
  }
  return sum;
}

void chunk_stats_scalar(const float* v, const float* qf, const int64_t* start, const int64_t* len, int64_t items,
                        GradQuantStats* out) {
  for (int64_t i = 0; i < items; ++i) {
    GradQuantStats s;
    for (int64_t t = start[i]; t < start[i] + len[i]; ++t)
      int8_math::add_grad_stats(&s.dot, &s.qq, &s.gg, v[t], static_cast<int8_t>(qf[t]));
    out[i] = s;
  }
}

// Rows r[0..8) of an 8 x 8 block to its columns (AVX: the AVX2 and AVX-512
// kernels below both use it).
__attribute__((target("avx"))) inline void transpose8x8(__m256* r) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h) {  // rows 0-3, then 4-7
    __m256* a = t + 4 * h;
    u[4 * h] = _mm256_shuffle_ps(a[0], a[2], 0x44);
    u[4 * h + 1] = _mm256_shuffle_ps(a[0], a[2], 0xEE);
    u[4 * h + 2] = _mm256_shuffle_ps(a[1], a[3], 0x44);
    u[4 * h + 3] = _mm256_shuffle_ps(a[1], a[3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x20);
    r[4 + i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x31);
  }
}

// ---------------------------------------------------------------- AVX-512
// The same integers as the scalar loops, lane by lane: the noise hash on
// 64-bit lanes, floor(x + u) in float (Note [stochastic rounding in float]),
// grad_simd.h's nearest rounding and clamp.
#define QAT_GR_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

QAT_GR_AVX512 inline __m512i mix64_x8(__m512i z) {
  z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)), _mm512_set1_epi64(0xBF58476D1CE4E5B9ll));
  z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)), _mm512_set1_epi64(0x94D049BB133111EBll));
  return _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
}

// The hashes of noise indices index + j, j = 0..7 (8..15 with `from` 8): key +
// (index + 1 + j) C is formed as (index + 1) C in a scalar register plus
// the constant j C: the same sums mod 2^64, without a vector product
// (vpmullq is three micro-ops on Intel).
QAT_GR_AVX512 inline __m512i noise_hash_x8(__m512i key, uint64_t index, uint64_t from) {
  constexpr uint64_t C = 0x9E3779B97F4A7C15ull;
  const auto lane = [&](uint64_t j) { return static_cast<long long>((from + j) * C); };
  const __m512i lanes = _mm512_set_epi64(lane(7), lane(6), lane(5), lane(4), lane(3), lane(2), lane(1), lane(0));
  return mix64_x8(
      _mm512_add_epi64(_mm512_add_epi64(key, _mm512_set1_epi64(static_cast<long long>((index + 1) * C))), lanes));
}

// sr_uniform_mixed(key, index + j) for j = 0..15: each hash's top 24 bits
// (the high halves of both vectors' lanes gathered by one permute, then
// shifted by 8) times 2^-24, exact in float.
QAT_GR_AVX512 inline __m512 uniform_x16(__m512i key, uint64_t index) {
  const __m512i high_halves = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  const __m512i top = _mm512_permutex2var_epi32(noise_hash_x8(key, index, 0), high_halves,
                                                noise_hash_x8(key, index, 8));
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(top, 8)), _mm512_set1_ps(0x1.0p-24f));
}

// Note [stochastic rounding in float]: quantize_grad_value's rule is
// floor(double(x) + double(u)), which is the exact floor(x + u) (the double
// sum is exact, or x is so far from u's scale that its rounding cannot cross
// an integer). The float sum rounded down, RD(x + u), has the same floor:
// the integer n = floor(x + u) is a float wherever |n| <= 2^24, so
// n <= RD(x + u) <= x + u < n + 1; beyond that x is itself an integer and
// RD(x + u) = x. So one float add with its rounding mode in the instruction
// and one vrndscaleps give the double form's integers on sixteen lanes
// (where x = -u the float form's floor is -0, the double form's +0: both
// the integer 0), where the double form took ten conversions and sums on
// two halves.
QAT_GR_AVX512 inline __m512 floor_sum_x16(__m512 x, __m512 u) {
  return _mm512_roundscale_ps(_mm512_add_round_ps(x, u, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC),
                              _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
}

// Sixteen values (v already loaded, lanes `live`), element 0 drawing noise
// index `index`: their integers.
template <GradRounding R>
QAT_GR_AVX512 inline __m512i quantize_x16(__m512 v, __m512 inv, __m512 hi, __m512i key, uint64_t index,
                                          __mmask16 live) {
  __m512 r;
  if constexpr (R == GradRounding::stochastic) {
    r = floor_sum_x16(_mm512_mul_ps(v, inv), uniform_x16(key, index));
  } else {
    r = grad_simd::nearest(v, inv);
  }
  return grad_simd::clamped_integers(r, hi, live);
}

// The lanes of quantize_run's loop (grad_rows_lanes.inc): sixteen values,
// masked loads and stores at the row's end.
namespace avx512 {
#define QAT_GR_TARGET QAT_GR_AVX512
struct Lanes {
  static constexpr int64_t kWidth = 16;
  using Live = __mmask16;
  using Ints = __m512i;
  using Sums = __m512i;  // int64 lanes
  struct Consts {
    __m512 inv, hi;
    __m512i key;
  };
  QAT_GR_TARGET static Consts consts(float inv, int qmax, uint64_t mixed_key) {
    return {_mm512_set1_ps(inv), _mm512_set1_ps(static_cast<float>(qmax)),
            _mm512_set1_epi64(static_cast<long long>(mixed_key))};
  }
  QAT_GR_TARGET static Live live(int64_t left) {
    return left >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << left) - 1);
  }
  template <GradRounding R>
  QAT_GR_TARGET static Ints quantize(const float* v, const Consts& c, uint64_t index, Live live, int64_t) {
    return quantize_x16<R>(_mm512_maskz_loadu_ps(live, v), c.inv, c.hi, c.key, index, live);
  }
  // Plain stores but in the tail (vpmovdb to memory with a mask stalls).
  QAT_GR_TARGET static void store(int8_t* q, float* qf, Ints k, Live live, int64_t) {
    if (live == 0xFFFF) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtepi32_epi8(k));
      _mm512_storeu_ps(qf, _mm512_cvtepi32_ps(k));
      return;
    }
    _mm512_mask_cvtepi32_storeu_epi8(q, live, k);
    _mm512_mask_storeu_ps(qf, live, _mm512_cvtepi32_ps(k));
  }
  QAT_GR_TARGET static Sums no_sums() { return _mm512_setzero_si512(); }
  QAT_GR_TARGET static Sums add(Sums sum, Ints k) {
    sum = _mm512_add_epi64(sum, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(k)));
    return _mm512_add_epi64(sum, _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(k, 1)));
  }
  QAT_GR_TARGET static int64_t total(Sums sum) { return _mm512_reduce_add_epi64(sum); }
};
#include "quant/int8_training/grad_rows_lanes.inc"
#undef QAT_GR_TARGET
}  // namespace avx512

// Eight items on the lanes, eight steps at a time: each item's next eight
// values (and integers) loaded as a row, the 8 x 8 block transposed, then
// step s adds element t0 + s of every item, one fused multiply-add per sum.
// Blocks where all eight items have eight values left load without masks;
// elsewhere, past an item's end the block holds zeros, whose terms leave a
// sum as it is (x + 0 = x; a sum never is -0: it starts at +0 and
// round-to-nearest gives +0 to every exact zero), so no lane needs a mask.
QAT_GR_AVX512 void chunk_stats_x8(const float* v, const float* qf, const int64_t* start, const int64_t* len,
                                  int64_t items, GradQuantStats* out) {
  int64_t longest = 0, shortest = items < 8 ? 0 : len[0];
  for (int64_t i = 0; i < items; ++i) longest = std::max(longest, len[i]), shortest = std::min(shortest, len[i]);
  __m512d dot = _mm512_setzero_pd(), qq = dot, gg = dot;
  for (int64_t t0 = 0; t0 < longest; t0 += 8) {
    __m256 x[8], k[8];
    if (t0 + 8 <= shortest) {
      for (int64_t i = 0; i < 8; ++i) {
        x[i] = _mm256_loadu_ps(v + start[i] + t0);
        k[i] = _mm256_loadu_ps(qf + start[i] + t0);
      }
    } else {
      for (int64_t i = 0; i < 8; ++i) {
        const int64_t left = i < items ? std::clamp<int64_t>(len[i] - t0, 0, 8) : 0;
        const __mmask8 m = static_cast<__mmask8>((1u << left) - 1);
        x[i] = left ? _mm256_maskz_loadu_ps(m, v + start[i] + t0) : _mm256_setzero_ps();
        k[i] = left ? _mm256_maskz_loadu_ps(m, qf + start[i] + t0) : _mm256_setzero_ps();
      }
    }
    transpose8x8(x);
    transpose8x8(k);
    for (int s = 0; s < 8; ++s) {
      const __m512d xd = _mm512_cvtps_pd(x[s]), kd = _mm512_cvtps_pd(k[s]);
      dot = _mm512_fmadd_pd(xd, kd, dot);
      qq = _mm512_fmadd_pd(kd, kd, qq);
      gg = _mm512_fmadd_pd(xd, xd, gg);
    }
  }
  alignas(64) double d[8], q2[8], g2[8];
  _mm512_store_pd(d, dot);
  _mm512_store_pd(q2, qq);
  _mm512_store_pd(g2, gg);
  for (int64_t i = 0; i < items; ++i) out[i] = {d[i], q2[i], g2[i]};
}

// scaled_transpose's whole 16 x 16 blocks (channels [0, O16), positions [0, P16)).
QAT_GR_AVX512 void scaled_transpose_blocks(const float* src, int64_t O, int64_t P, const float* scale, float* dst,
                                           int64_t O16, int64_t P16) {
  for (int64_t p0 = 0; p0 < P16; p0 += 16)
    for (int64_t o0 = 0; o0 < O16; o0 += 16) {
      __m512 r[16];
      for (int64_t i = 0; i < 16; ++i)
        r[i] = _mm512_mul_ps(_mm512_loadu_ps(src + (o0 + i) * P + p0), _mm512_set1_ps(scale[o0 + i]));
      simd::transpose16x16(r);
      for (int64_t j = 0; j < 16; ++j) _mm512_storeu_ps(dst + (p0 + j) * O + o0, r[j]);
    }
}

#undef QAT_GR_AVX512

// ---------------------------------------------------------------- AVX2
// The same operations again on ymm (FMA for the sums): the hash's 64-bit
// products from 32-bit halves (AVX2 has no vpmullq), 4 noise draws a vector;
// its top 24 bits, below 2^24, through int32 to double exactly.
#define QAT_GR_AVX2 __attribute__((target("avx2,fma")))

QAT_GR_AVX2 inline __m256i mullo64(__m256i a, __m256i b) {
  const __m256i cross =
      _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b), _mm256_mul_epu32(a, _mm256_srli_epi64(b, 32)));
  return _mm256_add_epi64(_mm256_mul_epu32(a, b), _mm256_slli_epi64(cross, 32));
}

QAT_GR_AVX2 inline __m256i mix64_x4(__m256i z) {
  z = mullo64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 30)),
              _mm256_set1_epi64x(static_cast<long long>(0xBF58476D1CE4E5B9ull)));
  z = mullo64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 27)),
              _mm256_set1_epi64x(static_cast<long long>(0x94D049BB133111EBull)));
  return _mm256_xor_si256(z, _mm256_srli_epi64(z, 31));
}

// double(sr_uniform_mixed(key, index + j)) for j = 0..3 (u is k 2^-24 with
// k < 2^24: exact in float and in double).
// (The index's product as in noise_hash_x8: a scalar one plus constant lanes.)
QAT_GR_AVX2 inline __m256d uniform_x4(__m256i key, uint64_t index) {
  constexpr uint64_t C = 0x9E3779B97F4A7C15ull;
  const __m256i lanes = _mm256_setr_epi64x(0, static_cast<long long>(C), static_cast<long long>(2 * C),
                                           static_cast<long long>(3 * C));
  const __m256i z = _mm256_add_epi64(
      _mm256_add_epi64(key, _mm256_set1_epi64x(static_cast<long long>((index + 1) * C))), lanes);
  const __m256i top = _mm256_srli_epi64(mix64_x4(z), 40);
  const __m128i k = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(top, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6)));
  return _mm256_mul_pd(_mm256_cvtepi32_pd(k), _mm256_set1_pd(0x1.0p-24));
}

// floor(double(x) + u) back in float, four lanes.
QAT_GR_AVX2 inline __m128 floor_sum_x4(__m128 x, __m256d u) {
  return _mm256_cvtpd_ps(
      _mm256_round_pd(_mm256_add_pd(_mm256_cvtps_pd(x), u), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
}

// Eight values (lanes past the end loaded as 0), element 0 drawing noise
// index `index`: their integers (NaN to 0, clamped to [-hi, hi] as max then
// min, as grad_simd::clamped_integers).
template <GradRounding R>
QAT_GR_AVX2 inline __m256i quantize_x8(__m256 v, __m256 inv, __m256 hi, __m256i key, uint64_t index) {
  const __m256 x = _mm256_mul_ps(v, inv);
  __m256 r;
  if constexpr (R == GradRounding::stochastic) {
    const __m128 lo4 = floor_sum_x4(_mm256_castps256_ps128(x), uniform_x4(key, index));
    const __m128 hi4 = floor_sum_x4(_mm256_extractf128_ps(x, 1), uniform_x4(key, index + 4));
    r = _mm256_set_m128(hi4, lo4);
  } else {
    r = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  const __m256 kept = _mm256_and_ps(r, _mm256_cmp_ps(r, r, _CMP_ORD_Q));
  return _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(kept, _mm256_sub_ps(_mm256_setzero_ps(), hi)), hi));
}

// The lanes of quantize_run's loop on ymm: eight values, the lanes past the
// row's end loaded and kept as 0, the row's last bytes copied out.
namespace avx2 {
#define QAT_GR_TARGET QAT_GR_AVX2
struct Lanes {
  static constexpr int64_t kWidth = 8;
  using Live = __m256i;
  using Ints = __m256i;
  using Sums = __m256i;  // int64 lanes
  struct Consts {
    __m256 inv, hi;
    __m256i key;
  };
  QAT_GR_TARGET static Consts consts(float inv, int qmax, uint64_t mixed_key) {
    return {_mm256_set1_ps(inv), _mm256_set1_ps(static_cast<float>(qmax)),
            _mm256_set1_epi64x(static_cast<long long>(mixed_key))};
  }
  QAT_GR_TARGET static Live live(int64_t left) { return simd::live_lanes(left); }
  template <GradRounding R>
  QAT_GR_TARGET static Ints quantize(const float* v, const Consts& c, uint64_t index, Live live, int64_t left) {
    const __m256 x = left >= 8 ? _mm256_loadu_ps(v) : _mm256_maskload_ps(v, live);
    return _mm256_and_si256(quantize_x8<R>(x, c.inv, c.hi, c.key, index), live);
  }
  QAT_GR_TARGET static void store(int8_t* q, float* qf, Ints k, Live live, int64_t left) {
    const __m128i k16 = _mm_packs_epi32(_mm256_castsi256_si128(k), _mm256_extracti128_si256(k, 1));
    const __m128i k8 = _mm_packs_epi16(k16, k16);  // |k| <= 127: the saturating packs are exact
    if (left >= 8) {
      _mm_storel_epi64(reinterpret_cast<__m128i*>(q), k8);
      _mm256_storeu_ps(qf, _mm256_cvtepi32_ps(k));
    } else {
      alignas(16) int8_t bytes[16];
      _mm_store_si128(reinterpret_cast<__m128i*>(bytes), k8);
      std::memcpy(q, bytes, static_cast<size_t>(left));
      _mm256_maskstore_ps(qf, live, _mm256_cvtepi32_ps(k));
    }
  }
  QAT_GR_TARGET static Sums no_sums() { return _mm256_setzero_si256(); }
  QAT_GR_TARGET static Sums add(Sums sum, Ints k) {
    sum = _mm256_add_epi64(sum, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(k)));
    return _mm256_add_epi64(sum, _mm256_cvtepi32_epi64(_mm256_extracti128_si256(k, 1)));
  }
  QAT_GR_TARGET static int64_t total(Sums sum) {
    alignas(32) int64_t lanes[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), sum);
    return lanes[0] + lanes[1] + lanes[2] + lanes[3];
  }
};
#include "quant/int8_training/grad_rows_lanes.inc"
#undef QAT_GR_TARGET
}  // namespace avx2

// chunk_stats_x8 on ymm: each item's lane is a double lane of one of two
// vectors (items 0-3, 4-7), the same fused multiply-adds in the same order.
QAT_GR_AVX2 void chunk_stats_x8_avx2(const float* v, const float* qf, const int64_t* start, const int64_t* len,
                                     int64_t items, GradQuantStats* out) {
  int64_t longest = 0;
  for (int64_t i = 0; i < items; ++i) longest = std::max(longest, len[i]);
  __m256d dot[2] = {_mm256_setzero_pd(), _mm256_setzero_pd()}, qq[2] = {dot[0], dot[0]}, gg[2] = {dot[0], dot[0]};
  for (int64_t t0 = 0; t0 < longest; t0 += 8) {
    __m256 x[8], k[8];
    for (int64_t i = 0; i < 8; ++i) {
      const int64_t left = i < items ? std::clamp<int64_t>(len[i] - t0, 0, 8) : 0;
      const __m256i m = simd::live_lanes(left);
      x[i] = left ? _mm256_maskload_ps(v + start[i] + t0, m) : _mm256_setzero_ps();
      k[i] = left ? _mm256_maskload_ps(qf + start[i] + t0, m) : _mm256_setzero_ps();
    }
    transpose8x8(x);
    transpose8x8(k);
    for (int s = 0; s < 8; ++s)
      for (int h = 0; h < 2; ++h) {
        const __m128 xs = h ? _mm256_extractf128_ps(x[s], 1) : _mm256_castps256_ps128(x[s]);
        const __m128 ks = h ? _mm256_extractf128_ps(k[s], 1) : _mm256_castps256_ps128(k[s]);
        const __m256d xd = _mm256_cvtps_pd(xs), kd = _mm256_cvtps_pd(ks);
        dot[h] = _mm256_fmadd_pd(xd, kd, dot[h]);
        qq[h] = _mm256_fmadd_pd(kd, kd, qq[h]);
        gg[h] = _mm256_fmadd_pd(xd, xd, gg[h]);
      }
  }
  alignas(32) double d[8], q2[8], g2[8];
  for (int h = 0; h < 2; ++h) {
    _mm256_store_pd(d + 4 * h, dot[h]);
    _mm256_store_pd(q2 + 4 * h, qq[h]);
    _mm256_store_pd(g2 + 4 * h, gg[h]);
  }
  for (int64_t i = 0; i < items; ++i) out[i] = {d[i], q2[i], g2[i]};
}

#undef QAT_GR_AVX2

}  // namespace

int64_t quantize_run(GradStatsKernel kernel, const float* v, int64_t n, float inv, int qmax, GradRounding rounding,
                     uint64_t mixed_key, uint64_t index0, int8_t* q, float* qf) {
  check_grad_stats_kernel(kernel, "quantize_run");
  using enum GradRounding;
  if (kernel == GradStatsKernel::avx512)
    return rounding == stochastic ? avx512::quantize_run_lanes<stochastic>(v, n, inv, qmax, mixed_key, index0, q, qf)
                                  : avx512::quantize_run_lanes<nearest>(v, n, inv, qmax, mixed_key, index0, q, qf);
  if (kernel == GradStatsKernel::avx2)
    return rounding == stochastic ? avx2::quantize_run_lanes<stochastic>(v, n, inv, qmax, mixed_key, index0, q, qf)
                                  : avx2::quantize_run_lanes<nearest>(v, n, inv, qmax, mixed_key, index0, q, qf);
  return rounding == stochastic ? quantize_run_scalar<stochastic>(v, n, inv, qmax, mixed_key, index0, q, qf)
                                : quantize_run_scalar<nearest>(v, n, inv, qmax, mixed_key, index0, q, qf);
}

void scaled_transpose(GradStatsKernel kernel, const float* src, int64_t O, int64_t P, const float* scale, float* dst) {
  check_grad_stats_kernel(kernel, "scaled_transpose");
  const bool blocks = kernel == GradStatsKernel::avx512;
  const int64_t O16 = blocks ? O / 16 * 16 : 0, P16 = blocks ? P / 16 * 16 : 0;
  if (O16 > 0 && P16 > 0) scaled_transpose_blocks(src, O, P, scale, dst, O16, P16);
  // The rest: positions past P16 for every channel, channels past O16 for the blocks' positions,
  // 64 positions at a time (their rows stay in L1 while every channel writes into them).
  const int64_t done_p = O16 > 0 ? P16 : 0;
  for (int64_t p0 = 0; p0 < P; p0 += 64) {
    const int64_t p1 = std::min(P, p0 + 64);
    for (int64_t o = 0; o < O; ++o) {
      const float* row = src + o * P;
      for (int64_t p = std::max(p0, o < O16 ? done_p : 0); p < p1; ++p) dst[p * O + o] = row[p] * scale[o];
    }
  }
}

void chunk_stats(GradStatsKernel kernel, const float* v, const float* qf, const int64_t* start, const int64_t* len,
                 int64_t items, GradQuantStats* out) {
  check_grad_stats_kernel(kernel, "chunk_stats");
  if (kernel == GradStatsKernel::scalar) return chunk_stats_scalar(v, qf, start, len, items, out);
  const auto x8 = kernel == GradStatsKernel::avx2 ? &chunk_stats_x8_avx2 : &chunk_stats_x8;
  for (int64_t i = 0; i < items; i += 8) x8(v, qf, start + i, len + i, std::min<int64_t>(8, items - i), out + i);
}

}  // namespace qat::quant
