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
}  // namespace qat::simd
