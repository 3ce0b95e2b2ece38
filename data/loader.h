#pragma once
// DataLoader: batches of normalised images from an ImageFolder, decoded ahead
// of time by worker threads (Note [loader determinism]).
//
//   DataLoader loader(folder, spec, {.batch_size = 64, .workers = 4, .seed = 0});
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
//     loader.start_epoch(epoch);
//     Batch b;
//     while (loader.next(b)) { ... b.images (N,3,S,S) f32, b.labels (N) i32 ... }
//   }
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/tensor.h"
#include "data/image_folder.h"
#include "data/transforms.h"

namespace qat::data {

struct LoaderOptions {
  int64_t batch_size = 64;
  bool shuffle = true;     // a new order every epoch, a function of (seed, epoch) only
  bool drop_last = false;  // drop the last, short batch
  int64_t workers = 2;     // decoding threads; 0: decode inside next() on the calling thread
  int64_t prefetch = 4;    // batches decoded or waiting ahead of the consumer (at least `workers`)
  bool cache = false;      // keep every prepared (decoded + resized, uint8) image in memory
  uint64_t memory_bytes = 0;  // the cache may take half of this (check_cache_fits); 0: memory_limit_bytes() (data/memory_limit.h)
  bool train = true;       // augment (random crop/flip); false: resize + centre crop
  uint64_t seed = 0;
  // Data-parallel runs: this process's part of every batch, shard of shards:
  // the contiguous slice [n shard / shards, n (shard + 1) / shards) of the
  // batch's n samples in the epoch's global order. A sample's augmentation
  // depends only on (seed, epoch, dataset index), so the shards together are
  // exactly the batch a single process sees.
  int64_t shard = 0, shards = 1;
};

struct Batch {
  Tensor images;      // (N,3,S,S) f32, normalised
  Tensor labels;      // (N) i32
  int64_t index = 0;  // position of the batch in the epoch (0-based)
  int64_t skipped = 0;  // bad images dropped from this batch (N = batch_size - skipped)
};

struct LoaderStats {
  double wait_seconds = 0;     // time next() spent waiting for a batch
  int64_t batches = 0;         // batches returned by next()
  int64_t skipped_images = 0;  // bad images dropped (each time one is met)
};

// One consumer thread calls start_epoch/next/stats; `data` must outlive the
// loader. Memory: prefetch batches of floats, plus with `cache` one uint8
// prepared image per sample (e.g. 144x144x3 = 62 KB each; Note [cache size]).
class DataLoader {
 public:
  // Starts the worker threads (idle until start_epoch). Throws on a bad spec
  // or options, an empty dataset, or a cache too large for the memory.
  DataLoader(const ImageFolder& data, TransformSpec spec, LoaderOptions opt);
  ~DataLoader();  // stops and joins the workers, also in the middle of an epoch
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Begins epoch `epoch` (abandoning any unfinished one): fixes the sample
  // order and lets the workers start decoding.
  void start_epoch(int64_t epoch);
  // The next batch of the epoch in order; false at the end of the epoch. A
  // worker's error (corrupt image with skipping off, crop that does not fit)
  // is rethrown here, naming the file; the epoch then ends. Batches whose
  // images were all bad are passed over.
  bool next(Batch& batch);

  int64_t batches_per_epoch() const;
  int64_t samples_per_epoch() const;  // images the epoch visits (drop_last applied)
  const ImageFolder& dataset() const { return data_; }
  const TransformSpec& spec() const { return spec_; }
  const LoaderOptions& options() const { return opt_; }

  LoaderStats stats() const;
  void reset_stats();
  // Distinct files found bad so far (sorted), for the log.
  std::vector<std::string> bad_files() const;

  // The order in which epoch `epoch` visits the samples (dataset indices).
  std::vector<int64_t> epoch_order(int64_t epoch) const;

 private:
  void stop_workers();  // stops and joins every worker thread
  struct Slot {
    Batch batch;
    std::exception_ptr error;
  };
  void worker_loop();
  bool can_claim() const;
  // Builds batch `b` of the current epoch; returns false when abandoned
  // (start_epoch or the destructor bumped the generation).
  bool build_batch(int64_t b, uint64_t generation, Slot& slot);
  // The prepared image of sample `idx`, or nullptr when it is bad and skipped.
  const Image* prepared(int64_t idx, Image& scratch);

  const ImageFolder& data_;
  TransformSpec spec_;
  LoaderOptions opt_;
  int64_t limit_ = 1;  // batches in flight or waiting

  // Epoch state: written only under mu_ while no worker is busy.
  std::vector<int64_t> order_;
  int64_t epoch_ = 0;
  bool started_ = false;

  mutable std::mutex mu_;
  std::condition_variable work_cv_, ready_cv_, idle_cv_;
  int64_t claim_ = 0;     // next batch to hand to a worker
  int64_t consume_ = 0;   // next batch next() returns
  int64_t busy_ = 0;      // workers building a batch
  bool halted_ = false;   // a worker failed: no further claims this epoch
  bool failed_ = false;   // next() rethrew a worker's error: the epoch is over
  std::map<int64_t, Slot> slots_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;

  // Cache (opt_.cache): entry i is touched only by whoever builds the batch
  // holding sample i, and epochs never overlap, so it needs no lock.
  enum : uint8_t { kEmpty = 0, kReady = 1, kBad = 2 };
  std::vector<uint8_t> cache_state_;
  std::vector<Image> cache_;

  // Stats.
  double wait_seconds_ = 0;  // consumer thread only
  int64_t batches_ = 0;      // consumer thread only
  std::atomic<int64_t> skipped_{0};
  mutable std::mutex bad_mu_;
  std::set<int64_t> bad_;
};

// Note [cache size]: the cache keeps prepare_image()'s output, the shorter
// side resized to spec.resize, so one image takes at least resize^2 * 3 bytes
// (more when it is not square). At data.resize 8000 that is 192 MB an image:
// the sample's 300 images grew past the machine's memory and died in
// std::bad_alloc naming nothing. The size is checked before anything loads.

// At least the bytes the cache of `images` images holds once full; 0 when
// spec.resize <= 0 (the decoded size, unknown before decoding).
uint64_t cache_bytes_at_least(int64_t images, const TransformSpec& spec);
// Throws qat::Error naming data.cache, data.resize, the image count, the
// estimate and the limit when the cache of `images` images of `root` would
// take more than half of `memory_bytes` (0: no check).
void check_cache_fits(int64_t images, const TransformSpec& spec, uint64_t memory_bytes, const std::string& root);

// Seeds (Note [loader determinism]): a 64-bit mix of the loader seed with a
// stream tag and up to two integers.
uint64_t loader_seed(uint64_t seed, uint64_t stream, uint64_t a, uint64_t b = 0);

}  // namespace qat::data
