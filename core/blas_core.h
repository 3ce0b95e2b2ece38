#pragma once
// Which kernel set OpenBLAS picked ("Haswell", "Cooperlake", ...): qat bench
// prints it. OpenBLAS chooses by CPU when it loads, unless OPENBLAS_CORETYPE
// says otherwise (this machine's environment sets Haswell: AVX2 kernels even
// on AVX-512 CPUs; unset, OpenBLAS 0.3.21 picks Cooperlake on AMD Zen 4 and
// the AlexNet-BN FP32 step is 1.4x faster there).
namespace qat {

const char* blas_core_name();

}  // namespace qat
