// The unpacked GEMM's AVX-512 VNNI micro-kernels (int8_gemm_blocks.h):
// vpdpbusd on zmm, 64 bytes of K a step.
#include <cstring>

#include "quant/integer/int8_gemm_blocks.h"
#include "quant/integer/int8_gemm_x86.h"

namespace qat::quant::gemm_blocks {

namespace {

using x86::dpbusd;

// Merge steps of reduce16 (each 128-bit lane of the result sums partials):
// lane = [x0+x2, y0+y2, x1+x3, y1+y3]
QAT_TARGET_AVX512_VNNI inline __m512i merge32(__m512i x, __m512i y) {
  return _mm512_add_epi32(_mm512_unpacklo_epi32(x, y), _mm512_unpackhi_epi32(x, y));
}
// lane = [x0+x2, x1+x3, y0+y2, y1+y3]: after merge32, the partials of the four
// sources of x (two) and y (two), in order
QAT_TARGET_AVX512_VNNI inline __m512i merge64(__m512i x, __m512i y) {
  return _mm512_add_epi32(_mm512_unpacklo_epi64(x, y), _mm512_unpackhi_epi64(x, y));
}
// lanes = [x.0+x.1, x.2+x.3, y.0+y.1, y.2+y.3]
QAT_TARGET_AVX512_VNNI inline __m512i merge128(__m512i x, __m512i y) {
  return _mm512_add_epi32(_mm512_shuffle_i32x4(x, y, _MM_SHUFFLE(2, 0, 2, 0)),
                          _mm512_shuffle_i32x4(x, y, _MM_SHUFFLE(3, 1, 3, 1)));
}

// 16 vectors -> one vector whose lane q (128 bits) holds the sums of v4q ..
// v4q+3 in order: a transpose-and-add tree of 15 merges instead of 16
// separate reductions.
QAT_TARGET_AVX512_VNNI inline __m512i reduce16(__m512i v0, __m512i v1, __m512i v2, __m512i v3, __m512i v4, __m512i v5,
                                        __m512i v6, __m512i v7, __m512i v8, __m512i v9, __m512i v10, __m512i v11,
                                        __m512i v12, __m512i v13, __m512i v14, __m512i v15) {
  const __m512i u0 = merge64(merge32(v0, v1), merge32(v2, v3)), u1 = merge64(merge32(v4, v5), merge32(v6, v7));
  const __m512i u2 = merge64(merge32(v8, v9), merge32(v10, v11)), u3 = merge64(merge32(v12, v13), merge32(v14, v15));
  return merge128(merge128(u0, u1), merge128(u2, u3));
}

// Stores (or adds) the four 128-bit lanes of r as rows of C, `rows` of them,
// the first `nr` columns of each.
QAT_TARGET_AVX512_VNNI inline void store_lanes(__m512i r, int32_t* C, int64_t ldc, int rows, int nr, bool accumulate) {
  const __mmask8 cols = static_cast<__mmask8>((1u << nr) - 1);
  const __m128i lane[4] = {_mm512_castsi512_si128(r), _mm512_extracti32x4_epi32(r, 1),
                           _mm512_extracti32x4_epi32(r, 2), _mm512_extracti32x4_epi32(r, 3)};
  for (int i = 0; i < rows; ++i) {
    int32_t* c = C + i * ldc;
    __m128i row = lane[i];
    if (accumulate) row = _mm_add_epi32(row, _mm_maskz_loadu_epi32(cols, c));
    _mm_mask_storeu_epi32(c, cols, row);
  }
}

// vpdpbusd: u8 x s8, four products summed into each int32 lane, no
// saturation. 64 bytes of K a step; the tail uses masked loads (masked-off
// bytes read as zeros, which contribute nothing, and are never touched).
// 4 x 4 block: 16 accumulators, 8 loads per 16 vpdpbusd.
QAT_TARGET_AVX512_VNNI void vnni_4x4(const uint8_t* A, int64_t lda, const int8_t* B, int64_t ldb, int64_t K, int32_t* C,
                              int64_t ldc, int mr, int nr, bool accumulate) {
  QAT_ROWS4(a, A, lda, mr);
  QAT_ROWS4(b, B, ldb, nr);
  __m512i c00 = _mm512_setzero_si512(), c01 = c00, c02 = c00, c03 = c00, c10 = c00, c11 = c00, c12 = c00, c13 = c00,
          c20 = c00, c21 = c00, c22 = c00, c23 = c00, c30 = c00, c31 = c00, c32 = c00, c33 = c00;
#define QAT_STEP(LOADA, LOADB)                                                    \
  {                                                                               \
    const __m512i x0 = LOADA(a0), x1 = LOADA(a1), x2 = LOADA(a2), x3 = LOADA(a3); \
    __m512i y = LOADB(b0);                                                        \
    dpbusd(c00, x0, y);                                                     \
    dpbusd(c10, x1, y);                                                     \
    dpbusd(c20, x2, y);                                                     \
    dpbusd(c30, x3, y);                                                     \
    y = LOADB(b1);                                                                \
    dpbusd(c01, x0, y);                                                     \
    dpbusd(c11, x1, y);                                                     \
    dpbusd(c21, x2, y);                                                     \
    dpbusd(c31, x3, y);                                                     \
    y = LOADB(b2);                                                                \
    dpbusd(c02, x0, y);                                                     \
    dpbusd(c12, x1, y);                                                     \
    dpbusd(c22, x2, y);                                                     \
    dpbusd(c32, x3, y);                                                     \
    y = LOADB(b3);                                                                \
    dpbusd(c03, x0, y);                                                     \
    dpbusd(c13, x1, y);                                                     \
    dpbusd(c23, x2, y);                                                     \
    dpbusd(c33, x3, y);                                                     \
  }
  int64_t k = 0;
#define QAT_LD(p) _mm512_loadu_si512(p + k)
  for (; k + 64 <= K; k += 64) QAT_STEP(QAT_LD, QAT_LD)
#undef QAT_LD
  if (k < K) {
    const __mmask64 m = (~0ULL) >> (64 - (K - k));
#define QAT_LD(p) _mm512_maskz_loadu_epi8(m, p + k)
    QAT_STEP(QAT_LD, QAT_LD)
#undef QAT_LD
  }
#undef QAT_STEP
  const __m512i r = reduce16(c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23, c30, c31, c32, c33);
  store_lanes(r, C, ldc, mr, nr, accumulate);
}

// One row of A x up to 16 rows of B (M < 3, or the last rows of a tile): one
// dot product after the other, four accumulators each. Such a block is bound
// by streaming B from memory (a batch-1 fully connected layer), and one
// sequential stream per thread beats interleaving several rows of B, which
// the register-blocked form would do (measured at M = 1, N = 4096, K = 9216,
// two threads: ~60 GMAC/s against ~50 for a 1 x 4 block).
QAT_TARGET_AVX512_VNNI void vnni_row(const uint8_t* A, int64_t, const int8_t* B, int64_t ldb, int64_t K, int32_t* C, int64_t,
                              int, int nr, bool accumulate) {
  for (int j = 0; j < nr; ++j) {
    const int8_t* b = B + j * ldb;
    __m512i c0 = _mm512_setzero_si512(), c1 = c0, c2 = c0, c3 = c0;
    int64_t k = 0;
    for (; k + 256 <= K; k += 256) {
      dpbusd(c0, _mm512_loadu_si512(A + k), _mm512_loadu_si512(b + k));
      dpbusd(c1, _mm512_loadu_si512(A + k + 64), _mm512_loadu_si512(b + k + 64));
      dpbusd(c2, _mm512_loadu_si512(A + k + 128), _mm512_loadu_si512(b + k + 128));
      dpbusd(c3, _mm512_loadu_si512(A + k + 192), _mm512_loadu_si512(b + k + 192));
    }
    for (; k + 64 <= K; k += 64) dpbusd(c0, _mm512_loadu_si512(A + k), _mm512_loadu_si512(b + k));
    if (k < K) {
      const __mmask64 m = (~0ULL) >> (64 - (K - k));
      dpbusd(c1, _mm512_maskz_loadu_epi8(m, A + k), _mm512_maskz_loadu_epi8(m, b + k));
    }
    const int32_t sum = _mm512_reduce_add_epi32(_mm512_add_epi32(_mm512_add_epi32(c0, c1), _mm512_add_epi32(c2, c3)));
    C[j] = accumulate ? C[j] + sum : sum;
  }
}

}  // namespace

constinit const KernelSet kAvx512Vnni{4, 4, &vnni_4x4, 3, 16, &vnni_row};

}  // namespace qat::quant::gemm_blocks
