#include "quant/int_kernels.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace qat::quant {

namespace {

bool has_avx512() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  }();
  return yes;
}

// n <= 64 bytes in one masked load/store (no call, no overrun).
__attribute__((target("avx512f,avx512bw"))) inline void copy_upto64(uint8_t* dst, const uint8_t* src, int64_t n) {
  const __mmask64 m = n >= 64 ? ~0ULL : (1ULL << n) - 1;
  _mm512_mask_storeu_epi8(dst, m, _mm512_maskz_loadu_epi8(m, src));
}

}  // namespace

void im2row_u8(const uint8_t* x, const Im2RowShape& s, uint8_t pad_value, uint8_t* rows) {
  im2row_u8_range(x, s, pad_value, 0, s.out_h * s.out_w, rows);
}

void im2row_u8_range(const uint8_t* x, const Im2RowShape& s, uint8_t pad_value, int64_t first, int64_t count,
                     uint8_t* rows) {
  const int64_t K = s.kh * s.kw * s.c, span = s.kw * s.c;
  const bool small_span = span <= 64 && has_avx512();
  for (int64_t p = first; p < first + count; ++p) {
    {
      const int64_t oh = p / s.out_w, ow = p % s.out_w;
      uint8_t* row = rows + (p - first) * K;
      const int64_t iw0 = ow * s.stride_w - s.pad_w;
      // With dilation 1 a kernel row is kw adjacent pixels: one copy of kw*C
      // bytes when it lies inside the image (small C would otherwise mean
      // thousands of tiny copies per output).
      const bool row_inside = s.dil_w == 1 && iw0 >= 0 && iw0 + s.kw <= s.w;
      for (int64_t i = 0; i < s.kh; ++i) {
        const int64_t ih = oh * s.stride_h - s.pad_h + i * s.dil_h;
        uint8_t* dst = row + i * span;
        if (ih < 0 || ih >= s.h) {
          std::memset(dst, pad_value, static_cast<size_t>(span));
          continue;
        }
        const uint8_t* src = x + ih * s.w * s.c;
        if (row_inside) {
          if (small_span) copy_upto64(dst, src + iw0 * s.c, span);
          else std::memcpy(dst, src + iw0 * s.c, static_cast<size_t>(span));
          continue;
        }
        for (int64_t j = 0; j < s.kw; ++j) {
          const int64_t iw = iw0 + j * s.dil_w;
          if (iw < 0 || iw >= s.w) std::memset(dst + j * s.c, pad_value, static_cast<size_t>(s.c));
          else std::memcpy(dst + j * s.c, src + iw * s.c, static_cast<size_t>(s.c));
        }
      }
    }
  }
}

int32_t requantize_value(int32_t acc, int32_t m0, int32_t shift, int32_t residual) {
  // round((acc * m0 + residual) / 2^t), t = 31 + shift, half away from zero,
  // from the exact 64-bit value (|acc * m0| < 2^62).
  const int t = 31 + shift;
  const int64_t p = static_cast<int64_t>(acc) * m0 + residual;
  int64_t r;
  if (t <= 0) r = p * (int64_t{1} << -t);  // cannot occur for valid multipliers (shift >= -31)
  else if (t >= 63) r = 0;
  else r = (p + (int64_t{1} << (t - 1)) - (p < 0 ? 1 : 0)) >> t;
  return static_cast<int32_t>(
      std::clamp<int64_t>(r, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()));
}

void requantize_row_reference(const int32_t* acc, int64_t n, const RequantParams& p, uint8_t* out) {
  for (int64_t c = 0; c < n; ++c) {
    const int32_t v = p.out_zero + requantize_value(acc[c] + p.bias[c], p.m0[c], p.shift[c], p.residual[c]);
    out[c] = static_cast<uint8_t>(std::clamp(v, p.lo, p.hi));
  }
}

namespace {

// 16 lanes of requantize_value for shift in [0, 31] (the caller checks):
// even and odd lanes as 64-bit products, one rounding shift each.
__attribute__((target("avx512f,avx512bw"))) __m512i round_shift64(__m512i p, __m512i t) {
  const __m512i one = _mm512_set1_epi64(1);
  const __mmask8 negative = _mm512_cmplt_epi64_mask(p, _mm512_setzero_si512());
  __m512i nudge = _mm512_sllv_epi64(one, _mm512_sub_epi64(t, one));
  nudge = _mm512_mask_sub_epi64(nudge, negative, nudge, one);
  return _mm512_srav_epi64(_mm512_add_epi64(p, nudge), t);
}

__attribute__((target("avx512f,avx512bw"))) __m512i requant16(__m512i x, __m512i m0, __m512i shift, __m512i r) {
  const __m512i t = _mm512_add_epi32(shift, _mm512_set1_epi32(31));
  // residuals sign-extended to 64 bits: even lanes from the low halves, odd from the high
  const __m512i r_even = _mm512_srai_epi64(_mm512_slli_epi64(r, 32), 32), r_odd = _mm512_srai_epi64(r, 32);
  const __m512i even = round_shift64(_mm512_add_epi64(_mm512_mul_epi32(x, m0), r_even),
                                     _mm512_and_si512(t, _mm512_set1_epi64(0xFFFFFFFF)));
  const __m512i odd = round_shift64(
      _mm512_add_epi64(_mm512_mul_epi32(_mm512_srli_epi64(x, 32), _mm512_srli_epi64(m0, 32)), r_odd),
      _mm512_srli_epi64(t, 32));
  return _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
}

__attribute__((target("avx512f,avx512bw"))) void requantize_row_avx512(const int32_t* acc, int64_t n,
                                                                       const RequantParams& p, uint8_t* out) {
  const __m512i zero = _mm512_set1_epi32(p.out_zero), lo = _mm512_set1_epi32(p.lo), hi = _mm512_set1_epi32(p.hi);
  for (int64_t c = 0; c < n; c += 16) {
    const __mmask16 m = n - c >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - c)) - 1);
    const __m512i x = _mm512_add_epi32(_mm512_maskz_loadu_epi32(m, acc + c), _mm512_maskz_loadu_epi32(m, p.bias + c));
    const __m512i m0 = _mm512_maskz_loadu_epi32(m, p.m0 + c);
    const __m512i sh = _mm512_maskz_loadu_epi32(m, p.shift + c);
    const __m512i r = _mm512_maskz_loadu_epi32(m, p.residual + c);
    __m512i v = _mm512_add_epi32(requant16(x, m0, sh, r), zero);
    v = _mm512_min_epi32(_mm512_max_epi32(v, lo), hi);
    _mm512_mask_cvtepi32_storeu_epi8(out + c, m, v);
  }
}


}  // namespace

