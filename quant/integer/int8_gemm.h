#pragma once
// Integer GEMM for the frozen model: C[m][n] = sum_k A[m][k] * B[n][k],
// A uint8 (M x K, activations), B int8 (N x K, weights: one row per output
// channel), C int32 (M x N). Zero points are applied by the caller (row and
// column sums). Kernels: a scalar reference (the specification), AVX2 (widen
// to int16, exact madd), AVX-VNNI (vpdpbusd on ymm, VEX: Intel client CPUs
// without AVX-512), AVX-512 VNNI (vpdpbusd) and AMX-INT8 (tdpbusd on
// tiles, int8_gemm_amx.h; amx_emulated runs the same kernel on an exact model
// of the tiles, for the tests and for machines without AMX), chosen at run
// time from the CPU's features; every fast path equals the reference bit for bit. The
// fast paths are register-blocked (VNNI 4 x 4, AVX2 and AVX-VNNI 3 x 4 blocks of C; one-row
// kernels for thinner edges and M = 1), cache-blocked over N and K, and run
// tiles of C on the OpenMP threads when M*N*K >= 2^20; small M splits over N.
// The integer model prefers int8_gemm_packed.h (repacked weights) where it applies.
#include <cstdint>
#include <vector>

#include "core/enum_names.h"

namespace qat::quant {

enum class GemmKernel { reference, avx2, avx_vnni, avx512_vnni, amx, amx_emulated };
constexpr auto enum_names(GemmKernel) {
  return std::to_array<EnumName<GemmKernel>>({{GemmKernel::reference, "reference"},
                                              {GemmKernel::avx2, "avx2"},
                                              {GemmKernel::avx_vnni, "avx_vnni"},
                                              {GemmKernel::avx512_vnni, "avx512_vnni"},
                                              {GemmKernel::amx, "amx"},
                                              {GemmKernel::amx_emulated, "amx_emulated"}});
}
const char* gemm_kernel_name(GemmKernel k);
// The fastest kernel this CPU supports (amx_emulated is never chosen: it is
// exact but slow).
GemmKernel best_gemm_kernel();
// Whether this CPU can run `k` (reference and amx_emulated: always).
bool gemm_kernel_runs_here(GemmKernel k);
// The kernels that run here, the reference first.
std::vector<GemmKernel> gemm_kernels_here();
bool is_amx(GemmKernel k);

void gemm_u8s8s32(GemmKernel kernel, int64_t M, int64_t N, int64_t K, const uint8_t* A, int64_t lda, const int8_t* B,
                  int64_t ldb, int32_t* C, int64_t ldc);

// The same product for two signed operands (INT8 training: gradients x
// weights), C[m][n] = sum_k A[m][k] * B[n][k]. The reference kernel is the
// plain signed sum; the fast kernels run gemm_u8s8s32 on A + 128 (a u8) and
// subtract the column correction 128 * sum_k B[n][k], which is exact (every
// partial sum of the shifted product fits int32 for K <= 2^16, checked).
void gemm_s8s8s32(GemmKernel kernel, int64_t M, int64_t N, int64_t K, const int8_t* A, int64_t lda, const int8_t* B,
                  int64_t ldb, int32_t* C, int64_t ldc);

}  // namespace qat::quant
