#include "quant/integer/int_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/window.h"
#include "quant/integer/int_math.h"
#include "quant/integer/simd.h"

namespace qat::quant {

int32_t requantize_value(int32_t acc, int32_t m0, int32_t shift, int32_t residual) {
  return requantize_value64(acc, m0, shift, residual);
}

int32_t requantize_value64(int32_t acc, int32_t m0, int32_t shift, int64_t extra) {
  return int_math::requantize_value64(acc, m0, shift, extra);
}

void requantize_row_reference(const int32_t* acc, int64_t n, const RequantParams& p, uint8_t* out) {
  for (int64_t c = 0; c < n; ++c) {
    const int32_t v = p.out_zero + requantize_value(acc[c] + p.bias[c], p.m0[c], p.shift[c], p.residual[c]);
    out[c] = static_cast<uint8_t>(std::clamp(v, p.lo, p.hi));
  }
}

namespace {

// The plan's arrays as plain pointers, held in a local by each kernel: the
// byte stores may alias anything, so through the plan's vectors the compiler
// would reload each array's data pointer after every store.
struct PlanArrays {
  explicit PlanArrays(const RequantPlan& q)
      : n(q.n),
        add32(q.add32.data()),
        e(q.e.data()),
        m0(q.m0.data()),
        add_even(q.add_even.data()),
        add_odd(q.add_odd.data()),
        t_even(q.t_even.data()),
        t_odd(q.t_odd.data()),
        blocks(q.blocks.data()),
        fm(q.fm.data()),
        fb(q.fb.data()) {}
  const int64_t n;
  const int32_t *add32, *e, *m0;
  const int64_t *add_even, *add_odd, *t_even, *t_odd;
  const RequantPlan::Block16* blocks;
  const float *fm, *fb;
};

// The AVX-512 requantization, 16 channels a vector (RequantKind):
//   shift: every multiplier 2^30 (make_requant_plan): (acc + add32) >> e in
//     32 bits;
//   general: p = acc * m0 + add (64-bit, even and odd lanes apart), then an
//     arithmetic shift by t; add = bias * m0 + residual + 2^(t-1) was folded
//     per channel by make_requant_plan;
//   high (every t >= 32): as general, but the odd lanes shift by t - 32,
//     which leaves floor(p / 2^t) in their high halves, where the result
//     goes, with no shift left after; their accumulators and multipliers are
//     read one int32 further on (the low half of each 64-bit lane is what
//     vpmuldq multiplies) instead of shifted into place;
//   high_zero: as high, with the zero point in the addend too (z 2^t: the
//     same low 32 bits after the shift as adding z after it, one add fewer;
//     where every t <= 52, so that no addend overflows).
// kCap (hi < 255): the clamp's upper bound. Without it, the byte
// conversion's unsigned saturation is the clamp to 255 (0 <= lo <= hi <= 255:
// make_requant_plan checks).
enum class RequantKind { shift, general, high, high_zero };

#define QAT_AVX512_TARGET __attribute__((target("avx512f,avx512bw")))

// The requantized int32 lanes of the 16 accumulators at x (live lanes m),
// of channels [c, c + 16) (block b = c / 16 of the plan): with the zero
// point (ahead of the clamp).
template <RequantKind kKind>
QAT_AVX512_TARGET inline __m512i requantize16(const PlanArrays& p, const int32_t* x, int64_t c, __mmask16 m,
                                              __m512i zero) {
  const __m512i v = _mm512_maskz_loadu_epi32(m, x);
  if constexpr (kKind == RequantKind::shift)
    return _mm512_add_epi32(
        _mm512_srav_epi32(_mm512_add_epi32(v, _mm512_loadu_si512(p.add32 + c)), _mm512_loadu_si512(p.e + c)), zero);
  const RequantPlan::Block16& b = p.blocks[c / 16];
  const __m512i even = _mm512_srav_epi64(
      _mm512_add_epi64(_mm512_mul_epi32(v, _mm512_load_si512(b.m0)), _mm512_load_si512(b.add_even)),
      _mm512_load_si512(b.t_even));
  // the odd channels' accumulators in the low halves of 64-bit lanes
  const __m512i v_odd = kKind == RequantKind::general
                            ? _mm512_srli_epi64(v, 32)
                            : _mm512_maskz_loadu_epi32(static_cast<__mmask16>(m >> 1), x + 1);
  const __m512i odd = _mm512_srav_epi64(
      _mm512_add_epi64(_mm512_mul_epi32(v_odd, _mm512_load_si512(b.m0_next)), _mm512_load_si512(b.add_odd)),
      _mm512_load_si512(b.t_odd));
  if constexpr (kKind == RequantKind::general)
    return _mm512_add_epi32(_mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32)), zero);
  const __m512i both = _mm512_mask_blend_epi32(0xAAAA, even, odd);
  return kKind == RequantKind::high_zero ? both : _mm512_add_epi32(both, zero);
}

