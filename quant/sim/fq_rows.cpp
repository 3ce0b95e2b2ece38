#include "quant/sim/fq_rows.h"

#include "quant/integer/simd.h"

#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "quant/sim/math.h"

namespace qat::quant {

bool fq_rows_kernel_runs_here(FqRowsKernel kernel) {
  switch (kernel) {
    case FqRowsKernel::generic: return true;
    case FqRowsKernel::avx2: return cpu_has_avx2();
    case FqRowsKernel::avx512: return cpu_has_avx512_rows();
  }
  return false;
}

FqRowsKernel best_fq_rows_kernel() {
  static const FqRowsKernel best = fq_rows_kernel_runs_here(FqRowsKernel::avx512) ? FqRowsKernel::avx512
                                   : fq_rows_kernel_runs_here(FqRowsKernel::avx2) ? FqRowsKernel::avx2
                                                                                  : FqRowsKernel::generic;
  return best;
}

namespace {

// The per-element rule (Note [fake-quant arithmetic], math.h), the mask as
// bytes in a row-sized buffer, then packed.
void row_generic(const float* x, float* y, int64_t n, const FqRowArgs& a, uint16_t* bits) {
  thread_local std::vector<uint8_t> mask;
  if (static_cast<int64_t>(mask.size()) < n) mask.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float q = math::fake_quant_grid(x[i], a.inv, a.z);
    y[i] = math::fake_quant_dequant(q, a.s, a.z, a.qmin, a.qmax);
    mask[i] = static_cast<uint8_t>(math::ste_passes(q, a.qmin, a.qmax));
  }
  for (int64_t w = 0; w * 16 < n; ++w) {
    uint16_t word = 0;
    for (int64_t j = 0; j < 16 && 16 * w + j < n; ++j) word |= static_cast<uint16_t>(mask[16 * w + j] << j);
    bits[w] = word;
  }
}

// The vector kernels do the generic loop's float operations in its order:
// round-to-nearest-even (vroundps / vrndscaleps = nearbyint), + z, then
// max(lo, t) and min(hi, .), which return t when it is NaN (the second
// operand), as clamp_grid does; the ordered compares are ste_passes (false
// for NaN). (Helpers are functions, not lambdas: GCC gives a lambda none of
// its enclosing function's target attribute, and a portable build then
// cannot inline the intrinsics.)

// ---- AVX2: 8 values, their 8 mask bits.
__attribute__((target("avx2"))) inline __m256 fq8(__m256 xv, __m256 vs, __m256 vinv, __m256 vz, __m256 lo, __m256 hi,
                                                 unsigned& mask) {
  const __m256 t =
      _mm256_add_ps(_mm256_round_ps(_mm256_mul_ps(xv, vinv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), vz);
  mask = static_cast<unsigned>(
      _mm256_movemask_ps(_mm256_and_ps(_mm256_cmp_ps(t, lo, _CMP_GE_OQ), _mm256_cmp_ps(t, hi, _CMP_LE_OQ))));
  return _mm256_mul_ps(_mm256_sub_ps(_mm256_min_ps(hi, _mm256_max_ps(lo, t)), vz), vs);
}

template <bool Stream>
__attribute__((target("avx2"))) void row_avx2(const float* x, float* y, int64_t n, const FqRowArgs& a,
                                              uint16_t* bits) {
  const __m256 vs = _mm256_set1_ps(a.s), vinv = _mm256_set1_ps(a.inv), vz = _mm256_set1_ps(a.z);
  const __m256 lo = _mm256_set1_ps(a.qmin), hi = _mm256_set1_ps(a.qmax);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    if constexpr (Stream) _mm_prefetch(reinterpret_cast<const char*>(x + n + i), _MM_HINT_T1);  // the next row
    unsigned m0, m1;
    const __m256 q0 = fq8(_mm256_loadu_ps(x + i), vs, vinv, vz, lo, hi, m0);
    const __m256 q1 = fq8(_mm256_loadu_ps(x + i + 8), vs, vinv, vz, lo, hi, m1);
    if constexpr (Stream) {
      _mm256_stream_ps(y + i, q0);
      _mm256_stream_ps(y + i + 8, q1);
    } else {
      _mm256_storeu_ps(y + i, q0);
      _mm256_storeu_ps(y + i + 8, q1);
    }
    bits[i / 16] = static_cast<uint16_t>(m0 | m1 << 8);
  }
  if (i < n) {  // the tail: one or two masked vectors
    const int64_t rest = n - i;
    unsigned m0, m1 = 0;
    const __m256i live0 = simd::live_lanes(rest);
    _mm256_maskstore_ps(y + i, live0, fq8(_mm256_maskload_ps(x + i, live0), vs, vinv, vz, lo, hi, m0));
    if (rest > 8) {
      const __m256i live1 = simd::live_lanes(rest - 8);
      _mm256_maskstore_ps(y + i + 8, live1, fq8(_mm256_maskload_ps(x + i + 8, live1), vs, vinv, vz, lo, hi, m1));
    }
    bits[i / 16] = static_cast<uint16_t>((m0 | m1 << 8) & ((1u << rest) - 1));  // 0 past the row's end
  }
  if constexpr (Stream) _mm_sfence();  // the streamed lines are visible before the row is reported done
}

// ---- AVX-512: 16 values, the compare mask is their word.
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512 fq16(__m512 xv, __m512 vs, __m512 vinv, __m512 vz,
                                                                         __m512 lo, __m512 hi, uint16_t& word) {
  const __m512 t =
      _mm512_add_ps(_mm512_roundscale_ps(_mm512_mul_ps(xv, vinv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), vz);
  word = _mm512_cmp_ps_mask(t, lo, _CMP_GE_OQ) & _mm512_cmp_ps_mask(t, hi, _CMP_LE_OQ);
  return _mm512_mul_ps(_mm512_sub_ps(_mm512_min_ps(hi, _mm512_max_ps(lo, t)), vz), vs);
}

template <bool Stream>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void row_avx512(const float* x, float* y, int64_t n,
                                                                      const FqRowArgs& a, uint16_t* bits) {
  const __m512 vs = _mm512_set1_ps(a.s), vinv = _mm512_set1_ps(a.inv), vz = _mm512_set1_ps(a.z);
  const __m512 lo = _mm512_set1_ps(a.qmin), hi = _mm512_set1_ps(a.qmax);
  // Masked loads and stores only in the tail (on Zen 4 a masked store costs
  // several plain ones).
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    // The next row (contiguous), into L2 while this one is computed: its
    // min/max pass then starts from cache (9.7 -> 9.2 ms a step for fc6 + fc7).
    if constexpr (Stream) _mm_prefetch(reinterpret_cast<const char*>(x + n + i), _MM_HINT_T1);
    const __m512 q = fq16(_mm512_loadu_ps(x + i), vs, vinv, vz, lo, hi, bits[i / 16]);
    if constexpr (Stream) _mm512_stream_ps(y + i, q);
    else _mm512_storeu_ps(y + i, q);
  }
  if (i < n) {
    const __mmask16 live = static_cast<__mmask16>((1u << (n - i)) - 1);
    uint16_t word;
    _mm512_mask_storeu_ps(y + i, live, fq16(_mm512_maskz_loadu_ps(live, x + i), vs, vinv, vz, lo, hi, word));
    bits[i / 16] = word & live;  // 0 past the row's end
  }
  if constexpr (Stream) _mm_sfence();
}

}  // namespace

void fq_row_bits(FqRowsKernel kernel, bool stream, const float* x, float* y, int64_t n, const FqRowArgs& a,
                 uint16_t* bits) {
  QAT_CHECK(fq_rows_kernel_runs_here(kernel), "fake-quant rows: the ", enum_name(kernel),
            " kernel does not run on this CPU");
  switch (kernel) {
    case FqRowsKernel::generic: return row_generic(x, y, n, a, bits);
    case FqRowsKernel::avx2: return stream ? row_avx2<true>(x, y, n, a, bits) : row_avx2<false>(x, y, n, a, bits);
    case FqRowsKernel::avx512:
      return stream ? row_avx512<true>(x, y, n, a, bits) : row_avx512<false>(x, y, n, a, bits);
  }
}

}  // namespace qat::quant
