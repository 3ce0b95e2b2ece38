// The unpacked GEMM's AVX2 micro-kernels for operands whose pair sums fit
// int16 (gemm_u8s8s32_bounded): u8 x s8 pairs summed in int16 by vpmaddubsw
// (32 products an instruction, no widening), then in int32 by vpmaddwd with
// ones; 2 x 4 blocks (the ones and the product take two more registers).
#include <cstring>

#include "quant/integer/int8_gemm_blocks.h"
#include "quant/integer/int8_gemm_x86.h"

namespace qat::quant::gemm_blocks {

namespace {

#define QAT_DOT32_TARGET QAT_TARGET_AVX2
struct Dot32 {
  __m256i ones;
  QAT_DOT32_TARGET Dot32() : ones(_mm256_set1_epi16(1)) {}
  QAT_DOT32_TARGET void operator()(__m256i& acc, __m256i a, __m256i b) const { x86::maddubs_add(acc, a, b, ones); }
};
#include "quant/integer/int8_gemm_dot32.inc"
#undef QAT_DOT32_TARGET

}  // namespace

constinit const KernelSet kMaddubs{2, 4, &dot32_block<2>, 2, 8, &dot32_row};

}  // namespace qat::quant::gemm_blocks