// Note [checked float requantization]: the exact result is
// clamp(floor(v), lo, hi) for v = (acc m0 + addend) 2^-t + z, a 64-bit
// product a vector of 8 (requantize16). A float first pass does 16 a vector:
//   f = fma(float(acc), M, B),  M = m0 2^-t, B = addend 2^-t + z - e,
// e = 2^-11, each rounded once to float (relative error u = 2^-24 each;
// M is 0 or at least 2^-62, never subnormal). Against the exact v' = v - e its error
// is below 3.001 u (|f| + |B|) + 2^-40 (the product's three roundings, B's
// and the fma's, with |acc M| <= |f| + |B| + error). With k = floor(f),
// clamped afterwards as the exact path's results are:
// - lo - 1 <= f < hi + 1: |f| + |B| <= 256 + 1792 = 2^11, so the error is
//   below 3.7e-4 < e. Where f - k < 1 - 2 e, v' lies in (k - e, k + 1 - e),
//   so v in (k, k + 1): floor(v) = k. (f - k is exact for k >= 0, by
//   Sterbenz; for f in (-1/2, 0) it is rounded, but rounding is monotone
//   and 1 - 2 e is a float, so it can only err towards "unsure".)
// - f >= hi + 1 gives k >= hi + 1, so hi: v >= f - error + e > hi + 1
//   (where f <= 2^11 - |B| the error is below e; beyond, f (1 - 3.001 u) -
//   3.001 u |B| > 255.9).
// - f < lo - 1 gives lo likewise (v < lo - 1 + 2 e, or v < 0 <= lo).
// - |acc| < 2^30 (requantize_rows' precondition) and M < 1 (shift >= 0:
//   the vector path's plans), so |f| < 2^31: the conversion to int32 never
//   overflows.
// A vector with a lane at f - k >= 1 - 2 e (a lane in 2^10, where v sits
// within 2^-10 above an integer) is done again by the exact path. Taken
// where every channel's |B| <= 1792 (make_requant_plan); else exact only.
// On a Zen 5, 96 channels: 1.22 -> 0.85 ns per 16 values; MobileNetV2's
// integer model at 128 px, batch 32, 2 threads: 2377-2410 -> 2480-2593 img/s.
constexpr float kFloatRequantMargin = 1.0f / 2048;  // e
constexpr double kFloatRequantMaxAddend = 1792;

// The float first pass of 16 accumulators at x (live lanes m), channels
// [c, c + 16): k = floor(f) as int32 lanes (to be clamped); lanes where it
// may differ from the exact result are added to `unsure`.
QAT_AVX512_TARGET inline __m512i requantize16_float(const PlanArrays& p, const int32_t* x, int64_t c, __mmask16 m,
                                                    __mmask16& unsure) {
  const __m512 f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_maskz_loadu_epi32(m, x)), _mm512_load_ps(p.fm + c),
                                   _mm512_load_ps(p.fb + c));
  const __m512 k = _mm512_roundscale_ps(f, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  const __m512 limit = _mm512_set1_ps(1.0f - 2 * kFloatRequantMargin);
  unsure |= _mm512_mask_cmp_ps_mask(m, _mm512_sub_ps(f, k), limit, _CMP_GE_OQ);
  return _mm512_cvtps_epi32(k);  // (exact: k is an integer, |k| < 2^31)
}

