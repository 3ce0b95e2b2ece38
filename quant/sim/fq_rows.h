#pragma once
// One weight row fake-quantized with its clipped-STE mask as bits: what
// fake_quant.cpp's fused per-channel pass runs on each channel's row while
// the row is in cache. y[i] = fake_quant(x[i]) as fake_quant.h's rule (the
// same bits as the plain op), and bit j of bits[w] is element 16 w + j's
// mask (1: qmin <= q <= qmax, the gradient passes; 0 for NaN).
//
// Kernels, chosen at run time (core/cpu_features.h):
//  - generic: the plain per-element loop, then the byte mask packed;
//  - avx2: 8 values a vector, two compare masks to a word;
//  - avx512: 16 values a vector, the compare mask is the word.
// Each gives the generic loop's bits (tests/quant/sim/test_fq_rows.cpp).
// Stream: the row goes to memory with non-temporal stores (for weights far
// larger than the caches: a plain store first reads the line it writes);
// needs y 64-byte aligned and n a multiple of 16; the generic kernel ignores it.
#include <array>
#include <cstdint>

#include "core/enum_names.h"

namespace qat::quant {

enum class FqRowsKernel { generic, avx2, avx512 };
constexpr auto enum_names(FqRowsKernel) {
  return std::to_array<EnumName<FqRowsKernel>>(
      {{FqRowsKernel::generic, "generic"}, {FqRowsKernel::avx2, "avx2"}, {FqRowsKernel::avx512, "avx512"}});
}
bool fq_rows_kernel_runs_here(FqRowsKernel kernel);
FqRowsKernel best_fq_rows_kernel();

struct FqRowArgs {
  float s, inv, z, qmin, qmax;
};

// Throws qat::Error naming the kernel when it does not run on this CPU.
void fq_row_bits(FqRowsKernel kernel, bool stream, const float* x, float* y, int64_t n, const FqRowArgs& a,
                 uint16_t* bits);

}  // namespace qat::quant
