#include "quant/integer/int8_gemm_avx2.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "quant/integer/simd.h"

namespace qat::quant::avx2 {

namespace {

#define QAT_AVX2_TARGET __attribute__((target("avx2")))

constexpr int kRows = 6;                          // rows of A per tile
constexpr int64_t kBlockRows = 8 * kRows;         // rows of A widened at a time
constexpr int64_t kChunk = 64;                    // channels per work item: 8 tiles of 8
constexpr int64_t kQuadBytes = 64;                // one packed row: 16 channels x 4 k

int64_t ceil_div(int64_t x, int64_t m) { return (x + m - 1) / m; }

// Rows [0, rows) of A as int16, K padded with zeros to kp (flip: s8 bytes
// read as u8 + 128).
template <bool kFlip>
QAT_AVX2_TARGET void widen_rows(const uint8_t* A, int64_t lda, int64_t rows, int64_t K, int64_t kp, int16_t* out) {
  const __m128i signs = _mm_set1_epi8(kFlip ? static_cast<char>(0x80) : 0);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* a = A + r * lda;
    int16_t* o = out + r * kp;
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
      const __m128i v = _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + k)), signs);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + k), _mm256_cvtepu8_epi16(v));
    }
    for (; k < K; ++k) o[k] = static_cast<int16_t>(kFlip ? a[k] ^ 0x80u : a[k]);
    for (; k < kp; ++k) o[k] = 0;
  }
}

// acc += the int32 pair sums of x * y. The add is inline asm ("x": ymm0-15,
// VEX) because with the intrinsic GCC 12 moves each accumulator to another
// register every step (as int8_gemm.cpp's madd_add).
QAT_AVX2_TARGET inline void madd_add(__m256i& acc, __m256i x, __m256i y) {
  const __m256i p = _mm256_madd_epi16(x, y);
  asm("vpaddd %1, %0, %0" : "+x"(acc) : "x"(p));
}

// c[r][0, 8) for r < R = rows r of the widened A (stride kp) times the 8
// channels of half a packed block (b: its first quad row; rows 64 bytes
// apart). B's 16 bytes for channels 0-3 widen to [ch0 k0..k3, ch1 k0..k3,
// ...]; A's 4 k broadcast as [a0..a3] x 4; so vpmaddwd leaves two lanes per
// channel (k0 k1 and k2 k3), added by one hadd at the end.
template <int R>
QAT_AVX2_TARGET void tile(const int16_t* a, int64_t kp, const int8_t* b, int64_t K4, int32_t* c, int64_t ldc) {
  __m256i acc[R][2];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
  for (int64_t q = 0; q < K4; ++q) {
    const int8_t* bq = b + q * kQuadBytes;
    const __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bq)));
    const __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bq + 16)));
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      long long quad;
      std::memcpy(&quad, a + r * kp + 4 * q, sizeof quad);
      const __m256i av = _mm256_set1_epi64x(quad);
      madd_add(acc[r][0], av, w0);
      madd_add(acc[r][1], av, w1);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    // hadd: [ch0 ch1 ch4 ch5 | ch2 ch3 ch6 ch7]; the permute puts the 64-bit
    // pairs in channel order.
    const __m256i h = _mm256_hadd_epi32(acc[r][0], acc[r][1]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + r * ldc), _mm256_permute4x64_epi64(h, 0xD8));
  }
}

using TileFn = void (*)(const int16_t*, int64_t, const int8_t*, int64_t, int32_t*, int64_t);
constexpr TileFn kTiles[kRows + 1] = {nullptr, tile<1>, tile<2>, tile<3>, tile<4>, tile<5>, tile<6>};