// Four vectors of int32 lanes as 64 bytes in order, each lane clamped to
// [0, 255] (signed saturation to 16 bits, then unsigned to 8: exact for any
// int32), then to [lo, hi].
template <bool kCap>
QAT_AVX512_TARGET inline __m512i bytes64(__m512i a, __m512i b, __m512i c, __m512i d, __m512i lo, __m512i hi) {
  // the packs interleave by 128-bit lanes: dword 4 L + k holds elements
  // 4 L .. 4 L + 3 of the k-th source; put them back in order
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m512i packed = _mm512_packus_epi16(_mm512_packs_epi32(a, b), _mm512_packs_epi32(c, d));
  const __m512i v = _mm512_max_epu8(_mm512_permutexvar_epi32(order, packed), lo);
  return kCap ? _mm512_min_epu8(v, hi) : v;
}

// One vector clamped and stored as bytes (live lanes m).
template <bool kCap>
QAT_AVX512_TARGET inline void store16(__m512i v, __m512i lo, __m512i hi, __mmask16 m, uint8_t* o) {
  v = _mm512_max_epi32(v, lo);
  if (m != 0xFFFF) {  // (a masked byte conversion to memory stalls: only in a tail)
    if (kCap)
      _mm512_mask_cvtepi32_storeu_epi8(o, m, _mm512_min_epi32(v, hi));
    else
      _mm512_mask_cvtusepi32_storeu_epi8(o, m, v);
    return;
  }
  const __m128i b = kCap ? _mm512_cvtepi32_epi8(_mm512_min_epi32(v, hi)) : _mm512_cvtusepi32_epi8(v);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(o), b);
}

// The vector constants of a plan's clamp and zero point.
struct RequantConsts {
  QAT_AVX512_TARGET explicit RequantConsts(const RequantParams& q)
      : zero(_mm512_set1_epi32(q.out_zero)),
        lo32(_mm512_set1_epi32(q.lo)),
        hi32(_mm512_set1_epi32(q.hi)),
        lo8(_mm512_set1_epi8(static_cast<char>(q.lo))),
        hi8(_mm512_set1_epi8(static_cast<char>(q.hi))) {}
  __m512i zero, lo32, hi32, lo8, hi8;
};

// 16 accumulators requantized and stored (live lanes m): with kFloat, the
// float first pass, and the exact path where a lane is unsure.
template <RequantKind kKind, bool kCap, bool kFloat>
QAT_AVX512_TARGET inline void requantize_store16(const PlanArrays& p, const int32_t* x, int64_t c, __mmask16 m,
                                                 const RequantConsts& k, uint8_t* o) {
  if constexpr (kFloat) {
    __mmask16 unsure = 0;
    const __m512i v = requantize16_float(p, x, c, m, unsure);
    if (unsure == 0) return store16<kCap>(v, k.lo32, k.hi32, m, o);
  }
  store16<kCap>(requantize16<kKind>(p, x, c, m, k.zero), k.lo32, k.hi32, m, o);
}

