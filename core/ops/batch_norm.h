#pragma once
// Batch normalisation over channel dim 1 of x: (N, C) or (N, C, H, W); CPU
// or cuda, all tensors on one device (twin on cuDNN: core/ops/batch_norm.cu,
// which refuses eps below cuDNN's minimum and synchronised statistics).
// weight, bias: (C) or undefined (no affine); running_mean, running_var: (C)
// or undefined (then batch statistics are used in eval too, as PyTorch).
// training: normalise with the batch mean and biased variance; update the
//   running stats in place with momentum: r = (1-m) r + m stat, using the
//   unbiased variance (PyTorch). eval: normalise with the running stats.
// Backward (saves x, per-channel mean and 1/sqrt(var+eps)):
//   xhat = (x-mean)*istd; dgamma = sum g*xhat; dbeta = sum g;
//   training: dx = gamma*istd/M * (M g - sum g - xhat * sum g*xhat), M = N*H*W
//   eval:     dx = gamma*istd * g
#include <cstdint>

#include "core/tensor.h"

namespace qat {

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, float momentum = 0.1f, float eps = 1e-5f);

// batch_norm(scale_channels(x, s, 1), ...) as one op, s (C) per channel: the
// same bits (x * s made a plane at a time, in float, as scale_channels
// does; its gradients as scale_channels' backward computes them from batch
// norm's), without the scaled tensor in memory, forward or backward. The
// QAT Conv+BN fold's unscaling of the convolution (quant/sim/qat_modules.cpp).
// act: a ReLU or ReLU6 after the batch norm, in the same op: the same bits
// as relu(...) / relu6(...) of its output (core/ops/math.h's rules), one
// pass over the activations less each way; the backward masks the gradient
// from the saved output, as those ops do. On cuda: the two (three) ops.
enum class BnActivation { none, relu, relu6 };

// An element-wise stage after the activation, run inside batch_norm_scaled
// on each output plane while it is in cache: the layer's output fake
// quantizer (quant/sim/fake_quantizer.cpp, Note [the output quantizer
// inside batch norm]). CPU, unsynchronised batch norm only.
class BnOutputStage {
 public:
  virtual ~BnOutputStage() = default;
  // Whether begin() needs the range of the values.
  virtual bool wants_range() const = 0;
  // Once, before any apply(): where wants_range(), [lo, hi] is the range of
  // the values after the activation over the whole tensor, NaNs left out
  // (+inf, -inf: none), as an observer's reduction would find it.
  virtual void begin(float lo, float hi) = 0;
  // `planes` runs of `len` values after the activation: run k at in + k len
  // -> out + k stride; passes (null: no gradient wanted), at passes + k
  // stride: 1 where the gradient passes the stage, 0 where it is multiplied
  // by 0. Called concurrently for different runs.
  virtual void apply(const float* in, float* out, uint8_t* passes, int64_t planes, int64_t len,
                     int64_t stride) const = 0;
};

// stage: applied after act (the op's output is then the stage's); its
// backward masks the gradient by the stage's passes and the activation's,
// kept as one byte an element instead of the output.
Tensor batch_norm_scaled(const Tensor& x, const Tensor& s, const Tensor& weight, const Tensor& bias,
                         const Tensor& running_mean, const Tensor& running_var, bool training, float momentum = 0.1f,
                         float eps = 1e-5f, BnActivation act = BnActivation::none, BnOutputStage* stage = nullptr);

}  // namespace qat
