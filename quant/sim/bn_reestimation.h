#pragma once
// Batch-norm re-estimation (Nagel et al., "Overcoming Oscillations in
// Quantization-Aware Training", ICML 2022, section 4.2).
//
// Note [BN re-estimation]
// While a QAT model trains, every batch norm normalises with the batch's own
// statistics, and the running mean and variance it keeps for evaluation are
// an exponential average over the last few hundred steps. At low bit widths
// the quantized weights keep changing (a weight near a rounding threshold
// flips between two levels step after step), so that average mixes
// statistics of networks that no longer exist. The evaluated network, which
// uses the running statistics (and folds them into its weights: Note [BN
// folding in QAT]), then computes something else than the trained one did:
// MobileNetV2 at W4A4 on CIFAR-10 trained at 56.6% top-1 while its
// validation gave 39.3% (results/mobilenet_v2_int8_training_2026-12-05).
//
// The fix: with the weights as they now are, run `batches` training batches
// forward (no gradients, no optimizer step) with every batch norm in
// batch-statistics mode and its momentum set to 1/i at the i-th batch, so
// that the running statistics end as the plain average of the batches'
// statistics (the mean of the batch means; the mean of the unbiased batch
// variances), as PyTorch's momentum=None does. Frozen batch norms
// (quant.freeze_bn_epoch) are unfrozen for the pass and frozen again;
// observers are off for the pass, so no quantizer's range moves; each batch
// norm's momentum is restored.
#include <cstdint>
#include <functional>

#include "core/tensor.h"
#include "layers/module.h"

namespace qat::quant {

// next(images) fills the next batch's images and returns true, or returns
// false when there are no more (the pass then ends early). Returns the
// number of batches used. The model is left in training mode.
int64_t reestimate_bn_statistics(Module& model, int64_t batches, const std::function<bool(Tensor&)>& next);

}  // namespace qat::quant