// Rows whose width n is a multiple of 16 as one run of rows n values (each
// vector inside one row), 64 values a step through bytes64.
template <RequantKind kKind, bool kCap, bool kFloat>
QAT_AVX512_TARGET void requantize_run_avx512(const int32_t* acc, int64_t rows, const RequantPlan& q, uint8_t* out) {
  const PlanArrays p(q);
  const RequantConsts k(q.params);
  const int64_t total = rows * p.n;
  auto next = [n = p.n](int64_t c) { return c + 16 == n ? 0 : c + 16; };
  int64_t f = 0, c = 0;
  for (; f + 64 <= total; f += 64) {
    const int64_t c1 = next(c), c2 = next(c1), c3 = next(c2);
    if constexpr (kFloat) {
      __mmask16 unsure = 0;
      const __m512i a = requantize16_float(p, acc + f, c, 0xFFFF, unsure);
      const __m512i b = requantize16_float(p, acc + f + 16, c1, 0xFFFF, unsure);
      const __m512i d = requantize16_float(p, acc + f + 32, c2, 0xFFFF, unsure);
      const __m512i e = requantize16_float(p, acc + f + 48, c3, 0xFFFF, unsure);
      if (unsure == 0) {
        _mm512_storeu_si512(out + f, bytes64<kCap>(a, b, d, e, k.lo8, k.hi8));
        c = next(c3);
        continue;
      }
    }
    const __m512i a = requantize16<kKind>(p, acc + f, c, 0xFFFF, k.zero);
    const __m512i b = requantize16<kKind>(p, acc + f + 16, c1, 0xFFFF, k.zero);
    const __m512i d = requantize16<kKind>(p, acc + f + 32, c2, 0xFFFF, k.zero);
    const __m512i e = requantize16<kKind>(p, acc + f + 48, c3, 0xFFFF, k.zero);
    _mm512_storeu_si512(out + f, bytes64<kCap>(a, b, d, e, k.lo8, k.hi8));
    c = next(c3);
  }
  for (; f < total; f += 16, c = next(c)) requantize_store16<kKind, kCap, kFloat>(p, acc + f, c, 0xFFFF, k, out + f);
}

// Rows of any width n, 16 channels a step, the last vector of a row masked.
template <RequantKind kKind, bool kCap, bool kFloat>
QAT_AVX512_TARGET void requantize_rows_avx512(const int32_t* acc, int64_t rows, const RequantPlan& q, uint8_t* out) {
  if (q.n % 16 == 0) return requantize_run_avx512<kKind, kCap, kFloat>(acc, rows, q, out);
  const PlanArrays p(q);
  const RequantConsts k(q.params);
  const int64_t full = p.n / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (p.n - full)) - 1);
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t* a = acc + r * p.n;
    uint8_t* o = out + r * p.n;
    for (int64_t c = 0; c < full; c += 16) requantize_store16<kKind, kCap, kFloat>(p, a + c, c, 0xFFFF, k, o + c);
    if (tail != 0) requantize_store16<kKind, kCap, kFloat>(p, a + full, full, tail, k, o + full);
  }
}

template <RequantKind kKind, bool kCap>
void requantize_rows_avx512(const int32_t* acc, int64_t rows, const RequantPlan& q, uint8_t* out) {
  if (q.float_first) return requantize_rows_avx512<kKind, kCap, true>(acc, rows, q, out);
  requantize_rows_avx512<kKind, kCap, false>(acc, rows, q, out);
}

template <RequantKind kKind>
void requantize_rows_avx512(const int32_t* acc, int64_t rows, const RequantPlan& q, uint8_t* out) {
  // (without the cap, the byte conversion's unsigned saturation is the clamp to 255)
  if (q.params.hi < 255) return requantize_rows_avx512<kKind, true>(acc, rows, q, out);
  requantize_rows_avx512<kKind, false>(acc, rows, q, out);
}

#define QAT_AVX2_TARGET __attribute__((target("avx2")))

QAT_AVX2_TARGET inline __m256i load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Clamps 8 int32 lanes to [lo, hi] (within 0..255) and stores `live` <= 8 of
// them as bytes.
QAT_AVX2_TARGET inline void store_u8x8(__m256i v, __m256i lo, __m256i hi, uint8_t* o, int64_t live) {
  v = _mm256_min_epi32(_mm256_max_epi32(v, lo), hi);
  const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  const __m128i b = _mm_packus_epi16(w, w);  // (exact: every lane is in 0..255)
  if (live >= 8) return _mm_storel_epi64(reinterpret_cast<__m128i*>(o), b);
  alignas(16) uint8_t tmp[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(tmp), b);
  std::memcpy(o, tmp, static_cast<size_t>(live));
}

