#include "quant/integer/int8_gemm_amx.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/aligned_vector.h"
#include "core/error.h"
#include "quant/integer/amx_tiles.h"

namespace qat::quant::amx {

namespace {

constexpr int64_t kBlock = 2 * kTileRows;  // rows and columns of C per block
// Tiles: C 0..3 (C[i][j] = tile 2i + j), A 4..5, B 6..7.
enum : int { kC00 = 0, kC01 = 1, kC10 = 2, kC11 = 3, kA0 = 4, kA1 = 5, kB0 = 6, kB1 = 7 };

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

TileConfig full_tiles() {
  TileConfig c;
  for (int t = 0; t < 8; ++t) c.rows[t] = kTileRows, c.colsb[t] = kTileBytes;
  return c;
}

// Up to 32 rows of A, K padded with zeros to kp bytes (flip: sign bits
// flipped, s8 read as u8 + 128; the padding stays 0 so that it adds nothing
// whatever the packed B holds there).
template <bool kFlip>
void pack_panel(const uint8_t* A, int64_t lda, int64_t rows, int64_t K, int64_t kp, uint8_t* panel) {
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* p = panel + r * kp;
    const uint8_t* a = A + r * lda;
    if constexpr (kFlip)
      for (int64_t k = 0; k < K; ++k) p[k] = static_cast<uint8_t>(a[k] ^ 0x80u);
    else
      std::memcpy(p, a, static_cast<size_t>(K));
    std::memset(p + K, 0, static_cast<size_t>(kp - K));
  }
}

// One 32 x 32 block of C (na tiles of A rows, nb of B columns) into c, a
// row stride of ldc bytes apart; the A panel's rows are kp bytes apart.
template <int NA, int NB, class Tiles>
void block(Tiles& t, const uint8_t* panel, int64_t kp, const int8_t* b0, const int8_t* b1, int64_t kblocks,
           int32_t* c, int64_t ldc) {
  t.template zero<kC00>();
  if constexpr (NB > 1) t.template zero<kC01>();
  if constexpr (NA > 1) t.template zero<kC10>();
  if constexpr (NA > 1 && NB > 1) t.template zero<kC11>();
  for (int64_t kb = 0; kb < kblocks; ++kb) {
    // A: 16 rows x 64 bytes of the panel; B: 16 quads of K x 16 columns.
    t.template load<kA0>(panel + kb * kTileBytes, kp);
    if constexpr (NA > 1) t.template load<kA1>(panel + kTileRows * kp + kb * kTileBytes, kp);
    t.template load<kB0>(b0 + kb * kTileRows * kTileBytes, kTileBytes);
    t.template dpbusd<kC00, kA0, kB0>();
    if constexpr (NA > 1) t.template dpbusd<kC10, kA1, kB0>();
    if constexpr (NB > 1) {
      t.template load<kB1>(b1 + kb * kTileRows * kTileBytes, kTileBytes);
      t.template dpbusd<kC01, kA0, kB1>();
      if constexpr (NA > 1) t.template dpbusd<kC11, kA1, kB1>();
    }
  }
  const int64_t lower = kTileRows * (ldc / static_cast<int64_t>(sizeof(int32_t)));  // C's row 16
  t.template store<kC00>(c, ldc);
  if constexpr (NB > 1) t.template store<kC01>(c + kTileRows, ldc);
  if constexpr (NA > 1) t.template store<kC10>(c + lower, ldc);
  if constexpr (NA > 1 && NB > 1) t.template store<kC11>(c + lower + kTileRows, ldc);
}

// Where A's rows can be read in place by the tile loads: whole 64-byte
// groups of K, or zeros after K up to a stride of whole groups (so that no
// tile reaches past a row of A, and B's bytes past K, which may belong to
// the next 16-channel block, meet zeros), on cache-line-aligned rows; s8 A
// (kFlip) is always copied.
template <bool kFlip>
bool a_in_place(const uint8_t* A, int64_t lda, int64_t K, bool zero_tail) {
  return !kFlip && (K % kTileBytes == 0 || zero_tail) && lda % kTileBytes == 0 &&
         reinterpret_cast<uintptr_t>(A) % kTileBytes == 0;
}

// Every 32 x 32 block of C = A B^T (first n columns), handed to
// sink(m0, rows, n0, cols, c) as it is done, except that full blocks go
// straight from the tiles into C (ldc int32 apart) where C is given.
// Threads share the blocks when the work is large and no parallel region
// encloses the call. The blocks go row-panel-major (a thread copies each
// panel of A once for its run of blocks, where A is not read in place): B
// passes once per panel of A. Where A is read in place and B has more
// columns than A rows, column-major instead: A passes once per pair of B's
// 16-column blocks, which stays in cache while it does (ResNet-18's layer 4,
// 4608 x 512 bytes of weights, would stream from L3 for every 32 rows).
template <class Tiles, bool kFlip, class Sink>
void run(int64_t M, const uint8_t* A, int64_t lda, const PackedB& B, int64_t n, int32_t* C, int64_t ldc,
         bool a_zero_tail, const Sink& sink) {
  const int64_t kblocks = round_up(B.K4, kTileRows) / kTileRows, kp = kblocks * kTileBytes;
  const int64_t nblocks16 = (n + kTileRows - 1) / kTileRows, col_blocks = (nblocks16 + 1) / 2;
  const int64_t row_blocks = (M + kBlock - 1) / kBlock, items = row_blocks * col_blocks;
  const int64_t bstride = B.K4 * kTileBytes;  // bytes between 16-channel blocks
  const bool in_place = a_in_place<kFlip>(A, lda, B.K, a_zero_tail);
  const bool by_columns = in_place && row_blocks > 1 && nblocks16 * kTileRows > M;
  const bool parallel = M * n * B.K >= (int64_t{1} << 20) && !omp_in_parallel() && items > 1;
#pragma omp parallel if (parallel)
  {
    Tiles t;
    t.configure(full_tiles());
    // Per thread, kept between calls (a fresh one would be allocated and
    // zeroed on every call: a convolution makes one per chunk of positions).
    thread_local AlignedVector<uint8_t> panel_buffer;
    if (panel_buffer.size() < static_cast<size_t>(kBlock * kp)) panel_buffer.resize(static_cast<size_t>(kBlock * kp));
    alignas(64) int32_t c[kBlock][kBlock];
    int64_t packed_rows_of = -1;
    const uint8_t* panel = nullptr;
    int64_t panel_stride = kp;
#pragma omp for schedule(static)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t rb = by_columns ? item % row_blocks : item / col_blocks;
      const int64_t cb = by_columns ? item / row_blocks : item % col_blocks;
      const int64_t m0 = rb * kBlock, rows = std::min(kBlock, M - m0);
      if (rb != packed_rows_of) {
        packed_rows_of = rb;
        if (in_place && rows == kBlock) {
          panel = A + m0 * lda, panel_stride = lda;
        } else {
          // A last, partial panel: the rows past M are zero (they reach only
          // C rows that are dropped; zero keeps the emulation's sums small).
          pack_panel<kFlip>(A + m0 * lda, lda, rows, B.K, kp, panel_buffer.data());
          std::memset(panel_buffer.data() + rows * kp, 0, static_cast<size_t>((kBlock - rows) * kp));
          panel = panel_buffer.data(), panel_stride = kp;
        }
      }
      const int64_t j0 = 2 * cb, n0 = j0 * kTileRows, cols = std::min(kBlock, n - n0);
      const int8_t* b0 = B.bytes() + j0 * bstride;
      const bool two_a = rows > kTileRows, two_b = j0 + 1 < nblocks16;
      const int8_t* b1 = two_b ? b0 + bstride : b0;
      const bool direct = C != nullptr && rows == kBlock && cols == kBlock;
      int32_t* out = direct ? C + m0 * ldc + n0 : &c[0][0];
      const int64_t out_stride = (direct ? ldc : kBlock) * static_cast<int64_t>(sizeof(int32_t));
      if (two_a && two_b) block<2, 2>(t, panel, panel_stride, b0, b1, kblocks, out, out_stride);
      else if (two_a) block<2, 1>(t, panel, panel_stride, b0, b1, kblocks, out, out_stride);
      else if (two_b) block<1, 2>(t, panel, panel_stride, b0, b1, kblocks, out, out_stride);
      else block<1, 1>(t, panel, panel_stride, b0, b1, kblocks, out, out_stride);
      if (!direct) sink(m0, rows, n0, cols, c);
    }
    t.release();
  }
}