// Every block of up to 48 rows x 64 channels of C = A B^T (first n
// columns), handed to sink(m0, rows, n0, cols, c) as it is done. Threads
// share the blocks row-block-major, so that a thread widens each block of A
// once for its run of channel chunks; within a block, each 8-channel slice
// of B (8 x K bytes) stays in L1 while the block's tiles of rows pass.
template <bool kFlip, class Sink>
void run(int64_t M, const uint8_t* A, int64_t lda, const PackedB& B, int64_t n, const Sink& sink) {
  const int64_t kp = 4 * B.K4, block_stride = B.K4 * kQuadBytes;
  const int64_t row_blocks = ceil_div(M, kBlockRows), chunks = ceil_div(n, kChunk), items = row_blocks * chunks;
  const bool parallel = M * n * B.K >= (int64_t{1} << 20) && !omp_in_parallel() && items > 1;
#pragma omp parallel if (parallel)
  {
    thread_local std::vector<int16_t> panel;
    panel.resize(static_cast<size_t>(kBlockRows * kp));
    alignas(32) int32_t c[kBlockRows][kChunk];
    int64_t widened = -1;
#pragma omp for schedule(static)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t rb = item / chunks, m0 = rb * kBlockRows, rows = std::min(kBlockRows, M - m0);
      if (rb != widened) widen_rows<kFlip>(A + m0 * lda, lda, rows, B.K, kp, panel.data()), widened = rb;
      const int64_t n0 = (item % chunks) * kChunk, cols = std::min(kChunk, n - n0);
      for (int64_t j = 0; j < cols; j += 8) {
        const int64_t ch = n0 + j;  // a multiple of 8: half (ch / 8) % 2 of block ch / 16
        const int8_t* b = B.data.data() + (ch / 16) * block_stride + 32 * ((ch / 8) % 2);
        for (int64_t s = 0; s < rows; s += kRows)
          kTiles[std::min<int64_t>(kRows, rows - s)](panel.data() + s * kp, kp, b, B.K4, &c[s][j], kChunk);
      }
      sink(m0, rows, n0, cols, c);
    }
  }
}

template <bool kFlip, class Sink>
void dispatch(int64_t M, const uint8_t* A, int64_t lda, const PackedB& B, int64_t n, const Sink& sink) {
  QAT_CHECK(cpu_has_avx2(), "AVX2 packed GEMM: this CPU has no AVX2");
  QAT_CHECK(B.N % 16 == 0 && n >= 0 && n <= B.N && lda >= B.K &&
                static_cast<int64_t>(B.data.size()) >= B.N * B.K4 * 4,
            "AVX2 packed GEMM: bad packed operand (N=", B.N, ", K=", B.K, ", n=", n, ", lda=", lda,
            "; packed by pack_b_vnni / pack_b_vnni_transposed?)");
  if (M == 0 || n == 0) return;
  run<kFlip>(M, A, lda, B, n, sink);
}

}  // namespace

void gemm_s32(bool flip, int64_t M, const uint8_t* A, int64_t lda, const PackedB& B, int64_t n, int32_t* C,
              int64_t ldc) {
  QAT_CHECK(ldc >= n, "AVX2 packed GEMM: ldc ", ldc, " < ", n, " columns");
  auto sink = [&](int64_t m0, int64_t rows, int64_t n0, int64_t cols, const int32_t (*c)[kChunk]) {
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(C + (m0 + r) * ldc + n0, c[r], static_cast<size_t>(cols) * sizeof(int32_t));
  };
  if (flip) dispatch<true>(M, A, lda, B, n, sink);
  else dispatch<false>(M, A, lda, B, n, sink);
}

void gemm_dequant(int64_t M, const int8_t* A, int64_t lda, const PackedB& B, const DequantEpilogue& e, float* out,
                  int64_t ldo) {
  QAT_CHECK(ldo >= e.n, "AVX2 packed GEMM: ldo ", ldo, " < ", e.n, " columns");
  auto sink = [&](int64_t m0, int64_t rows, int64_t n0, int64_t cols, const int32_t (*c)[kChunk]) {
    e.store(c[0], kChunk, m0, rows, n0, cols, out, ldo);
  };
  dispatch<true>(M, reinterpret_cast<const uint8_t*>(A), lda, B, e.n, sink);
}

}  // namespace qat::quant::avx2
