#include "quant/integer/int8_gemm.h"

#include "quant/integer/simd.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/error.h"
#include "quant/integer/amx_tiles.h"
#include "core/cpu_features.h"
#include "quant/integer/int8_gemm_amx.h"

namespace qat::quant {

const char* gemm_kernel_name(GemmKernel k) { return enum_name(k); }

bool gemm_kernel_runs_here(GemmKernel k) {
  switch (k) {
    case GemmKernel::reference:
    case GemmKernel::amx_emulated: return true;
    case GemmKernel::avx2: return cpu_has_avx2();
    case GemmKernel::avx_vnni: return cpu_has_avx_vnni();
    case GemmKernel::avx512_vnni: return cpu_has_avx512_vnni() && cpu_has_avx512_rows();
    case GemmKernel::amx: return amx::amx_hardware_usable();
  }
  return false;
}

GemmKernel best_gemm_kernel() {
  for (GemmKernel k : {GemmKernel::amx, GemmKernel::avx512_vnni, GemmKernel::avx_vnni, GemmKernel::avx2})
    if (gemm_kernel_runs_here(k)) return k;
  return GemmKernel::reference;
}

std::vector<GemmKernel> gemm_kernels_here() {
  std::vector<GemmKernel> out;
  for (const auto& [k, name] : enum_names(GemmKernel{}))
    if (gemm_kernel_runs_here(k)) out.push_back(k);
  return out;
}

bool is_amx(GemmKernel k) { return k == GemmKernel::amx || k == GemmKernel::amx_emulated; }

namespace {

// ---------------------------------------------------------------- reference

int32_t dot_reference(const uint8_t* a, const int8_t* b, int64_t K) {
  int32_t acc = 0;
  for (int64_t k = 0; k < K; ++k) acc += static_cast<int32_t>(a[k]) * static_cast<int32_t>(b[k]);
  return acc;
}

void gemm_reference(int64_t M, int64_t N, int64_t K, const uint8_t* A, int64_t lda, const int8_t* B, int64_t ldb,
                    int32_t* C, int64_t ldc) {
#pragma omp parallel for collapse(2) schedule(static) if (M * N * K > (1 << 20))
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) C[m * ldc + n] = dot_reference(A + m * lda, B + n * ldb, K);
}

// ------------------------------------------------------------ micro-kernels
//
// Both operands are K-contiguous (A row-major, B one row per output channel),
// so a micro-kernel holds a block of C as vector accumulators of partial dot
// products, runs over K once, then reduces them horizontally. Everything is
// exact int32 arithmetic, so the order of the sums is free and each result
// equals the reference bit for bit.
//
// A kernel computes the block at A (rows lda apart) x B (rows ldb apart) into
// C, of which only the first `mr` rows and `nr` columns exist: rows past the
// edge read the last real row again (their results are dropped), so one
// unrolled kernel serves the edges too. `accumulate` adds the block to C
// (later K blocks) instead of storing it. The accumulators are named variables,
// not arrays: GCC keeps arrays of vectors in memory or shuffles them between
// registers every step.

using BlockFn = void (*)(const uint8_t* A, int64_t lda, const int8_t* B, int64_t ldb, int64_t K, int32_t* C,
                         int64_t ldc, int mr, int nr, bool accumulate);

// Row pointers of a block, clamped at the edge.
#define QAT_ROWS4(P, X, ld, n)                           \
  const auto* P##0 = X;                                  \
  const auto* P##1 = X + ((n) > 1 ? 1 : 0) * (ld);       \
  const auto* P##2 = X + ((n) > 2 ? 2 : (n) - 1) * (ld); \
  const auto* P##3 = X + ((n) > 3 ? 3 : (n) - 1) * (ld)

#define QAT_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

// Merge steps of reduce16 (each 128-bit lane of the result sums partials):
// lane = [x0+x2, y0+y2, x1+x3, y1+y3]
QAT_VNNI_TARGET inline __m512i merge32(__m512i x, __m512i y) {
  return _mm512_add_epi32(_mm512_unpacklo_epi32(x, y), _mm512_unpackhi_epi32(x, y));
}
// lane = [x0+x2, x1+x3, y0+y2, y1+y3]: after merge32, the partials of the four
// sources of x (two) and y (two), in order
QAT_VNNI_TARGET inline __m512i merge64(__m512i x, __m512i y) {
  return _mm512_add_epi32(_mm512_unpacklo_epi64(x, y), _mm512_unpackhi_epi64(x, y));
}
// lanes = [x.0+x.1, x.2+x.3, y.0+y.1, y.2+y.3]
QAT_VNNI_TARGET inline __m512i merge128(__m512i x, __m512i y) {
  return _mm512_add_epi32(_mm512_shuffle_i32x4(x, y, _MM_SHUFFLE(2, 0, 2, 0)),
                          _mm512_shuffle_i32x4(x, y, _MM_SHUFFLE(3, 1, 3, 1)));
}

// 16 vectors -> one vector whose lane q (128 bits) holds the sums of v4q ..
// v4q+3 in order: a transpose-and-add tree of 15 merges instead of 16
// separate reductions.
QAT_VNNI_TARGET inline __m512i reduce16(__m512i v0, __m512i v1, __m512i v2, __m512i v3, __m512i v4, __m512i v5,
                                        __m512i v6, __m512i v7, __m512i v8, __m512i v9, __m512i v10, __m512i v11,
                                        __m512i v12, __m512i v13, __m512i v14, __m512i v15) {
  const __m512i u0 = merge64(merge32(v0, v1), merge32(v2, v3)), u1 = merge64(merge32(v4, v5), merge32(v6, v7));
  const __m512i u2 = merge64(merge32(v8, v9), merge32(v10, v11)), u3 = merge64(merge32(v12, v13), merge32(v14, v15));
  return merge128(merge128(u0, u1), merge128(u2, u3));
}

// Stores (or adds) the four 128-bit lanes of r as rows of C, `rows` of them,
// the first `nr` columns of each.
QAT_VNNI_TARGET inline void store_lanes(__m512i r, int32_t* C, int64_t ldc, int rows, int nr, bool accumulate) {
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

// vpdpbusd through inline asm: with the intrinsic, GCC 12 copies every
// accumulator between registers each step (it does not tie the destructive
// operand), which makes the kernel about a third slower. B is a register operand
// ("v", not "vm"), else GCC folds its load into each vpdpbusd that uses it.
QAT_VNNI_TARGET inline __m512i dpbusd(__m512i acc, __m512i a, __m512i b) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}

// vpdpbusd: u8 x s8, four products summed into each int32 lane, no
// saturation. 64 bytes of K a step; the tail uses masked loads (masked-off
// bytes read as zeros, which contribute nothing, and are never touched).
// 4 x 4 block: 16 accumulators, 8 loads per 16 vpdpbusd.
QAT_VNNI_TARGET void vnni_4x4(const uint8_t* A, int64_t lda, const int8_t* B, int64_t ldb, int64_t K, int32_t* C,
                              int64_t ldc, int mr, int nr, bool accumulate) {
  QAT_ROWS4(a, A, lda, mr);
  QAT_ROWS4(b, B, ldb, nr);
  __m512i c00 = _mm512_setzero_si512(), c01 = c00, c02 = c00, c03 = c00, c10 = c00, c11 = c00, c12 = c00, c13 = c00,
          c20 = c00, c21 = c00, c22 = c00, c23 = c00, c30 = c00, c31 = c00, c32 = c00, c33 = c00;
#define QAT_STEP(LOADA, LOADB)                                                    \
  {                                                                               \
    const __m512i x0 = LOADA(a0), x1 = LOADA(a1), x2 = LOADA(a2), x3 = LOADA(a3); \
    __m512i y = LOADB(b0);                                                        \
    c00 = dpbusd(c00, x0, y);                                                     \
    c10 = dpbusd(c10, x1, y);                                                     \
    c20 = dpbusd(c20, x2, y);                                                     \
    c30 = dpbusd(c30, x3, y);                                                     \
    y = LOADB(b1);                                                                \
    c01 = dpbusd(c01, x0, y);                                                     \
    c11 = dpbusd(c11, x1, y);                                                     \
    c21 = dpbusd(c21, x2, y);                                                     \
    c31 = dpbusd(c31, x3, y);                                                     \
    y = LOADB(b2);                                                                \
    c02 = dpbusd(c02, x0, y);                                                     \
    c12 = dpbusd(c12, x1, y);                                                     \
    c22 = dpbusd(c22, x2, y);                                                     \
    c32 = dpbusd(c32, x3, y);                                                     \
    y = LOADB(b3);                                                                \
    c03 = dpbusd(c03, x0, y);                                                     \
    c13 = dpbusd(c13, x1, y);                                                     \
    c23 = dpbusd(c23, x2, y);                                                     \
    c33 = dpbusd(c33, x3, y);                                                     \
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
QAT_VNNI_TARGET void vnni_row(const uint8_t* A, int64_t, const int8_t* B, int64_t ldb, int64_t K, int32_t* C, int64_t,
                              int, int nr, bool accumulate) {
  for (int j = 0; j < nr; ++j) {
    const int8_t* b = B + j * ldb;
    __m512i c0 = _mm512_setzero_si512(), c1 = c0, c2 = c0, c3 = c0;
    int64_t k = 0;
    for (; k + 256 <= K; k += 256) {
      c0 = dpbusd(c0, _mm512_loadu_si512(A + k), _mm512_loadu_si512(b + k));
      c1 = dpbusd(c1, _mm512_loadu_si512(A + k + 64), _mm512_loadu_si512(b + k + 64));
      c2 = dpbusd(c2, _mm512_loadu_si512(A + k + 128), _mm512_loadu_si512(b + k + 128));
      c3 = dpbusd(c3, _mm512_loadu_si512(A + k + 192), _mm512_loadu_si512(b + k + 192));
    }
    for (; k + 64 <= K; k += 64) c0 = dpbusd(c0, _mm512_loadu_si512(A + k), _mm512_loadu_si512(b + k));
    if (k < K) {
      const __mmask64 m = (~0ULL) >> (64 - (K - k));
      c1 = dpbusd(c1, _mm512_maskz_loadu_epi8(m, A + k), _mm512_maskz_loadu_epi8(m, b + k));
    }
    const int32_t sum = _mm512_reduce_add_epi32(_mm512_add_epi32(_mm512_add_epi32(c0, c1), _mm512_add_epi32(c2, c3)));
    C[j] = accumulate ? C[j] + sum : sum;
  }
}

#define QAT_AVX2_TARGET __attribute__((target("avx2")))

// AVX2: 16 bytes of K a step, both operands widened to int16 and multiplied
// with madd, whose int32 pair sums are exact (|255 * -128 * 2| < 2^31), unlike
// maddubs, which saturates in int16. AVX2 has no byte-masked loads: see
// tail_keep for the K tail.
QAT_AVX2_TARGET inline __m256i widen_u8(const uint8_t* p) {
  return _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
QAT_AVX2_TARGET inline __m256i widen_s8(const int8_t* p) {
  return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
// (The add is inline asm for the same reason as dpbusd above: with the
// intrinsic GCC 12 moves every accumulator to another register each step.)
QAT_AVX2_TARGET inline __m256i madd_add(__m256i acc, __m256i x, __m256i y) {
  const __m256i p = _mm256_madd_epi16(x, y);
  asm("vpaddd %1, %0, %0" : "+v"(acc) : "v"(p));
  return acc;
}
// The K tail (K % 16 = t bytes, K >= 16): the last 16 bytes of the row, with
// those of B that the full steps already counted zeroed, so that their
// products vanish; no copies, no reads outside the rows.
alignas(32) constexpr int8_t tail_keep_table[32] = {0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,
                                                    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
QAT_AVX2_TARGET inline __m128i tail_keep(int64_t t) {  // last t bytes set
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(tail_keep_table + t));
}
QAT_AVX2_TARGET inline __m256i widen_s8_keep(const int8_t* p, __m128i keep) {
  return _mm256_cvtepi8_epi16(_mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), keep));
}
// The four row sums of v0 .. v3 as one vector.
QAT_AVX2_TARGET inline __m128i reduce4(__m256i v0, __m256i v1, __m256i v2, __m256i v3) {
  const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(v0, v1), _mm256_hadd_epi32(v2, v3));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}
QAT_AVX2_TARGET inline void store4(__m128i r, int32_t* c, int nr, bool accumulate) {
  alignas(16) int32_t out[4];
  _mm_store_si128(reinterpret_cast<__m128i*>(out), r);
  for (int j = 0; j < nr; ++j) c[j] = accumulate ? c[j] + out[j] : out[j];
}

// 3 x 4 block: 12 accumulators + 3 widened rows of A + 1 of B = 16 registers.
QAT_AVX2_TARGET void avx2_3x4(const uint8_t* A, int64_t lda, const int8_t* B, int64_t ldb, int64_t K, int32_t* C,
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
    c00 = madd_add(c00, x0, y);                          \
    c10 = madd_add(c10, x1, y);                          \
    c20 = madd_add(c20, x2, y);                          \
    y = WB(b1);                                          \
    c01 = madd_add(c01, x0, y);                          \
    c11 = madd_add(c11, x1, y);                          \
    c21 = madd_add(c21, x2, y);                          \
    y = WB(b2);                                          \
    c02 = madd_add(c02, x0, y);                          \
    c12 = madd_add(c12, x1, y);                          \
    c22 = madd_add(c22, x2, y);                          \
    y = WB(b3);                                          \
    c03 = madd_add(c03, x0, y);                          \
    c13 = madd_add(c13, x1, y);                          \
    c23 = madd_add(c23, x2, y);                          \
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

// The sum of every int32 lane of four accumulators (the one-row kernels').
QAT_AVX2_TARGET inline int32_t sum4(__m256i c0, __m256i c1, __m256i c2, __m256i c3) {
  const __m256i c = _mm256_add_epi32(_mm256_add_epi32(c0, c1), _mm256_add_epi32(c2, c3));
  __m128i h = _mm_add_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
  h = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(1, 0, 3, 2)));
  h = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(h);
}

// One row of A x up to 8 rows of B (M == 1, or a tile's last row): one dot
// product after the other, as in vnni_row.
QAT_AVX2_TARGET void avx2_row(const uint8_t* A, int64_t, const int8_t* B, int64_t ldb, int64_t K, int32_t* C, int64_t,
                              int, int nr, bool accumulate) {
  for (int j = 0; j < nr; ++j) {
    const int8_t* b = B + j * ldb;
    __m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0, c3 = c0;
    int64_t k = 0;
    for (; k + 64 <= K; k += 64) {
      c0 = madd_add(c0, widen_u8(A + k), widen_s8(b + k));
      c1 = madd_add(c1, widen_u8(A + k + 16), widen_s8(b + k + 16));
      c2 = madd_add(c2, widen_u8(A + k + 32), widen_s8(b + k + 32));
      c3 = madd_add(c3, widen_u8(A + k + 48), widen_s8(b + k + 48));
    }
    for (; k + 16 <= K; k += 16) c0 = madd_add(c0, widen_u8(A + k), widen_s8(b + k));
    if (k < K && K >= 16) {
      c1 = madd_add(c1, widen_u8(A + K - 16), widen_s8_keep(b + K - 16, tail_keep(K - k)));
    } else if (k < K) {  // K < 16: zero-padded copies
      alignas(16) uint8_t ta[16] = {};
      alignas(16) int8_t tb[16] = {};
      std::memcpy(ta, A, static_cast<size_t>(K));
      std::memcpy(tb, b, static_cast<size_t>(K));
      c1 = madd_add(c1, widen_u8(ta), widen_s8(tb));
    }
    const int32_t sum = sum4(c0, c1, c2, c3);
    C[j] = accumulate ? C[j] + sum : sum;
  }
}

// 32 bytes a load, and the K tail of the 32-byte kernels below: the last 32
// bytes of the row, those of B that the full steps already counted zeroed.
QAT_AVX2_TARGET inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
alignas(32) constexpr int8_t tail_keep32_table[64] = {
    0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,
    0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
QAT_AVX2_TARGET inline __m256i tail_keep32(int64_t t) { return load32(tail_keep32_table + t); }  // last t set


// AVX2 on operands whose pair sums fit int16 (gemm_u8s8s32_bounded): u8 x s8
// pairs summed in int16 by vpmaddubsw (32 products an instruction, no
// widening), then in int32 by vpmaddwd with ones. Exact only while
// |a0 b0 + a1 b1| <= 32767, which the caller's ranges guarantee.
QAT_AVX2_TARGET inline __m256i maddubs_add(__m256i acc, __m256i a, __m256i b, __m256i ones) {
  const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones);
  asm("vpaddd %1, %0, %0" : "+v"(acc) : "v"(p));  // (as madd_add)
  return acc;
}

// 2 x 4 block: 8 accumulators + 2 rows of A + 1 of B + the product + ones.
QAT_AVX2_TARGET void maddubs_2x4(const uint8_t* A, int64_t lda, const int8_t* B, int64_t ldb, int64_t K, int32_t* C,
                                 int64_t ldc, int mr, int nr, bool accumulate) {
  const uint8_t* a0 = A;
  const uint8_t* a1 = A + (mr > 1 ? lda : 0);
  QAT_ROWS4(b, B, ldb, nr);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i c00 = _mm256_setzero_si256(), c01 = c00, c02 = c00, c03 = c00, c10 = c00, c11 = c00, c12 = c00, c13 = c00;
#define QAT_STEP(LA, LB)                      \
  {                                           \
    const __m256i x0 = LA(a0), x1 = LA(a1);   \
    __m256i y = LB(b0);                       \
    c00 = maddubs_add(c00, x0, y, ones);      \
    c10 = maddubs_add(c10, x1, y, ones);      \
    y = LB(b1);                               \
    c01 = maddubs_add(c01, x0, y, ones);      \
    c11 = maddubs_add(c11, x1, y, ones);      \
    y = LB(b2);                               \
    c02 = maddubs_add(c02, x0, y, ones);      \
    c12 = maddubs_add(c12, x1, y, ones);      \
    y = LB(b3);                               \
    c03 = maddubs_add(c03, x0, y, ones);      \
    c13 = maddubs_add(c13, x1, y, ones);      \
  }
  int64_t k = 0;
#define QAT_LA(p) load32((p) + k)
  for (; k + 32 <= K; k += 32) QAT_STEP(QAT_LA, QAT_LA)
#undef QAT_LA
  if (k < K && K >= 32) {
    const __m256i keep = tail_keep32(K - k);
#define QAT_LA(p) load32((p) + K - 32)
#define QAT_LB(p) _mm256_and_si256(load32((p) + K - 32), keep)
    QAT_STEP(QAT_LA, QAT_LB)
#undef QAT_LA
#undef QAT_LB
  } else if (k < K) {  // K < 32: zero-padded copies
    alignas(32) uint8_t ta[2][32] = {};
    alignas(32) int8_t tb[4][32] = {};
    const size_t t = static_cast<size_t>(K);
    std::memcpy(ta[0], a0, t), std::memcpy(ta[1], a1, t);
    std::memcpy(tb[0], b0, t), std::memcpy(tb[1], b1, t), std::memcpy(tb[2], b2, t), std::memcpy(tb[3], b3, t);
    a0 = ta[0], a1 = ta[1], b0 = tb[0], b1 = tb[1], b2 = tb[2], b3 = tb[3];
    QAT_STEP(load32, load32)
  }
#undef QAT_STEP
  store4(reduce4(c00, c01, c02, c03), C, nr, accumulate);
  if (mr > 1) store4(reduce4(c10, c11, c12, c13), C + ldc, nr, accumulate);
}

// One row of A x up to 8 rows of B, one dot product after the other.
QAT_AVX2_TARGET void maddubs_row(const uint8_t* A, int64_t, const int8_t* B, int64_t ldb, int64_t K, int32_t* C,
                                 int64_t, int, int nr, bool accumulate) {
  const __m256i ones = _mm256_set1_epi16(1);
  for (int j = 0; j < nr; ++j) {
    const int8_t* b = B + j * ldb;
    __m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0, c3 = c0;
    int64_t k = 0;
    for (; k + 128 <= K; k += 128) {
      c0 = maddubs_add(c0, load32(A + k), load32(b + k), ones);
      c1 = maddubs_add(c1, load32(A + k + 32), load32(b + k + 32), ones);
      c2 = maddubs_add(c2, load32(A + k + 64), load32(b + k + 64), ones);
      c3 = maddubs_add(c3, load32(A + k + 96), load32(b + k + 96), ones);
    }
    for (; k + 32 <= K; k += 32) c0 = maddubs_add(c0, load32(A + k), load32(b + k), ones);
    if (k < K && K >= 32) {
      c1 = maddubs_add(c1, load32(A + K - 32), _mm256_and_si256(load32(b + K - 32), tail_keep32(K - k)), ones);
    } else if (k < K) {  // K < 32: zero-padded copies
      alignas(32) uint8_t ta[32] = {};
      alignas(32) int8_t tb[32] = {};
      std::memcpy(ta, A, static_cast<size_t>(K));
      std::memcpy(tb, b, static_cast<size_t>(K));
      c1 = maddubs_add(c1, load32(ta), load32(tb), ones);
    }
    const int32_t sum = sum4(c0, c1, c2, c3);
    C[j] = accumulate ? C[j] + sum : sum;
  }
}

// AVX-VNNI: the AVX2 kernels' 3 x 4 and one-row blocks with vpdpbusd on ymm
// (u8 x s8, four products summed into each int32 lane, no saturation): 32
// bytes of K a step, no widening, the K tail as maddubs_2x4's.
#define QAT_AVX_VNNI_TARGET __attribute__((target("avx2,avxvnni")))

// vpdpbusd in its VEX form ({vex}: the assembler would otherwise pick the
// EVEX one, which a CPU without AVX-512 cannot run), so ymm0-15 only ("x").
// Inline asm for the same reason as dpbusd above.
QAT_AVX_VNNI_TARGET inline __m256i dpbusd_vex(__m256i acc, __m256i a, __m256i b) {
  asm("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(a), "x"(b));
  return acc;
}
QAT_AVX_VNNI_TARGET void avx_vnni_3x4(const uint8_t* A, int64_t lda, const int8_t* B, int64_t ldb, int64_t K,
                                      int32_t* C, int64_t ldc, int mr, int nr, bool accumulate) {
  const uint8_t* a0 = A;
  const uint8_t* a1 = A + (mr > 1 ? 1 : 0) * lda;
  const uint8_t* a2 = A + (mr > 2 ? 2 : mr - 1) * lda;
  QAT_ROWS4(b, B, ldb, nr);
  __m256i c00 = _mm256_setzero_si256(), c01 = c00, c02 = c00, c03 = c00, c10 = c00, c11 = c00, c12 = c00, c13 = c00,
          c20 = c00, c21 = c00, c22 = c00, c23 = c00;
#define QAT_STEP(LA, LB)                           \
  {                                                \
    const __m256i x0 = LA(a0), x1 = LA(a1), x2 = LA(a2); \
    __m256i y = LB(b0);                            \
    c00 = dpbusd_vex(c00, x0, y);                  \
    c10 = dpbusd_vex(c10, x1, y);                  \
    c20 = dpbusd_vex(c20, x2, y);                  \
    y = LB(b1);                                    \
    c01 = dpbusd_vex(c01, x0, y);                  \
    c11 = dpbusd_vex(c11, x1, y);                  \
    c21 = dpbusd_vex(c21, x2, y);                  \
    y = LB(b2);                                    \
    c02 = dpbusd_vex(c02, x0, y);                  \
    c12 = dpbusd_vex(c12, x1, y);                  \
    c22 = dpbusd_vex(c22, x2, y);                  \
    y = LB(b3);                                    \
    c03 = dpbusd_vex(c03, x0, y);                  \
    c13 = dpbusd_vex(c13, x1, y);                  \
    c23 = dpbusd_vex(c23, x2, y);                  \
  }
  int64_t k = 0;
#define QAT_LA(p) load32((p) + k)
  for (; k + 32 <= K; k += 32) QAT_STEP(QAT_LA, QAT_LA)
#undef QAT_LA
  if (k < K && K >= 32) {
    const __m256i keep = tail_keep32(K - k);
#define QAT_LA(p) load32((p) + K - 32)
#define QAT_LB(p) _mm256_and_si256(load32((p) + K - 32), keep)
    QAT_STEP(QAT_LA, QAT_LB)
#undef QAT_LA
#undef QAT_LB
  } else if (k < K) {  // K < 32: zero-padded copies
    alignas(32) uint8_t ta[3][32] = {};
    alignas(32) int8_t tb[4][32] = {};
    const size_t t = static_cast<size_t>(K);
    std::memcpy(ta[0], a0, t), std::memcpy(ta[1], a1, t), std::memcpy(ta[2], a2, t);
    std::memcpy(tb[0], b0, t), std::memcpy(tb[1], b1, t), std::memcpy(tb[2], b2, t), std::memcpy(tb[3], b3, t);
    a0 = ta[0], a1 = ta[1], a2 = ta[2], b0 = tb[0], b1 = tb[1], b2 = tb[2], b3 = tb[3];
    QAT_STEP(load32, load32)
  }
#undef QAT_STEP
  store4(reduce4(c00, c01, c02, c03), C, nr, accumulate);
  if (mr > 1) store4(reduce4(c10, c11, c12, c13), C + ldc, nr, accumulate);
  if (mr > 2) store4(reduce4(c20, c21, c22, c23), C + 2 * ldc, nr, accumulate);
}

QAT_AVX_VNNI_TARGET void avx_vnni_row(const uint8_t* A, int64_t, const int8_t* B, int64_t ldb, int64_t K, int32_t* C,
                                      int64_t, int, int nr, bool accumulate) {
  for (int j = 0; j < nr; ++j) {
    const int8_t* b = B + j * ldb;
    __m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0, c3 = c0;
    int64_t k = 0;
    for (; k + 128 <= K; k += 128) {
      c0 = dpbusd_vex(c0, load32(A + k), load32(b + k));
      c1 = dpbusd_vex(c1, load32(A + k + 32), load32(b + k + 32));
      c2 = dpbusd_vex(c2, load32(A + k + 64), load32(b + k + 64));
      c3 = dpbusd_vex(c3, load32(A + k + 96), load32(b + k + 96));
    }
    for (; k + 32 <= K; k += 32) c0 = dpbusd_vex(c0, load32(A + k), load32(b + k));
    if (k < K && K >= 32) {
      c1 = dpbusd_vex(c1, load32(A + K - 32), _mm256_and_si256(load32(b + K - 32), tail_keep32(K - k)));
    } else if (k < K) {  // K < 32: zero-padded copies
      alignas(32) uint8_t ta[32] = {};
      alignas(32) int8_t tb[32] = {};
      std::memcpy(ta, A, static_cast<size_t>(K));
      std::memcpy(tb, b, static_cast<size_t>(K));
      c1 = dpbusd_vex(c1, load32(ta), load32(tb));
    }
    const int32_t sum = sum4(c0, c1, c2, c3);
    C[j] = accumulate ? C[j] + sum : sum;
  }
}
#undef QAT_ROWS4

// ----------------------------------------------------------------- driver

struct KernelSet {
  int mr, nr;         // the block kernel's shape
  BlockFn block;      // for blocks of at least min_rows rows
  int min_rows;
  int row_nr;         // the one-row kernel's width (columns a call)
  BlockFn row;        // for thinner blocks, one row at a time
};

constexpr KernelSet vnni_set{4, 4, &vnni_4x4, 3, 16, &vnni_row};
constexpr KernelSet avx2_set{3, 4, &avx2_3x4, 2, 8, &avx2_row};
constexpr KernelSet avx_vnni_set{3, 4, &avx_vnni_3x4, 2, 8, &avx_vnni_row};
constexpr KernelSet maddubs_set{2, 4, &maddubs_2x4, 2, 8, &maddubs_row};

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
int64_t ceil_div(int64_t x, int64_t m) { return (x + m - 1) / m; }

// Cache blocking: K in blocks of at most 4096 bytes (an MR-row strip of A, at
// most 16 KiB, stays in L1), N in panels whose B block (nc x kc bytes, about
// 384 KiB) stays in L2 while a tile of up to 32 blocks of rows of A streams
// past it. Tiles (mc rows x nc columns of C, all of K) are independent and
// shared out to the threads, at least 4 per thread when the work is worth it;
// small M (batch-1 fully connected layers) thus splits over N. With fewer rows
// than the block kernel takes, A is one short row and B streams from memory
// once, so K is not split.
void gemm_blocked(const KernelSet& ks, int64_t M, int64_t N, int64_t K, const uint8_t* A, int64_t lda,
                  const int8_t* B, int64_t ldb, int32_t* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  const int64_t g = ks.row_nr;  // panel granularity, a multiple of ks.nr
  const int64_t nkb = M >= ks.min_rows ? std::max<int64_t>(1, ceil_div(K, 4096)) : 1;
  const int64_t kc = nkb == 1 ? std::max<int64_t>(K, 1) : round_up(ceil_div(K, nkb), 64);
  const int64_t nc_max = std::max<int64_t>(g, (384 * 1024 / kc) / g * g);
  int64_t nc = round_up(ceil_div(N, ceil_div(N, nc_max)), g);
  int64_t mc = std::min<int64_t>(round_up(M, ks.mr), 32 * ks.mr);

  const int threads = omp_get_max_threads();
  const bool parallel = threads > 1 && M * N * std::max<int64_t>(K, 1) >= (int64_t{1} << 20);
  const int64_t want = parallel ? 4 * static_cast<int64_t>(threads) : 1;
  auto tiles = [&] { return ceil_div(M, mc) * ceil_div(N, nc); };
  while (tiles() < want) {
    if (mc >= 4 * ks.mr) mc = round_up(mc / 2, ks.mr);
    else if (nc >= 2 * g) nc = round_up(nc / 2, g);
    else break;
  }
  const int64_t tiles_n = ceil_div(N, nc), ntiles = tiles();

#pragma omp parallel for schedule(dynamic, 1) if (parallel && ntiles > 1)
  for (int64_t t = 0; t < ntiles; ++t) {
    const int64_t m0 = (t / tiles_n) * mc, m1 = std::min(M, m0 + mc);
    const int64_t n0 = (t % tiles_n) * nc, n1 = std::min(N, n0 + nc);
    for (int64_t k0 = 0; k0 == 0 || k0 < K; k0 += kc) {
      const int64_t kk = std::min(kc, K - k0);
      for (int64_t m = m0; m < m1; m += ks.mr) {
        const int mr = static_cast<int>(std::min<int64_t>(ks.mr, m1 - m));
        if (mr >= ks.min_rows) {
          for (int64_t n = n0; n < n1; n += ks.nr)
            ks.block(A + m * lda + k0, lda, B + n * ldb + k0, ldb, kk, C + m * ldc + n, ldc, mr,
                     static_cast<int>(std::min<int64_t>(ks.nr, n1 - n)), k0 > 0);
        } else {
          for (int64_t i = m; i < m + mr; ++i)
            for (int64_t n = n0; n < n1; n += ks.row_nr)
              ks.row(A + i * lda + k0, lda, B + n * ldb + k0, ldb, kk, C + i * ldc + n, ldc, 1,
                     static_cast<int>(std::min<int64_t>(ks.row_nr, n1 - n)), k0 > 0);
        }
      }
    }
  }
}

// B packed for the tiles on every call (the integer model packs its weights
// once, int8_gemm_packed.h); K = 0 has nothing to pack: C = 0.
void gemm_amx_unpacked(bool emulate, int64_t M, int64_t N, int64_t K, const uint8_t* A, int64_t lda,
                       const int8_t* B, int64_t ldb, int32_t* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    for (int64_t m = 0; m < M; ++m) std::fill_n(C + m * ldc, N, 0);
    return;
  }
  amx::gemm_s32(emulate, false, M, A, lda, pack_b_vnni(B, N, K, ldb), N, C, ldc);
}

}  // namespace

