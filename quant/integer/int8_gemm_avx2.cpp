#include "quant/integer/int8_gemm_avx2.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "quant/integer/int8_gemm_x86.h"

namespace qat::quant::avx2 {

namespace {

#define QAT_AVX2_TARGET __attribute__((target("avx2")))

constexpr int kRows = 6;                   // rows of A per tile
constexpr int64_t kBlockRows = 8 * kRows;  // rows of A widened at a time
constexpr int64_t kChunk = 64;             // channels per work item: 8 tiles of 8
constexpr int64_t kQuadBytes = 64;         // one packed row: 16 channels x 4 k

int64_t ceil_div(int64_t x, int64_t m) { return (x + m - 1) / m; }

// Rows [0, rows) of A as int16, K padded with zeros to kp (flip: s8 bytes
// read as u8 + 128): the panel of the int16 path.
template <bool kFlip>
QAT_AVX2_TARGET void prepare_rows(const uint8_t* A, int64_t lda, int64_t rows, int64_t K, int64_t kp, int16_t* out) {
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

using x86::madd_add;

// 16 bytes of B (4 channels x 4 k) as int16.
QAT_AVX2_TARGET inline __m256i widen_b(const int8_t* p) {
  return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
// 4 k of a widened row of A (64 bits) in every 64-bit lane.
QAT_AVX2_TARGET inline __m256i broadcast_quad(const int16_t* p) {
  long long quad;
  std::memcpy(&quad, p, sizeof quad);
  return _mm256_set1_epi64x(quad);
}
// The channel sums of x (channels 0-3, two lanes each) and y (4-7), in
// channel order: hadd gives [ch0 ch1 ch4 ch5 | ch2 ch3 ch6 ch7], the permute
// puts the 64-bit pairs in order.
QAT_AVX2_TARGET inline void store8(__m256i x, __m256i y, int32_t* out) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_permute4x64_epi64(_mm256_hadd_epi32(x, y), 0xD8));
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
    const __m256i w0 = widen_b(bq), w1 = widen_b(bq + 16);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m256i av = broadcast_quad(a + r * kp + 4 * q);
      madd_add(acc[r][0], av, w0);
      madd_add(acc[r][1], av, w1);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) store8(acc[r][0], acc[r][1], c + r * ldc);
}

using TileFn = void (*)(const int16_t*, int64_t, const int8_t*, int64_t, int32_t*, int64_t);
constexpr TileFn kTiles[kRows + 1] = {nullptr, tile<1>, tile<2>, tile<3>, tile<4>, tile<5>, tile<6>};

// One or two rows x a whole 16-channel block (b: its first quad row), for
// thin strips (a linear layer at batch 1): each 64-byte row of B is read
// once, in order, rather than in two halves.
template <int R>
QAT_AVX2_TARGET void tile16(const int16_t* a, int64_t kp, const int8_t* b, int64_t K4, int32_t* c, int64_t ldc) {
  static_assert(R == 1 || R == 2);
  // (named accumulators: as an array GCC 12 keeps them on the stack)
  __m256i c00 = _mm256_setzero_si256(), c01 = c00, c02 = c00, c03 = c00, c10 = c00, c11 = c00, c12 = c00, c13 = c00;
  for (int64_t q = 0; q < K4; ++q) {
    const int8_t* bq = b + q * kQuadBytes;
    const __m256i w0 = widen_b(bq), w1 = widen_b(bq + 16), w2 = widen_b(bq + 32), w3 = widen_b(bq + 48);
    const __m256i a0 = broadcast_quad(a + 4 * q);
    madd_add(c00, a0, w0), madd_add(c01, a0, w1), madd_add(c02, a0, w2), madd_add(c03, a0, w3);
    if constexpr (R == 2) {
      const __m256i a1 = broadcast_quad(a + kp + 4 * q);
      madd_add(c10, a1, w0), madd_add(c11, a1, w1), madd_add(c12, a1, w2), madd_add(c13, a1, w3);
    }
  }
  store8(c00, c01, c), store8(c02, c03, c + 8);
  if constexpr (R == 2) store8(c10, c11, c + ldc), store8(c12, c13, c + ldc + 8);
}
constexpr TileFn kThinTiles[3] = {nullptr, tile16<1>, tile16<2>};

// ---- operands whose pair sums fit int16 (gemm_s32_maddubs): vpmaddubsw on
// the bytes themselves (32 products, int16 pair sums, exact under the
// caller's ranges), then vpmaddwd by ones into int32: each lane sums a
// channel's 4 k, so the accumulators are in channel order.

// Rows [0, rows) of A, K padded with zeros to kp (whole 4-byte groups): the
// panel of the byte path, which multiplies u8 A only.
template <bool kFlip>
void prepare_rows(const uint8_t* A, int64_t lda, int64_t rows, int64_t K, int64_t kp, uint8_t* out) {
  static_assert(!kFlip, "the byte path multiplies u8 A only");
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(out + r * kp, A + r * lda, static_cast<size_t>(K));
    std::memset(out + r * kp + K, 0, static_cast<size_t>(kp - K));
  }
}