bool requant_vector_ok(const RequantParams& p, int64_t n) {
  bool ok = has_avx512();
  for (int64_t c = 0; ok && c < n; ++c) ok = p.shift[c] >= 0 && p.shift[c] <= 31;
  return ok;
}

void requantize_rows(const int32_t* acc, int64_t rows, int64_t n, const RequantParams& p, uint8_t* out) {
  if (requant_vector_ok(p, n)) {
    for (int64_t r = 0; r < rows; ++r) requantize_row_avx512(acc + r * n, n, p, out + r * n);
  } else {
    for (int64_t r = 0; r < rows; ++r) requantize_row_reference(acc + r * n, n, p, out + r * n);
  }
}

void requantize_row(const int32_t* acc, int64_t n, const RequantParams& p, uint8_t* out) {
  // The vector path covers shift in [0, 31] (multipliers below 1); any other
  // channel sends the row to the scalar path.
  bool vector_ok = has_avx512();
  for (int64_t c = 0; vector_ok && c < n; ++c) vector_ok = p.shift[c] >= 0 && p.shift[c] <= 31;
  if (vector_ok) requantize_row_avx512(acc, n, p, out);
  else requantize_row_reference(acc, n, p, out);
}

namespace {
// dst = max(dst, src) over n bytes; restrict lets the compiler use vector max.
void max_into(uint8_t* __restrict dst, const uint8_t* __restrict src, int64_t n) {
  for (int64_t c = 0; c < n; ++c) dst[c] = std::max(dst[c], src[c]);
}
}  // namespace

void max_pool_u8(const uint8_t* x, const PoolShape& s, uint8_t* y) {
#pragma omp parallel for collapse(2) schedule(static) if (s.n * s.out_h * s.out_w * s.c > (1 << 16))
  for (int64_t b = 0; b < s.n; ++b) {
    for (int64_t oh = 0; oh < s.out_h; ++oh) {
      const uint8_t* img = x + b * s.h * s.w * s.c;
      for (int64_t ow = 0; ow < s.out_w; ++ow) {
        uint8_t* dst = y + ((b * s.out_h + oh) * s.out_w + ow) * s.c;
        std::memset(dst, 0, static_cast<size_t>(s.c));
        for (int64_t i = 0; i < s.kh; ++i) {
          const int64_t ih = oh * s.stride_h - s.pad_h + i;
          if (ih < 0 || ih >= s.h) continue;
          for (int64_t j = 0; j < s.kw; ++j) {
            const int64_t iw = ow * s.stride_w - s.pad_w + j;
            if (iw < 0 || iw >= s.w) continue;
            max_into(dst, img + (ih * s.w + iw) * s.c, s.c);
          }
        }
      }
    }
  }
}

void adaptive_avg_pool_u8(const uint8_t* x, int64_t n, int64_t h, int64_t w, int64_t c, int64_t out_h, int64_t out_w,
                          uint8_t* y) {
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t oh = 0; oh < out_h; ++oh) {
      const int64_t h0 = oh * h / out_h, h1 = ((oh + 1) * h + out_h - 1) / out_h;
      for (int64_t ow = 0; ow < out_w; ++ow) {
        const int64_t w0 = ow * w / out_w, w1 = ((ow + 1) * w + out_w - 1) / out_w;
        const int64_t count = (h1 - h0) * (w1 - w0);
        uint8_t* dst = y + ((b * out_h + oh) * out_w + ow) * c;
        for (int64_t ch = 0; ch < c; ++ch) {
          int64_t sum = 0;
          for (int64_t i = h0; i < h1; ++i)
            for (int64_t j = w0; j < w1; ++j) sum += x[((b * h + i) * w + j) * c + ch];
          dst[ch] = static_cast<uint8_t>((2 * sum + count) / (2 * count));  // round half up
        }
      }
    }
  }
}

void quantize_input(const float* x, int64_t n, int64_t c, int64_t h, int64_t w, float scale, int32_t zero_point,
                    int32_t qmin, int32_t qmax, int32_t offset, uint8_t* y) {
  const float inv = 1.0f / scale;
  const float z = static_cast<float>(zero_point), lo = static_cast<float>(qmin), hi = static_cast<float>(qmax);
#pragma omp parallel for collapse(2) schedule(static) if (n * c * h * w > (1 << 16))
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch) {
      const float* src = x + (b * c + ch) * h * w;
      uint8_t* dst = y + b * h * w * c + ch;
      for (int64_t p = 0; p < h * w; ++p) {
        const float q = std::clamp(std::nearbyint(src[p] * inv) + z, lo, hi);  // NaN: see below
        dst[p * c] = static_cast<uint8_t>(static_cast<int32_t>(std::isnan(q) ? z : q) + offset);
      }
    }
}

}  // namespace qat::quant
