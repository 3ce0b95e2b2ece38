#pragma once
// Thin row-major SGEMM wrapper over OpenBLAS:
// C(M,N) = alpha * op(A) * op(B) + beta * C, op = transpose when trans_*.
#include <cstdint>

namespace qat {
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
}  // namespace qat