// The 64-bit lanes p of the general requantization shifted right by t: AVX2 has
// no arithmetic 64-bit shift, so p + 2^63 (p's sign bit flipped: in
// [0, 2^64) for every int64 p) is shifted logically and 2^(63 - t) comes
// off, which is floor(p / 2^t) exactly (2^t divides 2^63 for t <= 62).
QAT_AVX2_TARGET inline __m256i floor_shift64(__m256i p, __m256i t) {
  const __m256i sign = _mm256_set1_epi64x(static_cast<long long>(uint64_t{1} << 63));
  return _mm256_sub_epi64(_mm256_srlv_epi64(_mm256_xor_si256(p, sign), t), _mm256_srlv_epi64(sign, t));
}

// requantize_rows_avx512 with 8 channels at a time.
template <bool kShift>
QAT_AVX2_TARGET void requantize_rows_avx2(const int32_t* acc, int64_t rows, const RequantPlan& q, uint8_t* out) {
  const __m256i zero = _mm256_set1_epi32(q.params.out_zero), lo = _mm256_set1_epi32(q.params.lo),
                hi = _mm256_set1_epi32(q.params.hi);
  const PlanArrays p(q);
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t* a = acc + r * p.n;
    for (int64_t c = 0; c < p.n; c += 8) {
      const __m256i x = _mm256_maskload_epi32(a + c, simd::live_lanes(p.n - c));
      __m256i v;
      if constexpr (kShift) {
        v = _mm256_srav_epi32(_mm256_add_epi32(x, load(p.add32 + c)), load(p.e + c));
      } else {
        const __m256i m0 = load(p.m0 + c);
        const int64_t blk = c / 2;  // the even (odd) channels c, c + 2, .. as 4 consecutive 64-bit entries
        const __m256i even =
            floor_shift64(_mm256_add_epi64(_mm256_mul_epi32(x, m0), load(p.add_even + blk)), load(p.t_even + blk));
        const __m256i odd =
            floor_shift64(_mm256_add_epi64(_mm256_mul_epi32(_mm256_srli_epi64(x, 32), _mm256_srli_epi64(m0, 32)),
                                           load(p.add_odd + blk)),
                          load(p.t_odd + blk));
        v = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
      }
      store_u8x8(_mm256_add_epi32(v, zero), lo, hi, out + r * p.n + c, p.n - c);
    }
  }
}

// The float first pass's constants (Note [checked float requantization]),
// where the AVX-512 path runs and every channel's B is within its bound;
// `padded` channels (a multiple of 16).
void set_float_first(RequantPlan& q, int64_t padded) {
  if (!q.avx512) return;
  q.fm.assign(static_cast<size_t>(padded), 0.f);
  q.fb.assign(static_cast<size_t>(padded), 0.f);
  for (int64_t c = 0; c < q.n; ++c) {
    const int t = 31 + q.params.shift[c];
    const int64_t add = (c % 2 ? q.add_odd : q.add_even)[c / 2];
    const double b = std::ldexp(static_cast<double>(add), -t) + q.params.out_zero - kFloatRequantMargin;
    if (!(std::abs(b) <= kFloatRequantMaxAddend)) return;
    q.fm[c] = static_cast<float>(std::ldexp(static_cast<double>(q.params.m0[c]), -t));
    q.fb[c] = static_cast<float>(b);
  }
  q.float_first = true;
}

}  // namespace