void gemm_u8s8s32(GemmKernel kernel, int64_t M, int64_t N, int64_t K, const uint8_t* A, int64_t lda, const int8_t* B,
                  int64_t ldb, int32_t* C, int64_t ldc) {
  QAT_CHECK(M >= 0 && N >= 0 && K >= 0 && lda >= K && ldb >= K && ldc >= N, "gemm_u8s8s32: bad sizes M=", M, " N=", N,
            " K=", K, " lda=", lda, " ldb=", ldb, " ldc=", ldc);
  switch (kernel) {
    case GemmKernel::reference: return gemm_reference(M, N, K, A, lda, B, ldb, C, ldc);
    case GemmKernel::avx2: return gemm_blocked(avx2_set, M, N, K, A, lda, B, ldb, C, ldc);
    case GemmKernel::avx_vnni: return gemm_blocked(avx_vnni_set, M, N, K, A, lda, B, ldb, C, ldc);
    case GemmKernel::avx512_vnni: return gemm_blocked(vnni_set, M, N, K, A, lda, B, ldb, C, ldc);
    case GemmKernel::amx:
      // B is packed on every call here: below a few panels of A that costs
      // more than the tiles save, and the VNNI kernel (every AMX CPU has it)
      // gives the same integers.
      if (M < 4 * 32) return gemm_blocked(vnni_set, M, N, K, A, lda, B, ldb, C, ldc);
      return gemm_amx_unpacked(false, M, N, K, A, lda, B, ldb, C, ldc);
    case GemmKernel::amx_emulated: return gemm_amx_unpacked(true, M, N, K, A, lda, B, ldb, C, ldc);
  }
}

