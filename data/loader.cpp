// Note [loader determinism]: a batch's content is a pure function of
// (seed, epoch, batch index): the epoch's order comes from a Generator seeded
// with loader_seed(seed, shuffle-stream, epoch), and each sample's
// augmentation from one seeded with loader_seed(seed, augment-stream, epoch,
// dataset index). Workers claim whole batches in increasing order and
// next() hands them out in that order, so neither the number of workers nor
// thread scheduling can change what the training loop sees. Workers use plain
// loops and stb only (no OpenMP, no BLAS), so they never compete with the
// training step's thread team for its pool.
#include "data/loader.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <system_error>

#include "core/error.h"
#include "core/generator.h"
#include "data/memory_limit.h"

namespace qat::data {

namespace {

constexpr uint64_t kShuffleStream = 0x53687566666c65ULL;  // "Shuffle"
constexpr uint64_t kAugmentStream = 0x4175676d656e74ULL;  // "Augment"

uint64_t fmix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t loader_seed(uint64_t seed, uint64_t stream, uint64_t a, uint64_t b) {
  uint64_t h = fmix64(seed + 0x9E3779B97F4A7C15ULL);
  h = fmix64(h ^ (stream + 0x9E3779B97F4A7C15ULL));
  h = fmix64(h ^ (a + 0xD1B54A32D192ED03ULL));
  h = fmix64(h ^ (b + 0x8CB92BA72F3D8DD7ULL));
  return h;
}

uint64_t cache_bytes_at_least(int64_t images, const TransformSpec& spec) {
  if (spec.resize <= 0 || images <= 0) return 0;
  const auto side = static_cast<uint64_t>(spec.resize);
  return static_cast<uint64_t>(images) * (side * side * 3 + sizeof(Image));
}

namespace {
std::string gib(uint64_t bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f GiB", static_cast<double>(bytes) / static_cast<double>(uint64_t{1} << 30));
  return s;
}
}  // namespace

// Note [cache size]. Half the memory: the model and the batches need the
// rest. `qat train` checks its two splits' caches together, each loader its own.
void check_cache_fits(int64_t images, const TransformSpec& spec, uint64_t memory_bytes, const std::string& root) {
  const uint64_t need = cache_bytes_at_least(images, spec);
  QAT_CHECK(memory_bytes == 0 || need <= memory_bytes / 2, "DataLoader: data.cache: true would keep the ", images,
            " images of '", root, "' in memory at data.resize ", spec.resize, ": at least ", gib(need), " (",
            spec.resize, "x", spec.resize, "x3 bytes each, more when not square), more than half of the ",
            gib(memory_bytes), " of memory this process may use; set data.cache: false (images are decoded every epoch) or a smaller "
            "data.resize");
}

DataLoader::DataLoader(const ImageFolder& data, TransformSpec spec, LoaderOptions opt)
    : data_(data), spec_(spec), opt_(opt) {
  validate(spec_);
  QAT_CHECK(opt_.batch_size > 0, "DataLoader: batch_size must be > 0, got ", opt_.batch_size);
  QAT_CHECK(opt_.workers >= 0, "DataLoader: workers must be >= 0, got ", opt_.workers);
  QAT_CHECK(opt_.prefetch >= 0, "DataLoader: prefetch must be >= 0, got ", opt_.prefetch);
  QAT_CHECK(opt_.shards >= 1 && opt_.shard >= 0 && opt_.shard < opt_.shards, "DataLoader: shard ", opt_.shard, " of ",
            opt_.shards, " is not a shard");
  QAT_CHECK(data_.size() > 0, "DataLoader: dataset '", data_.root(), "' is empty");
  QAT_CHECK(batches_per_epoch() > 0, "DataLoader: drop_last with batch_size ", opt_.batch_size, " > ", data_.size(),
            " images in '", data_.root(), "' leaves no batch");
  limit_ = std::max<int64_t>({opt_.prefetch, opt_.workers, 1});
  if (opt_.cache) {
    check_cache_fits(data_.size(), spec_, opt_.memory_bytes ? opt_.memory_bytes : memory_limit_bytes(),
                     data_.root());
    cache_state_.assign(static_cast<size_t>(data_.size()), kEmpty);
    cache_.resize(static_cast<size_t>(data_.size()));
  }
  threads_.reserve(static_cast<size_t>(opt_.workers));
  try {
    for (int64_t w = 0; w < opt_.workers; ++w) threads_.emplace_back([this] { worker_loop(); });
  } catch (const std::system_error& e) {
    // The destructor does not run for a half-built object: the threads that
    // did start must be joined here, or their destruction aborts the process.
    stop_workers();
    QAT_FAIL("DataLoader: could start only ", threads_.size(), " of ", opt_.workers, " worker threads (", e.what(),
             "); use fewer data.workers");
  }
}

DataLoader::~DataLoader() { stop_workers(); }

void DataLoader::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    ++generation_;
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

int64_t DataLoader::batches_per_epoch() const {
  const int64_t n = data_.size(), bs = opt_.batch_size;
  return opt_.drop_last ? n / bs : (n + bs - 1) / bs;
}

int64_t DataLoader::samples_per_epoch() const {
  return std::min(data_.size(), batches_per_epoch() * opt_.batch_size);
}

std::vector<int64_t> DataLoader::epoch_order(int64_t epoch) const {
  std::vector<int64_t> order(static_cast<size_t>(data_.size()));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  if (opt_.shuffle) {  // Fisher-Yates
    Generator gen(loader_seed(opt_.seed, kShuffleStream, static_cast<uint64_t>(epoch)));
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[gen.below(i)]);
  }
  return order;
}

void DataLoader::start_epoch(int64_t epoch) {
  std::vector<int64_t> order = epoch_order(epoch);
  {
    std::unique_lock<std::mutex> lock(mu_);
    ++generation_;  // workers abandon the batch they are on
    idle_cv_.wait(lock, [&] { return busy_ == 0; });
    slots_.clear();
    order_ = std::move(order);
    epoch_ = epoch;
    claim_ = 0;
    consume_ = 0;
    halted_ = false;
    failed_ = false;
    started_ = true;
  }
  work_cv_.notify_all();
}

bool DataLoader::can_claim() const {
  return started_ && !halted_ && claim_ < batches_per_epoch() && claim_ < consume_ + limit_;
}

void DataLoader::worker_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stop_ || can_claim(); });
    if (stop_) return;
    const int64_t b = claim_++;
    const uint64_t gen = generation_;
    ++busy_;
    lock.unlock();
    Slot slot;
    bool done = false;
    try {
      done = build_batch(b, gen, slot);
    } catch (...) {
      slot.error = std::current_exception();
      done = true;
    }
    lock.lock();
    --busy_;
    if (done && gen == generation_) {
      if (slot.error) halted_ = true;
      slots_.emplace(b, std::move(slot));
      ready_cv_.notify_all();
    }
    if (busy_ == 0) idle_cv_.notify_all();
  }
}