RequantPlan make_requant_plan(const RequantParams& p, int64_t n) {
  // The vector paths clamp and narrow in bytes: the clamp must lie in them (a
  // layer's stored grid always does).
  QAT_CHECK(0 <= p.lo && p.lo <= p.hi && p.hi <= 255, "requantization: clamp [", p.lo, ", ", p.hi,
            "] is not inside the stored bytes 0..255");
  RequantPlan q;
  q.params = p;
  q.n = n;
  // The vector path covers shift in [0, 31] (multipliers below 1); any other
  // channel sends the layer to the scalar path.
  q.vector = cpu_has_avx2();
  q.avx512 = cpu_has_avx512bw();
  for (int64_t c = 0; q.vector && c < n; ++c) q.vector = p.shift[c] >= 0 && p.shift[c] <= 31;
  if (!q.vector) return q;
  const int64_t padded = (n + 15) / 16 * 16;
  q.m0.assign(static_cast<size_t>(padded), 0);
  q.add_even.assign(static_cast<size_t>(padded / 2), 0);
  q.add_odd.assign(static_cast<size_t>(padded / 2), 0);
  q.t_even.assign(static_cast<size_t>(padded / 2), 0);
  q.t_odd.assign(static_cast<size_t>(padded / 2), 0);
  q.add32.assign(static_cast<size_t>(padded), 0);
  q.e.assign(static_cast<size_t>(padded), 0);
  q.pure_shift = true;
  for (int64_t c = 0; c < n; ++c) {
    const int t = 31 + p.shift[c];
    const int64_t add = static_cast<int64_t>(p.bias[c]) * p.m0[c] + p.residual[c] + (int64_t{1} << (t - 1));
    q.m0[c] = p.m0[c];
    (c % 2 ? q.add_odd : q.add_even)[c / 2] = add;
    (c % 2 ? q.t_odd : q.t_even)[c / 2] = t;
    // floor(add / 2^30), and whether acc + it stays inside int32 for any acc
    // a layer can produce (|acc| < 2^30: IntLayer::finalize checks K)
    const int64_t add32 = add >> 30;
    q.pure_shift = q.pure_shift && p.m0[c] == (1 << 30) && add32 > -(int64_t{1} << 30) && add32 < (int64_t{1} << 30);
    q.add32[c] = static_cast<int32_t>(add32);
    q.e[c] = t - 30;
  }
  // The AVX-512 blocks: the odd lanes shift high where every t >= 32, the
  // zero point goes in the addends where every t <= 52 (|bias m0| < 2^62,
  // |residual| < 2^31, 2^(t-1) and z 2^t < 2^60: every sum stays inside int64).
  q.high = std::all_of(p.shift, p.shift + n, [](int32_t s) { return 31 + s >= 32; });
  q.zero_in_addend = q.high && std::all_of(p.shift, p.shift + n, [](int32_t s) { return 31 + s <= 52; });
  q.blocks.assign(static_cast<size_t>(padded / 16), RequantPlan::Block16{});
  for (int64_t c = 0; c < n; ++c) {
    RequantPlan::Block16& b = q.blocks[c / 16];
    const int64_t k = c % 16, lane = k / 2;
    const int t = 31 + p.shift[c];
    const int64_t add = (c % 2 ? q.add_odd : q.add_even)[c / 2] + (q.zero_in_addend ? int64_t{p.out_zero} << t : 0);
    b.m0[k] = p.m0[c];
    if (k > 0) b.m0_next[k - 1] = p.m0[c];
    (k % 2 ? b.add_odd : b.add_even)[lane] = add;
    (k % 2 ? b.t_odd : b.t_even)[lane] = k % 2 && q.high ? t - 32 : t;
  }
  set_float_first(q, padded);
  return q;
}

