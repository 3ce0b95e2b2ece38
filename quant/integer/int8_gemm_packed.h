#pragma once
// A second AVX-512 VNNI GEMM for convolutions, on repacked weights: C = A B^T
// exactly as gemm_u8s8s32 (bit for bit: integer sums), but each vpdpbusd
// multiplies 4 bytes of one A row (broadcast) by 16 output channels x the same
// 4 k of B, so the 32-bit lanes are output channels and no horizontal
// reduction is needed (the dot-product kernels reduce 16 accumulators per
// 4 x 4 block, which costs most at small K, e.g. conv1's K = 363).
// Tiles: 6 rows of A x 64 output channels (24 accumulators); on AVX-VNNI
// (ymm, no AVX-512) 6 rows x 16 channels, the same layout read in halves;
// on AVX2 without VNNI 6 rows x 8 channels in int16 (int8_gemm_avx2.h).
// The same packed layout is the AMX kernel's B operand (int8_gemm_amx.h):
// every function here takes the kernel that multiplies, avx512_vnni,
// avx_vnni, avx2, amx or amx_emulated, so inference and INT8 training share one
// set of kernels.
#include <cstdint>
#include <vector>

#include "core/aligned_vector.h"
#include "quant/integer/int8_gemm.h"

namespace qat::quant {

struct PackedB {
  int64_t N = 0, K = 0, K4 = 0;  // K4 = ceil(K / 4)
  // [N / 16][K4][16][4], zero beyond K; then 1 KiB of slack (AMX tiles).
  // 64-byte aligned: every kernel loads it in 64-byte rows.
  AlignedVector<int8_t> data;
  // Or the same layout held elsewhere (INT8 training's rows, packed by its
  // forward a block at a time), `view_bytes` of it readable; data then empty.
  const int8_t* view = nullptr;
  int64_t view_bytes = 0;
  const int8_t* bytes() const { return view ? view : data.data(); }
  int64_t size() const { return view ? view_bytes : static_cast<int64_t>(data.size()); }
  bool empty() const { return size() == 0; }
};

// Whether `kernel` multiplies packed operands with N output columns: N a
// multiple of 16 (the AVX-512 VNNI kernel's last group of channels 16, 32,
// 48 or 64 wide), the CPU able to run it.
bool can_use_packed(GemmKernel kernel, int64_t N);
// Whether any kernel that runs here (gemm_kernels_here) takes N packed.
bool any_packed_kernel_here(int64_t N);
// N is padded with zero channels to a multiple of 16 (out.N).
inline int64_t packed_columns(int64_t N) { return (N + 15) / 16 * 16; }
PackedB pack_b_vnni(const int8_t* B, int64_t N, int64_t K, int64_t ldb);
// C (M x B.N, ldc) = A (M x K, lda) B^T. Threads over tiles when the work is
// large and no enclosing parallel region is active. a_zero_tail: A's rows
// hold zeros from K to lda, which the AMX kernel then reads in place
// (amx::gemm_s32).
void gemm_u8s8s32_packed(GemmKernel kernel, int64_t M, const uint8_t* A, int64_t lda, const PackedB& B, int32_t* C,
                         int64_t ldc, bool a_zero_tail = false);
// The same for operands within r (gemm_u8s8s32_bounded's guarantee): where
// runs_maddubs(kernel, r), the avx2 kernel multiplies the bytes with
// vpmaddubsw instead of widening them.
void gemm_u8s8s32_packed_bounded(GemmKernel kernel, const GemmRanges& r, int64_t M, const uint8_t* A, int64_t lda,
                                 const PackedB& B, int32_t* C, int64_t ldc, bool a_zero_tail = false);

// A convolution's rows of A read in place from a padded NHWC image instead
// of copied out by im2row (an implicit im2row): row m (output position
// first + m, out_w positions a row) starts at
//   image + (p / out_w) step_y + (p % out_w) step_x
// and is `taps` runs of `run` bytes (the C channels of one kernel tap; run
// a multiple of 4), run t at tap_offset[t] from there. Every byte of every
// window must lie in the image (the caller pads it).
struct WindowRows {
  const uint8_t* image;
  int64_t first, out_w, step_y, step_x;
  const int64_t* tap_offset;
  int64_t taps, run;
  const uint8_t* row(int64_t m) const {
    const int64_t p = first + m;
    return image + (p / out_w) * step_y + (p % out_w) * step_x;
  }
};
// Whether gemm_u8s8s32_packed_window takes `kernel` with N packed columns
// and runs of `run` bytes: the AVX-512 VNNI and AVX-VNNI tiles.
bool can_use_packed_window(GemmKernel kernel, int64_t N, int64_t run);
// C (M x B.N, ldc) = A B^T with A's M rows read from w (B.K = taps run),
// exactly as gemm_u8s8s32_packed on the same rows copied out. Threads over
// tiles as gemm_u8s8s32_packed.
void gemm_u8s8s32_packed_window(GemmKernel kernel, int64_t M, const WindowRows& w, const PackedB& B, int32_t* C,
                                int64_t ldc);

// INT8 training's input gradient, dX = Gx W with Gx s8 (M x O) and the
// weight W s8 (O x K) as stored (one row per output channel):
// pack_b_vnni_transposed packs B = W^T (N = K columns of W, padded with zero
// columns to a multiple of 64; reduction over O) straight from W, reusing
// out's buffer, and writes sums[n] = sum_k Bt[k][n] when sums is not null
// (out.N entries, 0 for the padding). gemm_s8s8s32_packed_offset then
// computes C = (A + 128) B^T (A's sign bits flipped as they are broadcast:
// no shifted copy), so A B^T = C - 128 sums[n], exactly (every partial sum
// fits int32 for K <= 2^16). C gets out.N columns (the padded ones 0).
// flip_signs: Bt holds u8 values v, packed as v - 128 (s8; sums of v - 128).
// kernel: the one that will multiply it (avx_vnni and avx2 pack with AVX2 code,
// the others with AVX-512 where the CPU has it); the same bytes either way.
// can_pack_transposed: whether this CPU packs at all (AVX-512 VNNI or
// AVX2).
bool can_pack_transposed();
void pack_b_vnni_transposed(const int8_t* Bt, int64_t K, int64_t N, int64_t ldbt, PackedB& out, int32_t* sums,
                            bool flip_signs = false, GemmKernel kernel = GemmKernel::avx512_vnni);
void gemm_s8s8s32_packed_offset(GemmKernel kernel, int64_t M, const int8_t* A, int64_t lda, const PackedB& B,
                                int32_t* C, int64_t ldc);
// Part of a packing as pack_b_vnni_transposed(flip_signs) makes it, on one
// thread (INT8 training's forward packs each chunk of its rows while they
// are in cache): Bt's `rows` rows (u8, flipped to s8) as quads at, at + 1,
// ... of a layout of K4 quads a 16-column group at data (N padded to 64
// columns; the last quad's missing rows 0); sums (N padded to 64 entries)
// get these rows' column sums. The caller ensures an AVX-512 VNNI CPU,
// rows > 0, ldbt >= N and at + ceil(rows / 4) <= K4 (nothing is checked:
// it runs inside parallel regions, where an exception cannot leave).
void pack_rows_vnni_transposed_at(const int8_t* Bt, int64_t rows, int64_t N, int64_t ldbt, int8_t* data, int64_t K4,
                                  int64_t at, int32_t* sums);

// INT8 training's weight gradient: the same product, each tile of C turned
// into floats while it is in registers/L1 (no int32 matrix through memory):
//   out[m][n] = float(scale * (double(C[m][n] - 128 sums[n]) + row_add[m]))
// for the first n columns (n <= B.N); every double operation is the one the
// scalar dequantization does, so the result is the same bit for bit.
// (C - 128 sums must fit int32: K <= 2^16 as above.)
struct DequantEpilogue {
  int64_t n = 0;                    // columns of out
  const int32_t* sums = nullptr;    // (B.N) from pack_b_vnni_transposed
  const double* row_add = nullptr;  // (M)
  double scale = 1.0;
  // out[m][n] from c = C[m][n], col_sum = sums[n], add = row_add[m]
  float value(int32_t c, int32_t col_sum, double add) const {
    return static_cast<float>(scale * (static_cast<double>(c - 128 * col_sum) + add));
  }
  // A block of C, rows m0 .. m0 + rows, columns n0 .. n0 + cols (c: its
  // first element, row stride ldc), into out (row stride ldo).
  void store(const int32_t* c, int64_t ldc, int64_t m0, int64_t rows, int64_t n0, int64_t cols, float* out,
             int64_t ldo) const {
    for (int64_t r = 0; r < rows; ++r) {
      const double add = row_add[m0 + r];
      float* o = out + (m0 + r) * ldo + n0;
      for (int64_t j = 0; j < cols; ++j) o[j] = value(c[r * ldc + j], sums[n0 + j], add);
    }
  }
};
void gemm_s8s8_packed_dequant(GemmKernel kernel, int64_t M, const int8_t* A, int64_t lda, const PackedB& B,
                              const DequantEpilogue& e, float* out, int64_t ldo);

}  // namespace qat::quant