const Image* DataLoader::prepared(int64_t idx, Image& scratch) {
  const size_t i = static_cast<size_t>(idx);
  if (opt_.cache) {
    if (cache_state_[i] == kReady) return &cache_[i];
    if (cache_state_[i] == kBad) return nullptr;
  }
  std::optional<Image> decoded = data_.load(idx);  // throws naming the file unless skipping
  if (!decoded) {
    if (opt_.cache) cache_state_[i] = kBad;
    return nullptr;
  }
  try {
    scratch = prepare_image(*decoded, spec_);
  } catch (const Error& e) {
    QAT_FAIL("DataLoader: image '", data_.path(idx), "': ", e.what());
  }
  if (!opt_.cache) return &scratch;
  cache_[i] = std::move(scratch);
  cache_state_[i] = kReady;
  return &cache_[i];
}

bool DataLoader::build_batch(int64_t b, uint64_t generation, Slot& slot) {
  const int64_t global_begin = b * opt_.batch_size;
  const int64_t global_n = std::min(opt_.batch_size, data_.size() - global_begin);
  const int64_t begin = global_begin + global_n * opt_.shard / opt_.shards;
  const int64_t n = global_begin + global_n * (opt_.shard + 1) / opt_.shards - begin;
  const int64_t S = spec_.image_size, per = sample_numel(spec_);
  Tensor images = Tensor::empty({n, 3, S, S});
  Tensor labels = Tensor::empty({n}, DType::i32);
  float* img_out = images.data<float>();
  int32_t* lab_out = labels.data<int32_t>();
  int64_t kept = 0;
  Image scratch;
  for (int64_t k = 0; k < n; ++k) {
    if (stop_ || generation_ != generation) return false;
    const int64_t idx = order_[static_cast<size_t>(begin + k)];
    const Image* img = prepared(idx, scratch);
    if (!img) {
      ++skipped_;
      std::lock_guard<std::mutex> lock(bad_mu_);
      bad_.insert(idx);
      continue;
    }
    Generator gen(loader_seed(opt_.seed, kAugmentStream, static_cast<uint64_t>(epoch_), static_cast<uint64_t>(idx)));
    try {
      transform_prepared(*img, spec_, opt_.train, gen, img_out + kept * per);
    } catch (const Error& e) {
      QAT_FAIL("DataLoader: image '", data_.path(idx), "': ", e.what());
    }
    lab_out[kept] = data_.label(idx);
    ++kept;
  }
  if (kept < n) {
    images = kept > 0 ? images.narrow(0, 0, kept).clone() : Tensor::empty({0, 3, S, S});
    labels = kept > 0 ? labels.narrow(0, 0, kept).clone() : Tensor::empty({0}, DType::i32);
  }
  slot.batch.images = images;
  slot.batch.labels = labels;
  slot.batch.index = b;
  slot.batch.skipped = n - kept;
  return true;
}

