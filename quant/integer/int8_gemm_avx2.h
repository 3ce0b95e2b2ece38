#pragma once
// The exact AVX2 GEMM on the packed weights of int8_gemm_packed.h (no VNNI:
// Haswell to Comet Lake, AMD Zen 1-3). AVX2 has no exact u8 x s8 byte
// product (vpmaddubsw saturates its int16 pair sums), so both operands are
// multiplied as int16 with vpmaddwd (16 products an instruction, int32 pair
// sums, exact). The weights keep the byte layout [N / 16][K4][16][4] that
// every other packed kernel reads and are widened as they are loaded
// (16 bytes: 4 channels x 4 k); A is widened once per block of 48 rows into
// a per-thread int16 buffer, K padded with zeros to 4 K4, so that each
// 4-byte group of a row is one 64-bit broadcast. A tile is 6 rows x 8
// channels (12 accumulators): per group of 4 k, 2 widening loads of B, 6
// broadcasts, 12 vpmaddwd. That is as many multiply instructions per product
// as the saturating vpmaddubsw + vpmaddwd(ones) pair that oneDNN runs on such
// CPUs, without its rounding of large pair sums. Each accumulator lane holds
// two k of a channel; the tile adds lane pairs once at the end.
// Callers go through int8_gemm_packed.h with GemmKernel::avx2.
#include <cstdint>

#include "quant/integer/int8_gemm_packed.h"

namespace qat::quant::avx2 {

// C (M x n, ldc) = A B^T for the first n <= B.N columns; flip: A holds s8
// bytes, multiplied as A + 128 (gemm_s8s8s32_packed_offset's convention).
void gemm_s32(bool flip, int64_t M, const uint8_t* A, int64_t lda, const PackedB& B, int64_t n, int32_t* C,
              int64_t ldc);
// The same (no flip) for operands whose pair sums fit int16
// (pairs_fit_int16, int8_gemm.h: the caller's guarantee, unchecked): A's
// bytes multiplied by vpmaddubsw (32 products, int16 pair sums), then
// vpmaddwd by ones, as oneDNN does, which here is exact; A is copied rather
// than widened.
void gemm_s32_maddubs(int64_t M, const uint8_t* A, int64_t lda, const PackedB& B, int64_t n, int32_t* C,
                      int64_t ldc);
// gemm_s8s8_packed_dequant's product (A s8, read as A + 128) and epilogue.
void gemm_dequant(int64_t M, const int8_t* A, int64_t lda, const PackedB& B, const DequantEpilogue& e, float* out,
                  int64_t ldo);

}  // namespace qat::quant::avx2
