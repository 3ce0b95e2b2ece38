#pragma once
// Thin row-major SGEMM wrapper over OpenBLAS:
// C(M,N) = alpha * op(A) * op(B) + beta * C, op = transpose when trans_*.
#include <cstdint>

namespace qat {
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Which kernel set OpenBLAS picked ("Haswell", "Cooperlake", ...): qat bench
// prints it. OpenBLAS chooses by CPU when it loads, unless OPENBLAS_CORETYPE
// says otherwise (this machine's environment sets Haswell: AVX2 kernels even
// on AVX-512 CPUs; unset, OpenBLAS 0.3.21 picks Cooperlake on AMD Zen 4 and
// the AlexNet-BN FP32 step is 1.4x faster there).
const char* blas_core_name();
}  // namespace qat