bool DataLoader::next(Batch& out) {
  using clock = std::chrono::steady_clock;
  for (;;) {
    Slot slot;
    const auto t0 = clock::now();
    {
      std::unique_lock<std::mutex> lock(mu_);
      QAT_CHECK(started_, "DataLoader::next: call start_epoch() first");
      if (failed_ || consume_ >= batches_per_epoch()) return false;
      const int64_t b = consume_;
      if (opt_.workers == 0) {
        ++busy_;
        lock.unlock();
        bool done = false;
        try {
          done = build_batch(b, generation_, slot);
        } catch (...) {
          slot.error = std::current_exception();
          done = true;
        }
        lock.lock();
        --busy_;
        QAT_CHECK(done, "DataLoader::next: batch ", b, " abandoned");
        if (slot.error) halted_ = true;
      } else {
        ready_cv_.wait(lock, [&] { return slots_.find(b) != slots_.end(); });
        auto it = slots_.find(b);
        slot = std::move(it->second);
        slots_.erase(it);
      }
      ++consume_;
    }
    work_cv_.notify_all();
    wait_seconds_ += std::chrono::duration<double>(clock::now() - t0).count();
    if (slot.error) {
      failed_ = true;  // the epoch ends here; start_epoch() resets
      std::rethrow_exception(slot.error);
    }
    if (slot.batch.images.size(0) == 0) continue;  // every image of this batch was bad
    out = std::move(slot.batch);
    ++batches_;
    return true;
  }
}

LoaderStats DataLoader::stats() const {
  return {wait_seconds_, batches_, skipped_.load()};
}

void DataLoader::reset_stats() {
  wait_seconds_ = 0;
  batches_ = 0;
  skipped_ = 0;
}

std::vector<std::string> DataLoader::bad_files() const {
  std::lock_guard<std::mutex> lock(bad_mu_);
  std::vector<std::string> out;
  for (int64_t i : bad_) out.push_back(data_.path(i));
  return out;
}

}  // namespace qat::data