void requantize_rows(const int32_t* acc, int64_t rows, const RequantPlan& q, uint8_t* out) {
  if (q.vector && q.avx512) {
    if (q.pure_shift) return requantize_rows_avx512<RequantKind::shift>(acc, rows, q, out);
    if (q.high && q.zero_in_addend) return requantize_rows_avx512<RequantKind::high_zero>(acc, rows, q, out);
    if (q.high) return requantize_rows_avx512<RequantKind::high>(acc, rows, q, out);
    return requantize_rows_avx512<RequantKind::general>(acc, rows, q, out);
  }
  if (q.vector && q.pure_shift) return requantize_rows_avx2<true>(acc, rows, q, out);
  if (q.vector) return requantize_rows_avx2<false>(acc, rows, q, out);
  for (int64_t r = 0; r < rows; ++r) requantize_row_reference(acc + r * q.n, q.n, q.params, out + r * q.n);
}

namespace {
// dst = max(dst, src) over n bytes; restrict lets the compiler use vector max.
void max_into(uint8_t* __restrict dst, const uint8_t* __restrict src, int64_t n) {
  for (int64_t c = 0; c < n; ++c) dst[c] = std::max(dst[c], src[c]);
}

// One output pixel's maximum on AVX-512BW: 64 channels a step held in a
// register across the window's taps inside the image (each_pool_tap's), one
// store. ResNet-18's 3x3 stride-2 pool of 64 channels at 128 px, batch 32,
// Zen 5: 0.67-0.74 -> 0.43-0.47 ms (a tap's loop of stores into the output).
QAT_AVX512_TARGET void max_pool_pixel_avx512(const uint8_t* img, const PoolShape& s, int64_t oh, int64_t ow,
                                             uint8_t* dst) {
  const int64_t top = oh * s.stride_h - s.pad_h, left = ow * s.stride_w - s.pad_w;
  const int64_t h0 = std::max<int64_t>(top, 0), h1 = std::min(top + s.kh, s.h);
  const int64_t w0 = std::max<int64_t>(left, 0), w1 = std::min(left + s.kw, s.w);
  for (int64_t c = 0; c < s.c; c += 64) {
    const __mmask64 m = s.c - c >= 64 ? ~__mmask64{0} : (__mmask64{1} << (s.c - c)) - 1;
    __m512i v = _mm512_setzero_si512();
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw)
        v = _mm512_max_epu8(v, _mm512_maskz_loadu_epi8(m, img + (ih * s.w + iw) * s.c + c));
    _mm512_mask_storeu_epi8(dst + c, m, v);
  }
}
}  // namespace

PoolShape max_pool_shape(const Pool2dParams& p, int64_t n, int64_t h, int64_t w, int64_t c) {
  const int64_t oh = conv_out_size(h, p.kernel_h, p.stride_h, p.pad_h, 1, "integer max_pool");
  const int64_t ow = conv_out_size(w, p.kernel_w, p.stride_w, p.pad_w, 1, "integer max_pool");
  return {n, h, w, c, p.kernel_h, p.kernel_w, p.stride_h, p.stride_w, p.pad_h, p.pad_w, oh, ow};
}

void max_pool_u8(const uint8_t* x, const PoolShape& s, uint8_t* y) {
  const bool avx512 = cpu_has_avx512bw();
#pragma omp parallel for collapse(2) schedule(static) if (s.n * s.out_h * s.out_w * s.c > (1 << 16))
  for (int64_t b = 0; b < s.n; ++b) {
    for (int64_t oh = 0; oh < s.out_h; ++oh) {
      const uint8_t* img = x + b * s.h * s.w * s.c;
      for (int64_t ow = 0; ow < s.out_w; ++ow) {
        uint8_t* dst = y + ((b * s.out_h + oh) * s.out_w + ow) * s.c;
        if (avx512) {
          max_pool_pixel_avx512(img, s, oh, ow, dst);
          continue;
        }
        std::memset(dst, 0, static_cast<size_t>(s.c));
        int_math::each_pool_tap(oh, ow, s,
                                [&](int64_t ih, int64_t iw) { max_into(dst, img + (ih * s.w + iw) * s.c, s.c); });
      }
    }
  }
}

