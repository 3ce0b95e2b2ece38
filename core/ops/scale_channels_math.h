#pragma once
// The per-index bodies of scale_channels (core/ops/scale_channels.h), shared
// by the CPU op and its CUDA twin (core/ops/scale_channels.cu). x is
// contiguous and seen as (outer, C, inner): element i is in channel
// channel_of(i, C, inner) (core/ops/math.h).
#include <cstdint>

#include "core/host_device.h"
#include "core/ops/math.h"

namespace qat::op_math {

// sum a[i] b[i] in 16 interleaved float partial sums (lane j takes i = j
// mod 16), then added in order: one running float sum is a chain of
// dependent adds, 4 cycles an element, while these vectorise on the CPU.
// Fixed order, so the same on every run, thread count and device (Note
// [pinned fused multiply-add]).
QAT_HOST_DEVICE inline float dot_lanes(const float* __restrict__ a, const float* __restrict__ b, int64_t n) {
  float part[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) part[j] = mul_add(a[i + j], b[i + j], part[j]);
  for (int j = 0; i < n; ++i, ++j) part[j] = mul_add(a[i], b[i], part[j]);
  float sum = 0.f;
  for (int j = 0; j < 16; ++j) sum += part[j];
  return sum;
}

// ds[c] = sum over channel c of g * x: each (outer, c) run of `inner`
// elements by dot_lanes, the runs added in double in order of `outer`.
QAT_HOST_DEVICE inline float scale_channel_grad(int64_t c, const float* g, const float* x, int64_t outer,
                                                int64_t channels, int64_t inner) {
  double acc = 0;
  for (int64_t o = 0; o < outer; ++o) {
    const int64_t base = (o * channels + c) * inner;
    acc += dot_lanes(g + base, x + base, inner);
  }
  return static_cast<float>(acc);
}

}  // namespace qat::op_math