bool pairs_fit_int16(const GemmRanges& r) {
  return r.a_max >= 0 && r.b_absmax >= 0 && 2 * static_cast<int64_t>(r.a_max) * r.b_absmax <= 32767;
}

bool runs_maddubs(GemmKernel kernel, const GemmRanges& r) {
  return kernel == GemmKernel::avx2 && pairs_fit_int16(r);
}

void gemm_u8s8s32_bounded(GemmKernel kernel, const GemmRanges& r, int64_t M, int64_t N, int64_t K, const uint8_t* A,
                          int64_t lda, const int8_t* B, int64_t ldb, int32_t* C, int64_t ldc) {
  if (!runs_maddubs(kernel, r)) return gemm_u8s8s32(kernel, M, N, K, A, lda, B, ldb, C, ldc);
  QAT_CHECK(M >= 0 && N >= 0 && K >= 0 && lda >= K && ldb >= K && ldc >= N, "gemm_u8s8s32_bounded: bad sizes M=", M,
            " N=", N, " K=", K, " lda=", lda, " ldb=", ldb, " ldc=", ldc);
  QAT_CHECK(gemm_kernel_runs_here(kernel), "gemm_u8s8s32_bounded: the ", enum_name(kernel),
            " kernel does not run on this CPU");
  gemm_blocked(maddubs_set, M, N, K, A, lda, B, ldb, C, ldc);
}

}  // namespace qat::quant

