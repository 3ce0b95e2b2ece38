#include "quant/int8_gemm.h"

// GCC 12 reports a false "may be used uninitialized" inside its own AVX-512
// headers (_mm512_setzero_si512 / reduce); silence it for this include only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include "core/error.h"

namespace qat::quant {

const char* gemm_kernel_name(GemmKernel k) {
  switch (k) {
    case GemmKernel::reference: return "reference";
    case GemmKernel::avx2: return "avx2";
    case GemmKernel::avx512_vnni: return "avx512_vnni";
  }
  return "?";
}

GemmKernel best_gemm_kernel() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw")) return GemmKernel::avx512_vnni;
  if (__builtin_cpu_supports("avx2")) return GemmKernel::avx2;
  return GemmKernel::reference;
}

namespace {

int32_t dot_reference(const uint8_t* a, const int8_t* b, int64_t K) {
  int32_t acc = 0;
  for (int64_t k = 0; k < K; ++k) acc += static_cast<int32_t>(a[k]) * static_cast<int32_t>(b[k]);
  return acc;
}

// 16 bytes at a time widened to int16; madd gives exact int32 pair sums
// (|255 * 127 * 2| fits easily), unlike maddubs, which saturates in int16.
__attribute__((target("avx2"))) int32_t dot_avx2(const uint8_t* a, const int8_t* b, int64_t K) {
  __m256i acc = _mm256_setzero_si256();
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    const __m256i va = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + k)));
    const __m256i vb = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + k)));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(va, vb));
  }
  alignas(32) int32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc);
  int32_t sum = 0;
  for (int i = 0; i < 8; ++i) sum += lanes[i];
  return sum + dot_reference(a + k, b + k, K - k);
}

// 64 bytes a step with vpdpbusd (u8 x s8, four products per int32 lane, no
// saturation); the tail uses masked loads (zeros contribute nothing).
__attribute__((target("avx512f,avx512bw,avx512vnni"))) int32_t dot_vnni(const uint8_t* a, const int8_t* b,
                                                                        int64_t K) {
  __m512i acc = _mm512_setzero_si512();
  int64_t k = 0;
  for (; k + 64 <= K; k += 64)
    acc = _mm512_dpbusd_epi32(acc, _mm512_loadu_si512(a + k), _mm512_loadu_si512(b + k));
  if (k < K) {
    const __mmask64 m = (~0ULL) >> (64 - (K - k));
    acc = _mm512_dpbusd_epi32(acc, _mm512_maskz_loadu_epi8(m, a + k), _mm512_maskz_loadu_epi8(m, b + k));
  }
  return _mm512_reduce_add_epi32(acc);
}

template <class Dot>
void gemm_with(Dot dot, int64_t M, int64_t N, int64_t K, const uint8_t* A, int64_t lda, const int8_t* B, int64_t ldb,
               int32_t* C, int64_t ldc) {
#pragma omp parallel for collapse(2) schedule(static) if (M * N * K > (1 << 20))
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) C[m * ldc + n] = dot(A + m * lda, B + n * ldb, K);
}

}  // namespace

void gemm_u8s8s32(GemmKernel kernel, int64_t M, int64_t N, int64_t K, const uint8_t* A, int64_t lda, const int8_t* B,
                  int64_t ldb, int32_t* C, int64_t ldc) {
  QAT_CHECK(M >= 0 && N >= 0 && K >= 0 && lda >= K && ldb >= K && ldc >= N, "gemm_u8s8s32: bad sizes M=", M, " N=", N,
            " K=", K, " lda=", lda, " ldb=", ldb, " ldc=", ldc);
  switch (kernel) {
    case GemmKernel::reference: return gemm_with(dot_reference, M, N, K, A, lda, B, ldb, C, ldc);
    case GemmKernel::avx2: return gemm_with(dot_avx2, M, N, K, A, lda, B, ldb, C, ldc);
    case GemmKernel::avx512_vnni: return gemm_with(dot_vnni, M, N, K, A, lda, B, ldb, C, ldc);
  }
}

}  // namespace qat::quant
