#pragma once
// What the x86 int8 GEMM kernels share (int8_gemm_*.cpp, one instruction set
// a file): the dot-product steps, each the one instruction that differs
// between kernels, and the AVX2 reductions and K-tail loads of the 32-byte
// kernels. Every function carries the target attribute of its instruction
// set, so this header is included by files compiled for the baseline CPU and
// the kernels run only where dispatch (int8_gemm.cpp) found the features.
//
// The accumulating adds are inline asm: with the intrinsics GCC 12 does not
// tie the destructive operand and copies every accumulator to another
// register each step, which made the kernels about a third slower. Register
// operands only ("v", "x"), else GCC folds a shared load into each use.
#include <cstdint>

#include "quant/integer/simd.h"

namespace qat::quant::x86 {

#define QAT_TARGET_AVX2 __attribute__((target("avx2")))
#define QAT_TARGET_AVX_VNNI __attribute__((target("avx2,avxvnni")))
#define QAT_TARGET_AVX512_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

// ---------------------------------------------------------------- dot steps
// acc += u8 a . s8 b, four products summed into each int32 lane, no
// saturation (vpdpbusd, AVX-512 VNNI).
__attribute__((target("avx512f,avx512bw,avx512vnni"))) inline void dpbusd(__m512i& acc, __m512i a, __m512i b) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
}
// The same on ymm in its VEX form (AVX-VNNI): {vex}, else the assembler picks
// the EVEX encoding, which a CPU without AVX-512 cannot run; so ymm0-15 ("x").
QAT_TARGET_AVX_VNNI inline void dpbusd_vex(__m256i& acc, __m256i a, __m256i b) {
  asm("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(a), "x"(b));
}
// acc += the int32 pair sums of int16 x and y (vpmaddwd: exact for widened
// u8 x s8, |255 * -128 * 2| < 2^31).
QAT_TARGET_AVX2 inline void madd_add(__m256i& acc, __m256i x, __m256i y) {
  const __m256i p = _mm256_madd_epi16(x, y);
  asm("vpaddd %1, %0, %0" : "+x"(acc) : "x"(p));
}
// acc += u8 a . s8 b four bytes a lane through int16 pair sums (vpmaddubsw,
// then vpmaddwd by ones): exact only while |a0 b0 + a1 b1| <= 32767, which
// the callers' operand ranges guarantee (gemm_u8s8s32_bounded).
QAT_TARGET_AVX2 inline void maddubs_add(__m256i& acc, __m256i a, __m256i b, __m256i ones) {
  const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones);
  asm("vpaddd %1, %0, %0" : "+x"(acc) : "x"(p));
}

// ---------------------------------------------------------------- AVX2 helpers
// The four row sums of v0 .. v3 as one vector.
QAT_TARGET_AVX2 inline __m128i reduce4(__m256i v0, __m256i v1, __m256i v2, __m256i v3) {
  const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(v0, v1), _mm256_hadd_epi32(v2, v3));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}
// Stores (or adds) the first nr of r's four lanes at c.
QAT_TARGET_AVX2 inline void store4(__m128i r, int32_t* c, int nr, bool accumulate) {
  alignas(16) int32_t out[4];
  _mm_store_si128(reinterpret_cast<__m128i*>(out), r);
  for (int j = 0; j < nr; ++j) c[j] = accumulate ? c[j] + out[j] : out[j];
}
// The sum of every int32 lane of four accumulators (the one-row kernels').
QAT_TARGET_AVX2 inline int32_t sum4(__m256i c0, __m256i c1, __m256i c2, __m256i c3) {
  const __m256i c = _mm256_add_epi32(_mm256_add_epi32(c0, c1), _mm256_add_epi32(c2, c3));
  __m128i h = _mm_add_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
  h = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(1, 0, 3, 2)));
  h = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(h);
}

// 32 bytes a load, and the K tail of the 32-byte kernels: the last 32 bytes
// of the row, those of B that the full steps already counted zeroed.
QAT_TARGET_AVX2 inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
alignas(32) inline constexpr int8_t tail_keep32_table[64] = {
    0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,
    0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
QAT_TARGET_AVX2 inline __m256i tail_keep32(int64_t t) { return load32(tail_keep32_table + t); }  // last t set

}  // namespace qat::quant::x86

// Row pointers of a block, clamped at the edge (rows past it read the last
// real row again; their results are dropped).
#define QAT_ROWS4(P, X, ld, n)                           \
  const auto* P##0 = X;                                  \
  const auto* P##1 = X + ((n) > 1 ? 1 : 0) * (ld);       \
  const auto* P##2 = X + ((n) > 2 ? 2 : (n) - 1) * (ld); \
  const auto* P##3 = X + ((n) > 3 ? 3 : (n) - 1) * (ld)