namespace qat::quant {

namespace {
void gemm_s8s8_reference(int64_t M, int64_t N, int64_t K, const int8_t* A, int64_t lda, const int8_t* B, int64_t ldb,
                         int32_t* C, int64_t ldc) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      int32_t acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += static_cast<int32_t>(A[m * lda + k]) * B[n * ldb + k];
      C[m * ldc + n] = acc;
    }
}
}  // namespace

void gemm_s8s8s32_shifted(GemmKernel kernel, int64_t M, int64_t N, int64_t K, const int8_t* A, int64_t lda,
                          const int8_t* B, int64_t ldb, int32_t* C, int64_t ldc, int32_t* colsum) {
  QAT_CHECK(M >= 0 && N >= 0 && K >= 0 && lda >= K && ldb >= K && ldc >= N, "gemm_s8s8s32: bad sizes M=", M, " N=", N,
            " K=", K, " lda=", lda, " ldb=", ldb, " ldc=", ldc);
  // 2^16 * 255 * 128 < 2^31: no shifted partial sum can overflow.
  QAT_CHECK(K <= (int64_t{1} << 16), "gemm_s8s8s32: K=", K, " exceeds 65536 (int32 accumulator bound)");
  thread_local std::vector<uint8_t> shifted;
  if (static_cast<int64_t>(shifted.size()) < M * K) shifted.resize(static_cast<size_t>(M * K));
  uint8_t* a = shifted.data();
#pragma omp parallel for schedule(static) if (M * K >= (1 << 16))
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) a[m * K + k] = static_cast<uint8_t>(A[m * lda + k] + 128);
  gemm_u8s8s32(kernel, M, N, K, a, K, B, ldb, C, ldc);
