// The unpacked GEMM's AVX-VNNI micro-kernels (int8_gemm_blocks.h): vpdpbusd
// on ymm in its VEX form (Intel client CPUs without AVX-512), 3 x 4 blocks.
#include <cstring>

#include "quant/integer/int8_gemm_blocks.h"
#include "quant/integer/int8_gemm_x86.h"

namespace qat::quant::gemm_blocks {

namespace {

#define QAT_DOT32_TARGET QAT_TARGET_AVX_VNNI
struct Dot32 {
  QAT_DOT32_TARGET void operator()(__m256i& acc, __m256i a, __m256i b) const { x86::dpbusd_vex(acc, a, b); }
};
#include "quant/integer/int8_gemm_dot32.inc"
#undef QAT_DOT32_TARGET

}  // namespace

constinit const KernelSet kAvxVnni{3, 4, &dot32_block<3>, 2, 8, &dot32_row};

}  // namespace qat::quant::gemm_blocks
