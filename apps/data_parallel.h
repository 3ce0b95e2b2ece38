#pragma once
// The training loop's side of a data-parallel run (docs/distributed.md).
#include <string>
#include <vector>

#include "core/collective.h"
#include "core/safetensors.h"
#include "layers/module.h"
#include "core/tensor.h"

namespace qat::apps {

// Sums the parameters' gradients over all processes, in buckets of at most
// kBucketFloats values (parameters in reverse order, the order backward
// finishes them); every process gets the same sums. Parameters without a
// gradient are skipped (the same on every process: the same model and path).
// Returns the seconds spent.
constexpr int64_t kBucketFloats = int64_t{1} << 22;  // 16 MB
double sum_gradients(const std::vector<Tensor>& params, Collective& all);

// Batch norm per process (train.sync_bn off): each process's running
// statistics follow its own slices, so after every step they are averaged
// over the processes (every process then holds the same buffers; the mean of
// the running means is the running mean of the global batch's means).
void average_batch_norm_statistics(Module& model, Collective& all);

// Every process must hold the same model: parameters, buffers (batch-norm
// running statistics, observer ranges, qparams) and optimizer state bit for
// bit. Compares a 64-bit digest of `state` over the processes; throws naming
// the first differing check when they diverged.
void check_same_state(const TensorMap& state, Collective& all, const std::string& when);

}  // namespace qat::apps
