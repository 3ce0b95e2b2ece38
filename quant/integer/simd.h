#pragma once
// <immintrin.h> for the kernels compiled with target attributes. GCC 12
// reports a false "may be used uninitialized" inside its own AVX-512 headers
// (_mm512_setzero_si512 / reduce); silenced for this include only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
