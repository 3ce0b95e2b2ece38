#pragma once
// The AMX-INT8 GEMM (tdpbusd: 16 rows x 16 int32 columns x 64 bytes of K per
// instruction) on the packed weights of int8_gemm_packed.h: its layout
// [N / 16][K4][16][4] is exactly tdpbusd's B operand, 16 rows of K4 at a time
// (pack_b_vnni leaves 1 KiB of slack after the last block, since a tile of
// the last 16 rows can reach past it; the A panel is zero there, so whatever
// the rows hold adds nothing). A is copied in 32-row panels, K padded with
// zeros to a multiple of 64; C comes in 32 x 32 blocks (4 accumulator tiles,
// 2 of A, 2 of B). The result is C = A B^T in exact int32 arithmetic, equal
// to every other kernel's bit for bit. `emulate` runs the same code on
// EmulatedTiles (amx_tiles.h): the tests, and any machine without AMX.
// Callers go through int8_gemm_packed.h / int8_gemm.h with GemmKernel::amx
// or GemmKernel::amx_emulated.
#include <cstdint>

#include "quant/integer/int8_gemm_packed.h"

namespace qat::quant::amx {

// C (M x n, ldc) = A B^T for the first n <= B.N columns; flip: A holds s8
// bytes, multiplied as A + 128 (gemm_s8s8s32_packed_offset's convention).
// a_zero_tail: A's rows hold zeros from K to lda (padded_row_stride), so the
// tiles read them in place where lda is a multiple of 64.
void gemm_s32(bool emulate, bool flip, int64_t M, const uint8_t* A, int64_t lda, const PackedB& B, int64_t n,
              int32_t* C, int64_t ldc, bool a_zero_tail = false);
// gemm_s8s8_packed_dequant's product (A s8, read as A + 128) and epilogue.
void gemm_dequant(bool emulate, int64_t M, const int8_t* A, int64_t lda, const PackedB& B, const DequantEpilogue& e,
                  float* out, int64_t ldo);

}  // namespace qat::quant::amx
