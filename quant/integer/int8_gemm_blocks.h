#pragma once
// The unpacked int8 GEMM's register-blocked micro-kernels, one instruction
// set a file (int8_gemm_avx512_vnni.cpp, int8_gemm_avx2_widen.cpp,
// int8_gemm_avx_vnni.cpp, int8_gemm_maddubs.cpp), driven by gemm_blocked in
// int8_gemm.cpp.
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
#include <cstdint>

namespace qat::quant::gemm_blocks {

using BlockFn = void (*)(const uint8_t* A, int64_t lda, const int8_t* B, int64_t ldb, int64_t K, int32_t* C,
                         int64_t ldc, int mr, int nr, bool accumulate);

struct KernelSet {
  int mr, nr;         // the block kernel's shape
  BlockFn block;      // for blocks of at least min_rows rows
  int min_rows;
  int row_nr;         // the one-row kernel's width (columns a call)
  BlockFn row;        // for thinner blocks, one row at a time
};

extern const KernelSet kAvx512Vnni;  // vpdpbusd on zmm, 4 x 4
extern const KernelSet kAvx2;        // u8 and s8 widened to int16, vpmaddwd, 3 x 4
extern const KernelSet kAvxVnni;     // vpdpbusd on ymm (VEX), 3 x 4
extern const KernelSet kMaddubs;     // vpmaddubsw on operands whose pair sums fit int16, 2 x 4

}  // namespace qat::quant::gemm_blocks