// The CPU loop (windows hoisted per output pixel; the device body,
// int_math::adaptive_avg_pool_u8_at, decodes every output index on its own):
// a pixel's channels summed as contiguous runs, and a window of one pixel
// (AlexNet's 6x6 -> 6x6 at 224 px, 3x3 -> 6x6 at 128 px) copied, its mean
// being itself.
void adaptive_avg_pool_u8(const uint8_t* x, int64_t n, int64_t h, int64_t w, int64_t c, int64_t out_h, int64_t out_w,
                          uint8_t* y) {
#pragma omp parallel if (n * out_h * out_w * c > (1 << 16))
  {
    std::vector<int64_t> sum(static_cast<size_t>(c));
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < n; ++b)
      for (int64_t oh = 0; oh < out_h; ++oh) {
        const auto [h0, h1] = adaptive_window(oh, h, out_h);
        for (int64_t ow = 0; ow < out_w; ++ow) {
          const auto [w0, w1] = adaptive_window(ow, w, out_w);
          const int64_t count = (h1 - h0) * (w1 - w0);
          uint8_t* dst = y + ((b * out_h + oh) * out_w + ow) * c;
          if (count == 1) {
            std::memcpy(dst, x + ((b * h + h0) * w + w0) * c, static_cast<size_t>(c));
            continue;
          }
          std::fill(sum.begin(), sum.end(), int64_t{0});
          for (int64_t i = h0; i < h1; ++i)
            for (int64_t j = w0; j < w1; ++j) {
              const uint8_t* src = x + ((b * h + i) * w + j) * c;
              for (int64_t ch = 0; ch < c; ++ch) sum[ch] += src[ch];
            }
          for (int64_t ch = 0; ch < c; ++ch) dst[ch] = int_math::mean_half_up(sum[ch], count);
        }
      }
  }
}

namespace {
// RGB planes' runs into one interleaved row: the group of three stores GCC
// vectorises with byte permutes (a runtime channel count keeps it scalar).
void interleave3(const uint8_t* __restrict r0, const uint8_t* __restrict r1, const uint8_t* __restrict r2, int64_t w,
                 uint8_t* __restrict dst) {
  for (int64_t j = 0; j < w; ++j) {
    dst[3 * j] = r0[j];
    dst[3 * j + 1] = r1[j];
    dst[3 * j + 2] = r2[j];
  }
}
}  // namespace

void quantize_input(const float* x, int64_t n, int64_t c, int64_t h, int64_t w, float scale, int32_t zero_point,
                    float frac, int32_t qmin, int32_t qmax, int32_t offset, uint8_t* y) {
  const float inv = 1.0f / scale;
  const float z = static_cast<float>(zero_point), lo = static_cast<float>(qmin), hi = static_cast<float>(qmax);
  // One image row at a time: each of the c plane rows quantized into a
  // contiguous run (vector code), then interleaved into the NHWC row (a
  // strided byte store per value in the quantizing loop kept it scalar).
#pragma omp parallel if (n * c * h * w > (1 << 16))
  {
    std::vector<uint8_t> runs(static_cast<size_t>(c * w));
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < n; ++b)
      for (int64_t i = 0; i < h; ++i) {
        for (int64_t ch = 0; ch < c; ++ch) {
          const float* src = x + ((b * c + ch) * h + i) * w;
          uint8_t* run = runs.data() + ch * w;
          for (int64_t j = 0; j < w; ++j)
            run[j] = int_math::quantize_input_value(src[j], inv, frac, z, lo, hi, offset);  // NaN: z
        }
        uint8_t* dst = y + (b * h + i) * w * c;
        if (c == 3)
          interleave3(runs.data(), runs.data() + w, runs.data() + 2 * w, w, dst);
        else
          for (int64_t j = 0; j < w; ++j)
            for (int64_t ch = 0; ch < c; ++ch) dst[j * c + ch] = runs[ch * w + j];
      }
  }
}

}  // namespace qat::quant
