#pragma once
// Integer ops run together where the integer model's graph allows (Note
// [conv then max pool]); the model's forward picks them (integer_model.cpp).
#include <cstdint>
#include <vector>

#include "quant/integer/integer_model.h"

namespace qat::quant::ops {

// Note [conv then max pool]
// Where a dense convolution's only reader is the max pool after it
// (ResNet's stem), the two run image by image on the threads: each image's
// convolution output goes to a buffer of its thread (ResNet-18's stem at
// 128 px: 0.26 MB, which stays in L2), and the pool reads it there, instead
// of the whole batch's output (8.4 MB at batch 32) being written out and
// read back. The pool reads the same bytes either way, so the output is the
// same. Taken outside any parallel region where the images share out
// evenly among the threads (a multiple of them, or at least four each).
//
// Whether layers i (a conv) and i + 1 (a max pool) run so, for `images`
// images; last_read: each layer's last reader (last_readers).
bool fuses_conv_max_pool(const std::vector<IntLayer>& layers, size_t i, const std::vector<size_t>& last_read,
                         int64_t images);
// The pool's output for the conv's input x (u8 NHWC).
Tensor run_conv_max_pool(const IntLayer& conv, const IntLayer& pool, const Tensor& x, GemmKernel kernel);

}  // namespace qat::quant::ops
