#pragma once
// Losses over class scores x: (N, C) with integer targets (N) of dtype int32.
#include "core/tensor.h"

namespace qat {

// log_softmax over dim 1, stable (subtracts the row max).
// Backward (saves the output y): dx = g - exp(y) * sum_j g_j.
Tensor log_softmax(const Tensor& x);

// mean_i -logp[i, target_i]. Backward: -g/N at the target entries.
Tensor nll_loss(const Tensor& logp, const Tensor& target);

// Fused softmax cross-entropy, mean over the batch, with label smoothing eps:
// loss_i = -(1-eps) logp[i,t_i] - eps/C sum_j logp[i,j]  (PyTorch's definition).
// Backward (saves softmax p): dx = g/N * (p - q), q = (1-eps) onehot + eps/C.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, float label_smoothing = 0.f);

}  // namespace qat