#pragma omp parallel for schedule(static) if (N * K >= (1 << 16))
  for (int64_t n = 0; n < N; ++n) {
    int32_t s = 0;
    for (int64_t k = 0; k < K; ++k) s += B[n * ldb + k];
    colsum[n] = s;
  }
}

void gemm_s8s8s32(GemmKernel kernel, int64_t M, int64_t N, int64_t K, const int8_t* A, int64_t lda, const int8_t* B,
                  int64_t ldb, int32_t* C, int64_t ldc) {
  if (kernel == GemmKernel::reference) {
    QAT_CHECK(M >= 0 && N >= 0 && K >= 0 && lda >= K && ldb >= K && ldc >= N, "gemm_s8s8s32: bad sizes M=", M,
              " N=", N, " K=", K, " lda=", lda, " ldb=", ldb, " ldc=", ldc);
    QAT_CHECK(K <= (int64_t{1} << 16), "gemm_s8s8s32: K=", K, " exceeds 65536 (int32 accumulator bound)");
    return gemm_s8s8_reference(M, N, K, A, lda, B, ldb, C, ldc);
  }
  std::vector<int32_t> colsum(static_cast<size_t>(N));
  gemm_s8s8s32_shifted(kernel, M, N, K, A, lda, B, ldb, C, ldc, colsum.data());
#pragma omp parallel for schedule(static) if (M * N >= (1 << 16))
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) C[m * ldc + n] -= 128 * colsum[n];
}

}  // namespace qat::quant
