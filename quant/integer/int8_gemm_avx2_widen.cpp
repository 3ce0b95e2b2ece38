// The unpacked GEMM's AVX2 micro-kernels (int8_gemm_blocks.h): u8 and s8
// widened to int16 and multiplied with vpmaddwd, 16 bytes of K a step.
#include <cstring>

#include "quant/integer/int8_gemm_blocks.h"
#include "quant/integer/int8_gemm_x86.h"

namespace qat::quant::gemm_blocks {

namespace {

using x86::madd_add;
using x86::reduce4;
using x86::store4;
using x86::sum4;

// AVX2: 16 bytes of K a step, both operands widened to int16 and multiplied
// with madd, whose int32 pair sums are exact (|255 * -128 * 2| < 2^31), unlike
// maddubs, which saturates in int16. AVX2 has no byte-masked loads: see
// tail_keep for the K tail.
QAT_TARGET_AVX2 inline __m256i widen_u8(const uint8_t* p) {
  return _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
QAT_TARGET_AVX2 inline __m256i widen_s8(const int8_t* p) {
  return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
// The K tail (K % 16 = t bytes, K >= 16): the last 16 bytes of the row, with
// those of B that the full steps already counted zeroed, so that their
// products vanish; no copies, no reads outside the rows.
alignas(32) constexpr int8_t tail_keep_table[32] = {0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,
                                                    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
QAT_TARGET_AVX2 inline __m128i tail_keep(int64_t t) {  // last t bytes set
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(tail_keep_table + t));
}
QAT_TARGET_AVX2 inline __m256i widen_s8_keep(const int8_t* p, __m128i keep) {
  return _mm256_cvtepi8_epi16(_mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), keep));
}

// 3 x 4 block: 12 accumulators + 3 widened rows of A + 1 of B = 16 registers.
QAT_TARGET_AVX2 void avx2_3x4(const uint8_t* A, int64_t lda, const int8_t* B, int64_t ldb, int64_t K, int32_t* C,
                              int64_t ldc, int mr, int nr, bool accumulate) {
  const uint8_t* a0 = A;
  const uint8_t* a1 = A + (mr > 1 ? 1 : 0) * lda;
  const uint8_t* a2 = A + (mr > 2 ? 2 : mr - 1) * lda;
  QAT_ROWS4(b, B, ldb, nr);
  __m256i c00 = _mm256_setzero_si256(), c01 = c00, c02 = c00, c03 = c00, c10 = c00, c11 = c00, c12 = c00, c13 = c00,
          c20 = c00, c21 = c00, c22 = c00, c23 = c00;
#define QAT_STEP(WA, WB)                                 \
  {                                                      \
    const __m256i x0 = WA(a0), x1 = WA(a1), x2 = WA(a2); \
    __m256i y = WB(b0);                                  \
    madd_add(c00, x0, y);                          \
    madd_add(c10, x1, y);                          \
    madd_add(c20, x2, y);                          \
    y = WB(b1);                                          \
    madd_add(c01, x0, y);                          \
    madd_add(c11, x1, y);                          \
    madd_add(c21, x2, y);                          \
    y = WB(b2);                                          \
    madd_add(c02, x0, y);                          \
    madd_add(c12, x1, y);                          \
    madd_add(c22, x2, y);                          \
    y = WB(b3);                                          \
    madd_add(c03, x0, y);                          \
    madd_add(c13, x1, y);                          \
    madd_add(c23, x2, y);                          \
  }
  int64_t k = 0;
#define QAT_WA(p) widen_u8((p) + k)
#define QAT_WB(p) widen_s8((p) + k)
  for (; k + 16 <= K; k += 16) QAT_STEP(QAT_WA, QAT_WB)
#undef QAT_WA
#undef QAT_WB
  if (k < K && K >= 16) {
    const __m128i keep = tail_keep(K - k);
#define QAT_WA(p) widen_u8((p) + K - 16)
#define QAT_WB(p) widen_s8_keep((p) + K - 16, keep)
    QAT_STEP(QAT_WA, QAT_WB)
#undef QAT_WA
#undef QAT_WB
  } else if (k < K) {  // K < 16: zero-padded copies
    alignas(16) uint8_t ta[3][16] = {};
    alignas(16) int8_t tb[4][16] = {};
    const size_t t = static_cast<size_t>(K);
    std::memcpy(ta[0], a0, t), std::memcpy(ta[1], a1, t), std::memcpy(ta[2], a2, t);
    std::memcpy(tb[0], b0, t), std::memcpy(tb[1], b1, t), std::memcpy(tb[2], b2, t), std::memcpy(tb[3], b3, t);
    a0 = ta[0], a1 = ta[1], a2 = ta[2], b0 = tb[0], b1 = tb[1], b2 = tb[2], b3 = tb[3];
    QAT_STEP(widen_u8, widen_s8)
  }
#undef QAT_STEP
  store4(reduce4(c00, c01, c02, c03), C, nr, accumulate);
  if (mr > 1) store4(reduce4(c10, c11, c12, c13), C + ldc, nr, accumulate);
  if (mr > 2) store4(reduce4(c20, c21, c22, c23), C + 2 * ldc, nr, accumulate);
}


// One row of A x up to 8 rows of B (M == 1, or a tile's last row): one dot
// product after the other, as in vnni_row.
QAT_TARGET_AVX2 void avx2_row(const uint8_t* A, int64_t, const int8_t* B, int64_t ldb, int64_t K, int32_t* C, int64_t,
                              int, int nr, bool accumulate) {
  for (int j = 0; j < nr; ++j) {
    const int8_t* b = B + j * ldb;
    __m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0, c3 = c0;
    int64_t k = 0;
    for (; k + 64 <= K; k += 64) {
      madd_add(c0, widen_u8(A + k), widen_s8(b + k));
      madd_add(c1, widen_u8(A + k + 16), widen_s8(b + k + 16));
      madd_add(c2, widen_u8(A + k + 32), widen_s8(b + k + 32));
      madd_add(c3, widen_u8(A + k + 48), widen_s8(b + k + 48));
    }
    for (; k + 16 <= K; k += 16) madd_add(c0, widen_u8(A + k), widen_s8(b + k));
    if (k < K && K >= 16) {
      madd_add(c1, widen_u8(A + K - 16), widen_s8_keep(b + K - 16, tail_keep(K - k)));
    } else if (k < K) {  // K < 16: zero-padded copies
      alignas(16) uint8_t ta[16] = {};
      alignas(16) int8_t tb[16] = {};
      std::memcpy(ta, A, static_cast<size_t>(K));
      std::memcpy(tb, b, static_cast<size_t>(K));
      madd_add(c1, widen_u8(ta), widen_s8(tb));
    }
    const int32_t sum = sum4(c0, c1, c2, c3);
    C[j] = accumulate ? C[j] + sum : sum;
  }
}

}  // namespace

constinit const KernelSet kAvx2{3, 4, &avx2_3x4, 2, 8, &avx2_row};

}  // namespace qat::quant::gemm_blocks
