#pragma once
// INT8 training's gradient quantization on the CPU (int8_ops.cpp's G and Gx),
// in two passes over a contiguous copy of each row, so that both run on full
// vectors where the CPU has AVX-512:
//  - quantize_run: n values to their integers (grad_quant.h's
//    quantize_grad_value, stochastic or nearest; element i draws noise index
//    index0 + i), stored as int8 and as float, returning the sum of the
//    integers;
//  - chunk_stats: the cosine sums of items (a run of at most kSumChunk values
//    and their integers), each item summed from zero in order with
//    int8_math::add_grad_stats, as Note [INT8 training sums in chunks]
//    requires; eight items at once on the lanes of a vector, each lane in
//    its item's order.
// Every kernel gives the scalar loop's bits (tests/quant/int8_training/test_grad_rows.cpp).
#include <cstdint>

#include "quant/int8_training/grad_quant.h"

namespace qat::quant {

// The kernels' instruction sets are GradStatsKernel's (grad_quant.h).
int64_t quantize_run(GradStatsKernel kernel, const float* v, int64_t n, float inv, int qmax, GradRounding rounding,
                     uint64_t mixed_key, uint64_t index0, int8_t* q, float* qf);

// Item i: v[start[i] ..] and qf[start[i] ..], len[i] <= kSumChunk values
// (qf: the integers as floats); its sums go to out[i].
void chunk_stats(GradStatsKernel kernel, const float* v, const float* qf, const int64_t* start, const int64_t* len,
                 int64_t items, GradQuantStats* out);

// dst[p * O + o] = src[o * P + p] * scale[o] (Gx's row of one image: dY's
// planes (O, P) scaled per channel, turned to (P, O)); one float product
// each, so every kernel gives the same bits.
void scaled_transpose(GradStatsKernel kernel, const float* src, int64_t O, int64_t P, const float* scale, float* dst);

}  // namespace qat::quant
