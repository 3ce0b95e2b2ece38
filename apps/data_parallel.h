#pragma once
// The training loop's side of a data-parallel run (docs/distributed.md).
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/collective.h"
#include "core/safetensors.h"
#include "layers/module.h"
#include "quant/sim/int8_training.h"
#include "core/tensor.h"
#include "data/image_folder.h"

namespace qat::apps {

// Sums the parameters' gradients over all processes while backward runs.
// The parameters, in reverse order (the order backward completes them), are
// cut once into buckets of at most kBucketFloats values (a larger gradient
// is a bucket of its own, summed in place). A bucket's sum is started as
// soon as backward has completed all its gradients (run_backward's ready
// hook) and every bucket before it has been started, so every process
// starts the same sums in the same order. Parameters without a gradient are
// left out (the same on every process: the same model and path).
constexpr int64_t kBucketFloats = int64_t{1} << 22;  // 16 MB
class GradientBuckets {
 public:
  GradientBuckets(const std::vector<Tensor>& params, Collective& all);
  // Waits for the sums still in flight (a backward that threw leaves some;
  // the other processes started the same ones, so they complete) before the
  // buffers they write go.
  ~GradientBuckets() { all_.wait_all(); }
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;
  // Before each backward.
  void begin_step();
  // From run_backward's GradReadyScope: `leaf`'s gradient is complete.
  void ready(TensorImpl* leaf);
  // After backward: starts the buckets not yet started, waits for every sum
  // and writes the sums into the gradients. Returns the seconds the training
  // thread spent on the sums this step (starting them, in backward, and
  // here): the communication that backward did not hide.
  double finish();
  int64_t bucket_count() const { return static_cast<int64_t>(buckets_.size()); }

 private:
  struct Bucket {
    std::vector<Tensor> params;
    int64_t pending = 0;      // parameters whose gradient is not complete yet
    std::vector<float> data;  // the packed gradients (empty: summed in place)
    std::vector<Tensor> sent; // the gradients in `data`, in order
  };
  void start(Bucket& b);
  Collective& all_;
  std::vector<Bucket> buckets_;
  std::unordered_map<const TensorImpl*, size_t> bucket_of_;
  size_t next_ = 0;  // the first bucket not started
  double seconds_ = 0;
};

// Replaces every value of `buffers` (contiguous f32) by its mean over the
// processes; every process gets the same bits.
void average_over_processes(const std::vector<Tensor>& buffers, Collective& all);

// Batch norm per process (train.sync_bn off): each process's running
// statistics follow its own slices, so after every step they are averaged
// over the processes (every process then holds the same buffers; the mean of
// the running means is the running mean of the global batch's means).
void average_batch_norm_statistics(Module& model, Collective& all);

// INT8 training (Note [INT8 training under MPI] in docs/distributed.md): each
// process clips and quantizes its own part of the batch's gradients, so its
// clip values, their ratios, the quantization distances, the learning-rate
// scales and their epoch sums follow its part. After every backward they are
// averaged over the processes, before the learning-rate scales are applied:
// every process then takes the same step and holds the same state.
void average_int8_statistics(const std::vector<quant::Int8Layer>& layers, Collective& all);

// Every process must hold the same model: parameters, buffers (batch-norm
// running statistics, observer ranges, qparams) and optimizer state bit for
// bit. Compares a 64-bit digest of `state` over the processes; throws naming
// the first differing check when they diverged.
void check_same_state(const TensorMap& state, Collective& all, const std::string& when);

// Note [same run everywhere]. Every process of a data-parallel run must
// train the same experiment on the same images from the same state. Each
// process reading its own config, data and checkpoint (the nodes of a
// cluster hold copies), one given another config, another copy of the data
// or a stale checkpoint trained out of step: the collectives then failed with
// MPI's own words ("Data unpack would read past end of buffer") or
// validation silently mixed two sets. So before training, and after a
// resume's load, `value` (a description of what this process has) is
// compared over the processes; where it differs every process throws
// AgreedError naming `what` and its own value, so the log shows each.
void check_same_everywhere(Collective& all, const std::string& what, const std::string& value);

// "N images in C classes, names <16 hex digits>": the image count, the class
// count and a digest of each image's path below the root and its label (the
// same on a node whose copy of the data lives elsewhere).
std::string dataset_fingerprint(const data::ImageFolder& folder);

// Note [checks every process makes]. A refusal every process of a job makes
// before it does anything (what data-parallel training cannot do, a command
// other than train under mpirun): each process runs `check`, they agree
// through one collective, and if any failed every process throws
// AgreedError (its own message, or how many failed and the first) so the
// job ends without MPI_Abort. An abort had the launcher kill the others
// while they printed, and a refusal could end with no message at all (seen
// once in a sanitizer run: 0.3 s, nothing printed). Without a collective
// (one process) `check` just runs.
void check_on_every_process(const std::function<void()>& check);

// Every process throws AgreedError: this one's `failure` (empty when it had
// none) or, for those without, that `failed` processes' `what` failed and
// which came first (its error is printed under its rank).
[[noreturn]] void throw_agreed_failure(Collective& all, const std::string& failure, int failed,
                                       const std::string& what);

}  // namespace qat::apps