using x86::maddubs_add;
QAT_AVX2_TARGET inline __m256i broadcast_bytes(const uint8_t* p) {
  int32_t quad;
  std::memcpy(&quad, p, sizeof quad);
  return _mm256_set1_epi32(quad);
}
QAT_AVX2_TARGET inline __m256i load_b(const int8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// tile's shape (R rows x 8 channels) on bytes: per 4 k, one 32-byte load of
// B, R broadcasts, R vpmaddubsw + vpmaddwd.
template <int R>
QAT_AVX2_TARGET void byte_tile(const uint8_t* a, int64_t kp, const int8_t* b, int64_t K4, int32_t* c, int64_t ldc) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i acc[R];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_si256();
  for (int64_t q = 0; q < K4; ++q) {
    const __m256i w = load_b(b + q * kQuadBytes);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) maddubs_add(acc[r], broadcast_bytes(a + r * kp + 4 * q), w, ones);
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + r * ldc), acc[r]);
}

// tile16's shape on bytes.
template <int R>
QAT_AVX2_TARGET void byte_tile16(const uint8_t* a, int64_t kp, const int8_t* b, int64_t K4, int32_t* c, int64_t ldc) {
  static_assert(R == 1 || R == 2);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i c00 = _mm256_setzero_si256(), c01 = c00, c10 = c00, c11 = c00;
  for (int64_t q = 0; q < K4; ++q) {
    const __m256i w0 = load_b(b + q * kQuadBytes), w1 = load_b(b + q * kQuadBytes + 32);
    const __m256i a0 = broadcast_bytes(a + 4 * q);
    maddubs_add(c00, a0, w0, ones), maddubs_add(c01, a0, w1, ones);
    if constexpr (R == 2) {
      const __m256i a1 = broadcast_bytes(a + kp + 4 * q);
      maddubs_add(c10, a1, w0, ones), maddubs_add(c11, a1, w1, ones);
    }
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(c), c00);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + 8), c01);
  if constexpr (R == 2) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + ldc), c10);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + ldc + 8), c11);
  }
}

using ByteTileFn = void (*)(const uint8_t*, int64_t, const int8_t*, int64_t, int32_t*, int64_t);
constexpr ByteTileFn kByteTiles[kRows + 1] = {nullptr,      byte_tile<1>, byte_tile<2>, byte_tile<3>,
                                              byte_tile<4>, byte_tile<5>, byte_tile<6>};
constexpr ByteTileFn kByteThinTiles[3] = {nullptr, byte_tile16<1>, byte_tile16<2>};

// The two ways of multiplying: A widened to int16 (any u8 x s8), or A's
// bytes (pair sums within int16). A path's panel of A is prepare_rows's
// overload for its element type.
template <class E, auto kTileFns, auto kThinTileFns>
struct GemmPath {
  using Elem = E;
  static constexpr auto tiles = kTileFns;
  static constexpr auto thin_tiles = kThinTileFns;
};
using Int16Path = GemmPath<int16_t, kTiles, kThinTiles>;
using BytePath = GemmPath<uint8_t, kByteTiles, kByteThinTiles>;

// The tiles of C's rows [0, rows) x channels [n0, n0 + cols) (n0 a multiple
// of 16) from a block of widened A, into c (row stride kChunk). Each
// 8-channel slice of B (8 x K bytes) stays in L1 while the block's tiles of
// rows pass; the block's last strip, when it has at most 2 rows, takes whole
// 16-channel blocks instead.
template <class Path>
void block(const typename Path::Elem* panel, int64_t kp, int64_t rows, const PackedB& B, int64_t n0, int64_t cols,
           int32_t (*c)[kChunk]) {
  const int64_t block_stride = B.K4 * kQuadBytes;
  const int64_t thin = rows % kRows <= 2 ? rows % kRows : 0, full = rows - thin;
  for (int64_t j = 0; j < cols; j += 8) {
    const int64_t ch = n0 + j;  // a multiple of 8: half (ch / 8) % 2 of block ch / 16
    const int8_t* b = B.bytes() + (ch / 16) * block_stride + 32 * ((ch / 8) % 2);
    for (int64_t s = 0; s < full; s += kRows)
      Path::tiles[std::min<int64_t>(kRows, full - s)](panel + s * kp, kp, b, B.K4, &c[s][j], kChunk);
  }
  if (thin)
    for (int64_t j = 0; j < cols; j += 16)
      Path::thin_tiles[thin](panel + full * kp, kp, B.bytes() + ((n0 + j) / 16) * block_stride, B.K4, &c[full][j],
                             kChunk);
}

