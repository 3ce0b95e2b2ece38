#pragma once
// The AVX-512 pieces that the gradient quantizer's kernels share
// (grad_quant.cpp's clip search, grad_rows.cpp's G and Gx): the same
// operations as quantize_grad_value, so the same integers.
#include "quant/integer/simd.h"

namespace qat::quant::grad_simd {

#define QAT_GRAD_AVX512 __attribute__((target("avx512f,avx512vl")))

// Sixteen rounded values r (lanes `live`) to their integers: NaN (and dead
// lanes) to 0, then clamped to [-hi, hi] as max then min.
QAT_GRAD_AVX512 inline __m512i clamped_integers(__m512 r, __m512 hi, __mmask16 live) {
  const __m512 kept = _mm512_maskz_mov_ps(live & _mm512_cmp_ps_mask(r, r, _CMP_ORD_Q), r);
  return _mm512_cvttps_epi32(_mm512_min_ps(_mm512_max_ps(kept, _mm512_sub_ps(_mm512_setzero_ps(), hi)), hi));
}

// nearbyint(g * inv) as vrndscaleps rounding to nearest even: nearbyint's
// rounding in the default mode, which qat never changes.
QAT_GRAD_AVX512 inline __m512 nearest(__m512 g, __m512 inv) {
  return _mm512_roundscale_ps(_mm512_mul_ps(g, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

#undef QAT_GRAD_AVX512

}  // namespace qat::quant::grad_simd
