#pragma once
// <immintrin.h> for the kernels compiled with target attributes. GCC 12
// reports a false "may be used uninitialized" inside its own AVX-512 headers
// (_mm512_setzero_si512 / reduce); silenced for this include only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstdint>

namespace qat::simd {
// All ones in the int32 lanes [0, live) of 8, none past them (live may be
// <= 0 or >= 8): the lane mask of AVX2's maskload / maskstore for a tail.
__attribute__((target("avx2"))) inline __m256i live_lanes(int64_t live) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(live < 0 ? 0 : live > 8 ? 8 : live)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
// Sixteen rows of sixteen 32-bit values (floats, or any four bytes) to their
// columns: pairs of rows interleaved (ps, then pd), then 128-bit lanes
// gathered in two rounds.
__attribute__((target("avx512f"))) inline void transpose16x16(__m512* r) {
  __m512 a[16], b[16];
  for (int i = 0; i < 8; ++i) {
    a[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // b[4i + c], 128-bit lane L: column c + 4L of rows 4i..4i+3
    const __m512d lo0 = _mm512_castps_pd(a[4 * i]), lo1 = _mm512_castps_pd(a[4 * i + 2]);
    const __m512d hi0 = _mm512_castps_pd(a[4 * i + 1]), hi1 = _mm512_castps_pd(a[4 * i + 3]);
    b[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(lo0, lo1));
    b[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(lo0, lo1));
    b[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(hi0, hi1));
    b[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(hi0, hi1));
  }
  for (int c = 0; c < 4; ++c) {
    const __m512 e0 = _mm512_shuffle_f32x4(b[c], b[4 + c], 0x88), e1 = _mm512_shuffle_f32x4(b[c], b[4 + c], 0xDD);
    const __m512 e2 = _mm512_shuffle_f32x4(b[8 + c], b[12 + c], 0x88);
    const __m512 e3 = _mm512_shuffle_f32x4(b[8 + c], b[12 + c], 0xDD);
    r[c] = _mm512_shuffle_f32x4(e0, e2, 0x88);
    r[c + 8] = _mm512_shuffle_f32x4(e0, e2, 0xDD);
    r[c + 4] = _mm512_shuffle_f32x4(e1, e3, 0x88);
    r[c + 12] = _mm512_shuffle_f32x4(e1, e3, 0xDD);
  }
}
}  // namespace qat::simd
