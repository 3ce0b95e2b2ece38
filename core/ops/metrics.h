#pragma once
// Accuracy helpers (no autograd). scores: (N, C); target: (N) int32.
#include "core/tensor.h"

namespace qat {

// Index of the largest score per row -> (N) int32 (first one on ties).
Tensor argmax(const Tensor& scores);
// Indices of the k largest scores per row, largest first -> (N, k) int32.
Tensor topk_indices(const Tensor& scores, int64_t k);
// Number of rows whose target is among the k largest scores.
int64_t topk_correct(const Tensor& scores, const Tensor& target, int64_t k);

}  // namespace qat