template <bool kFlip, class Sink>
void dispatch(bool emulate, int64_t M, const uint8_t* A, int64_t lda, const PackedB& B, int64_t n, int32_t* C,
              int64_t ldc, bool a_zero_tail, const Sink& sink) {
  QAT_CHECK(emulate || amx_hardware_usable(), "AMX GEMM: this CPU (or its kernel) does not allow AMX tiles");
  QAT_CHECK(B.N % kTileRows == 0 && n <= B.N && lda >= B.K &&
                B.size() >= B.N * B.K4 * 4 + kTileRows * kTileBytes,
            "AMX GEMM: bad packed operand (N=", B.N, ", K=", B.K, ", n=", n, ", lda=", lda,
            "; packed by pack_b_vnni / pack_b_vnni_transposed?)");
  if (M == 0 || n == 0) return;
  if (emulate) run<EmulatedTiles, kFlip>(M, A, lda, B, n, C, ldc, a_zero_tail, sink);
  else run<HardwareTiles, kFlip>(M, A, lda, B, n, C, ldc, a_zero_tail, sink);
}

}  // namespace

void gemm_s32(bool emulate, bool flip, int64_t M, const uint8_t* A, int64_t lda, const PackedB& B, int64_t n,
              int32_t* C, int64_t ldc, bool a_zero_tail) {
  QAT_CHECK(ldc >= n, "AMX GEMM: ldc ", ldc, " < ", n, " columns");
  auto sink = [&](int64_t m0, int64_t rows, int64_t n0, int64_t cols, const int32_t (*c)[kBlock]) {
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(C + (m0 + r) * ldc + n0, c[r], static_cast<size_t>(cols) * sizeof(int32_t));
  };
  if (flip) dispatch<true>(emulate, M, A, lda, B, n, C, ldc, false, sink);
  else dispatch<false>(emulate, M, A, lda, B, n, C, ldc, a_zero_tail, sink);
}

void gemm_dequant(bool emulate, int64_t M, const int8_t* A, int64_t lda, const PackedB& B, const DequantEpilogue& e,
                  float* out, int64_t ldo) {
  QAT_CHECK(ldo >= e.n, "AMX GEMM: ldo ", ldo, " < ", e.n, " columns");
  auto sink = [&](int64_t m0, int64_t rows, int64_t n0, int64_t cols, const int32_t (*c)[kBlock]) {
    e.store(c[0], kBlock, m0, rows, n0, cols, out, ldo);
  };
  dispatch<true>(emulate, M, reinterpret_cast<const uint8_t*>(A), lda, B, e.n, nullptr, 0, false, sink);
}

}  // namespace qat::quant::amx
