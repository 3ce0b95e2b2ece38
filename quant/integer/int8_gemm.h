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

// The ranges a caller guarantees for its operands: every A value in
// [0, a_max], every B value in [-b_absmax, b_absmax].
struct GemmRanges {
  int32_t a_max = 255, b_absmax = 128;
};
// Whether no pair sum a0 b0 + a1 b1 of such operands leaves int16:
// 2 a_max b_absmax <= 32767 (7-bit activations with 8-bit weights, or 4-bit
// weights or activations; not 8 bits on both sides).
bool pairs_fit_int16(const GemmRanges& r);
// gemm_u8s8s32 for operands within r (unchecked: the caller's guarantee, as
// the integer model's clamped activations and weight grid give). Where the
// pair sums fit int16, the avx2 kernel multiplies with vpmaddubsw, 32
// products an instruction instead of 16, exactly; every other case is
// gemm_u8s8s32. runs_maddubs tells which.
bool runs_maddubs(GemmKernel kernel, const GemmRanges& r);
void gemm_u8s8s32_bounded(GemmKernel kernel, const GemmRanges& r, int64_t M, int64_t N, int64_t K, const uint8_t* A,
                          int64_t lda, const int8_t* B, int64_t ldb, int32_t* C, int64_t ldc);

// The same product for two signed operands (INT8 training: gradients x
// weights), C[m][n] = sum_k A[m][k] * B[n][k]. The reference kernel is the
// plain signed sum; the fast kernels run gemm_u8s8s32 on A + 128 (a u8) and
// subtract the column correction 128 * sum_k B[n][k], which is exact (every
// partial sum of the shifted product fits int32 for K <= 2^16, checked).
void gemm_s8s8s32(GemmKernel kernel, int64_t M, int64_t N, int64_t K, const int8_t* A, int64_t lda, const int8_t* B,
                  int64_t ldb, int32_t* C, int64_t ldc);
// Its first part alone, for a caller that folds the correction into a pass
// of its own: C = (A + 128) B^T and colsum[n] = sum_k B[n][k] (N entries),
// so that A B^T = C - 128 colsum[n], exactly (K <= 2^16).
void gemm_s8s8s32_shifted(GemmKernel kernel, int64_t M, int64_t N, int64_t K, const int8_t* A, int64_t lda,
                          const int8_t* B, int64_t ldb, int32_t* C, int64_t ldc, int32_t* colsum);

}  // namespace qat::quant
