#include "quant/integer/int8_gemm_packed.h"

#include "quant/integer/simd.h"

#include <cstring>

#include "core/error.h"
#include "quant/integer/cpu_features.h"

namespace qat::quant {

namespace {

constexpr int kRows = 6;     // rows of A per tile
constexpr int kBlocks = 4;   // 16-channel blocks per tile (64 channels)

// 4 bytes of A as one int32 (k beyond K read as 0: no read past the row).
inline int32_t a_quad(const uint8_t* a, int64_t k, int64_t K) {
  int32_t v = 0;
  std::memcpy(&v, a + k, static_cast<size_t>(K - k >= 4 ? 4 : K - k));
  return v;
}

// vpdpbusd (acc += u8 a . s8 b per 32-bit lane) through inline asm: with the
// intrinsic GCC 12 copies each accumulator to another register every step.
__attribute__((target("avx512f,avx512bw,avx512vnni"))) inline void dpbusd(__m512i& acc, __m512i a, __m512i b) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
}

// C[0..R) x [64 channels] of one tile. b: the tile's first block; blocks are
// `block_stride` bytes apart. (Every r/j loop is unrolled so that the 4R
// accumulators stay in registers.)
template <int R>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void tile(const uint8_t* A, int64_t lda, const int8_t* b,
                                                                 int64_t block_stride, int64_t K, int64_t K4,
                                                                 int32_t* C, int64_t ldc) {
  __m512i acc[R][kBlocks];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < kBlocks; ++j) acc[r][j] = _mm512_setzero_si512();
  const int64_t full = K / 4;
  for (int64_t q = 0; q < K4; ++q) {
    const int8_t* bq = b + q * 64;
    const __m512i b0 = _mm512_loadu_si512(bq), b1 = _mm512_loadu_si512(bq + block_stride),
                  b2 = _mm512_loadu_si512(bq + 2 * block_stride), b3 = _mm512_loadu_si512(bq + 3 * block_stride);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      int32_t quad;
      if (q < full) std::memcpy(&quad, A + r * lda + 4 * q, 4);
      else quad = a_quad(A + r * lda, 4 * q, K);  // K % 4 bytes left: no read past the row
      const __m512i av = _mm512_set1_epi32(quad);
      dpbusd(acc[r][0], av, b0);
      dpbusd(acc[r][1], av, b1);
      dpbusd(acc[r][2], av, b2);
      dpbusd(acc[r][3], av, b3);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < kBlocks; ++j) _mm512_storeu_si512(C + r * ldc + 16 * j, acc[r][j]);
}

using TileFn = void (*)(const uint8_t*, int64_t, const int8_t*, int64_t, int64_t, int64_t, int32_t*, int64_t);
constexpr TileFn kTiles[kRows + 1] = {nullptr, tile<1>, tile<2>, tile<3>, tile<4>, tile<5>, tile<6>};

}  // namespace

bool can_use_packed_vnni(int64_t N) { return N > 0 && N % (16 * kBlocks) == 0 && cpu_has_avx512_vnni(); }

PackedB pack_b_vnni(const int8_t* B, int64_t N, int64_t K, int64_t ldb) {
  QAT_CHECK(N % 16 == 0 && K > 0, "pack_b_vnni: N must be a multiple of 16 (got ", N, "), K > 0 (got ", K, ")");
  PackedB p;
  p.N = N;
  p.K = K;
  p.K4 = (K + 3) / 4;
  p.data.assign(static_cast<size_t>(N * p.K4 * 4), 0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      p.data[static_cast<size_t>((((n / 16) * p.K4 + k / 4) * 16 + n % 16) * 4 + k % 4)] = B[n * ldb + k];
  return p;
}

void gemm_u8s8s32_packed(int64_t M, const uint8_t* A, int64_t lda, const PackedB& B, int32_t* C, int64_t ldc) {
  QAT_CHECK(can_use_packed_vnni(B.N) && lda >= B.K && ldc >= B.N, "gemm_u8s8s32_packed: bad sizes N=", B.N,
            " K=", B.K, " lda=", lda, " ldc=", ldc);
  const int64_t groups = B.N / (16 * kBlocks), tiles = (M + kRows - 1) / kRows;
  const int64_t block_stride = B.K4 * 64;
  // Channel groups outermost: a group's weights (64 x K bytes) stay in L2
  // while every tile of A passes.
#pragma omp parallel for collapse(2) schedule(static) if (M * B.N * B.K >= (1 << 20))
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t m0 = t * kRows, rows = M - m0 < kRows ? M - m0 : kRows;
      kTiles[rows](A + m0 * lda, lda, B.data.data() + g * kBlocks * block_stride, block_stride, B.K, B.K4,
                   C + m0 * ldc + g * 16 * kBlocks, ldc);
    }
}

}  // namespace qat::quant