// Every block of up to 48 rows x 64 channels of C = A B^T (first n
// columns), handed to sink(m0, rows, n0, cols, c) as it is done. The rows
// are split into blocks of equal size (in whole tiles), so that M = 49 is
// not 48 + 1; threads take the blocks row-block-major and dynamically (the
// last row block can still be thinner), a thread widening a block of A
// once for each run of its channel chunks.
template <class Path, bool kFlip, class Sink>
void run(int64_t M, const uint8_t* A, int64_t lda, const PackedB& B, int64_t n, const Sink& sink) {
  const int64_t kp = 4 * B.K4;
  const int64_t block_rows = std::min(kBlockRows, ceil_div(ceil_div(M, ceil_div(M, kBlockRows)), kRows) * kRows);
  const int64_t row_blocks = ceil_div(M, block_rows), chunks = ceil_div(n, kChunk), items = row_blocks * chunks;
  const bool parallel = M * n * B.K >= (int64_t{1} << 20) && !omp_in_parallel() && items > 1;
#pragma omp parallel if (parallel)
  {
    thread_local std::vector<typename Path::Elem> panel;
    panel.resize(static_cast<size_t>(block_rows * kp));
    alignas(32) int32_t c[kBlockRows][kChunk];
    int64_t widened = -1;
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t rb = item / chunks, m0 = rb * block_rows, rows = std::min(block_rows, M - m0);
      if (rb != widened) prepare_rows<kFlip>(A + m0 * lda, lda, rows, B.K, kp, panel.data()), widened = rb;
      const int64_t n0 = (item % chunks) * kChunk, cols = std::min(kChunk, n - n0);
      block<Path>(panel.data(), kp, rows, B, n0, cols, c);
      sink(m0, rows, n0, cols, c);
    }
  }
}

template <class Path, bool kFlip, class Sink>
void dispatch(int64_t M, const uint8_t* A, int64_t lda, const PackedB& B, int64_t n, const Sink& sink) {
  QAT_CHECK(cpu_has_avx2(), "AVX2 packed GEMM: this CPU has no AVX2");
  QAT_CHECK(B.N % 16 == 0 && n >= 0 && n <= B.N && lda >= B.K && B.size() >= B.N * B.K4 * 4,
            "AVX2 packed GEMM: bad packed operand (N=", B.N, ", K=", B.K, ", n=", n, ", lda=", lda,
            "; packed by pack_b_vnni / pack_b_vnni_transposed?)");
  if (M == 0 || n == 0) return;
  run<Path, kFlip>(M, A, lda, B, n, sink);
}

}  // namespace

namespace {
// C's blocks copied out as they come.
auto copy_to(int32_t* C, int64_t ldc) {
  return [C, ldc](int64_t m0, int64_t rows, int64_t n0, int64_t cols, const int32_t(*c)[kChunk]) {
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(C + (m0 + r) * ldc + n0, c[r], static_cast<size_t>(cols) * sizeof(int32_t));
  };
}
}  // namespace

void gemm_s32(bool flip, int64_t M, const uint8_t* A, int64_t lda, const PackedB& B, int64_t n, int32_t* C,
              int64_t ldc) {
  QAT_CHECK(ldc >= n, "AVX2 packed GEMM: ldc ", ldc, " < ", n, " columns");
  if (flip)
    dispatch<Int16Path, true>(M, A, lda, B, n, copy_to(C, ldc));
  else
    dispatch<Int16Path, false>(M, A, lda, B, n, copy_to(C, ldc));
}

void gemm_s32_maddubs(int64_t M, const uint8_t* A, int64_t lda, const PackedB& B, int64_t n, int32_t* C, int64_t ldc) {
  QAT_CHECK(ldc >= n, "AVX2 packed GEMM: ldc ", ldc, " < ", n, " columns");
  dispatch<BytePath, false>(M, A, lda, B, n, copy_to(C, ldc));
}

void gemm_dequant(int64_t M, const int8_t* A, int64_t lda, const PackedB& B, const DequantEpilogue& e, float* out,
                  int64_t ldo) {
  QAT_CHECK(ldo >= e.n, "AVX2 packed GEMM: ldo ", ldo, " < ", e.n, " columns");
  auto sink = [&](int64_t m0, int64_t rows, int64_t n0, int64_t cols, const int32_t(*c)[kChunk]) {
    e.store(c[0], kChunk, m0, rows, n0, cols, out, ldo);
  };
  dispatch<Int16Path, true>(M, reinterpret_cast<const uint8_t*>(A), lda, B, e.n, sink);
}

}  // namespace qat::quant::avx2
