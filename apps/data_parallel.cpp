#include "apps/data_parallel.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "layers/layers.h"

namespace qat::apps {

namespace {
constexpr uint64_t kFnvStart = 1469598103934665603ULL;

// FNV-1a, 64 bits, continued from h over n bytes.
uint64_t fnv1a(const void* data, size_t n, uint64_t h = kFnvStart) {
  const auto* b = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ULL;
  return h;
}
uint64_t fnv1a(const std::string& text, uint64_t h = kFnvStart) { return fnv1a(text.data(), text.size(), h); }

// Whether the 64-bit `h` is the same on every process (each process gets the same answer).
bool same_everywhere(Collective& all, uint64_t h) {
  // four 16-bit pieces as floats (exact): equal on every process iff min == max
  float lo[4], hi[4];
  for (int i = 0; i < 4; ++i) lo[i] = hi[i] = static_cast<float>((h >> (16 * i)) & 0xffffu);
  all.min(lo, 4);
  all.max(hi, 4);
  for (int i = 0; i < 4; ++i)
    if (lo[i] != hi[i]) return false;
  return true;
}
}  // namespace

GradientBuckets::GradientBuckets(const std::vector<Tensor>& params, Collective& all) : all_(all) {
  int64_t filled = kBucketFloats;  // forces a first bucket
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    const int64_t n = it->numel();
    if (n > kBucketFloats || filled + n > kBucketFloats || buckets_.empty() || buckets_.back().data.empty()) {
      buckets_.emplace_back();
      filled = 0;
    }
    Bucket& b = buckets_.back();
    b.params.push_back(*it);
    bucket_of_[it->impl_ptr()] = buckets_.size() - 1;
    if (n > kBucketFloats) {
      filled = kBucketFloats;  // alone, in place
    } else {
      filled += n;
      b.data.resize(static_cast<size_t>(filled));
    }
  }
}

void GradientBuckets::begin_step() {
  for (Bucket& b : buckets_) b.pending = static_cast<int64_t>(b.params.size());
  next_ = 0;
  seconds_ = 0;
}

void GradientBuckets::ready(TensorImpl* leaf) {
  const auto it = bucket_of_.find(leaf);
  if (it == bucket_of_.end()) return;  // not a parameter (an input that required grad)
  --buckets_[it->second].pending;
  if (next_ >= buckets_.size() || buckets_[next_].pending > 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  while (next_ < buckets_.size() && buckets_[next_].pending == 0) start(buckets_[next_++]);
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void GradientBuckets::start(Bucket& b) {
  b.sent.clear();
  int64_t at = 0;
  for (const Tensor& p : b.params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    QAT_CHECK(g.is_contiguous() && g.dtype() == DType::f32, "data-parallel: a gradient of shape ", g.sizes(),
              " is not a contiguous f32 tensor");
    if (b.data.empty()) {  // a large one alone, in place
      all_.start_sum(g.data<float>(), g.numel());
    } else {
      std::memcpy(b.data.data() + at, g.data<float>(), sizeof(float) * static_cast<size_t>(g.numel()));
      at += g.numel();
    }
    b.sent.push_back(g);
  }
  if (at > 0) all_.start_sum(b.data.data(), at);
}

double GradientBuckets::finish() {
  const auto t0 = std::chrono::steady_clock::now();
  while (next_ < buckets_.size()) start(buckets_[next_++]);
  all_.wait_all();
  for (Bucket& b : buckets_) {
    size_t at = 0;
    for (Tensor& g : b.sent) {
      if (!b.data.empty()) {
        std::memcpy(g.data<float>(), b.data.data() + at, sizeof(float) * static_cast<size_t>(g.numel()));
        at += static_cast<size_t>(g.numel());
      }
      g.bump_version();
    }
    b.sent.clear();
  }
  return seconds_ + std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void average_over_processes(const std::vector<Tensor>& buffers, Collective& all) {
  int64_t n = 0;
  for (const Tensor& t : buffers) {
    QAT_CHECK(t.is_contiguous() && t.dtype() == DType::f32, "data-parallel: a buffer of shape ", t.sizes(),
              " is not a contiguous f32 tensor");
    n += t.numel();
  }
  if (n == 0) return;
  std::vector<double> v;  // summed in double: the mean of equal values is that value
  v.reserve(static_cast<size_t>(n));
  for (const Tensor& t : buffers)
    for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.data<float>()[i]);
  all.sum(v.data(), n);
  size_t at = 0;
  for (const Tensor& t : buffers) {
    Tensor b = t;
    for (int64_t i = 0; i < b.numel(); ++i) b.data<float>()[i] = static_cast<float>(v[at++] / all.size());
    b.bump_version();
  }
}

void average_batch_norm_statistics(Module& model, Collective& all) {
  std::vector<Tensor> stats;
  for (auto& [name, m] : model.named_modules())
    if (auto* bn = dynamic_cast<BatchNorm2d*>(m)) stats.insert(stats.end(), {bn->running_mean, bn->running_var});
  average_over_processes(stats, all);
}

void average_int8_statistics(const std::vector<quant::Int8Layer>& layers, Collective& all) {
  std::vector<Tensor> stats;
  for (const quant::Int8Layer& l : layers)
    for (auto& [name, t] : l.state->named_buffers())
      if (t.dtype() == DType::f32) stats.push_back(t);  // the step counts (i32) are equal everywhere
  average_over_processes(stats, all);
}

void check_same_state(const TensorMap& state, Collective& all, const std::string& when) {
  uint64_t h = kFnvStart;  // over names and bytes, in name order
  for (const auto& [name, t] : state) {
    h = fnv1a(name, h);
    const Tensor c = t.contiguous();
    const auto* b = static_cast<const unsigned char*>(c.impl_ptr()->storage->data) +
                    static_cast<size_t>(c.impl_ptr()->offset) * dtype_size(c.dtype());
    h = fnv1a(b, c.nbytes(), h);
  }
  QAT_CHECK(same_everywhere(all, h), "data-parallel: the processes hold different models ", when,
            " (their parameters, buffers or optimizer state differ); stopping");
}

void check_same_everywhere(Collective& all, const std::string& what, const std::string& value) {
  if (same_everywhere(all, fnv1a(value))) return;
  throw AgreedError(detail::cat("data-parallel: the processes disagree on ", what, "; this process (rank ",
                                all.rank(), " of ", all.size(), ") has ", value,
                                ". Every process must train the same config on the same images from the same "
                                "checkpoint; each process's line says what it has"));
}

std::string dataset_fingerprint(const data::ImageFolder& folder) {
  uint64_t h = kFnvStart;
  const std::filesystem::path root(folder.root());
  for (int64_t i = 0; i < folder.size(); ++i) {
    h = fnv1a(std::filesystem::path(folder.path(i)).lexically_relative(root).generic_string(), h);
    h = fnv1a(detail::cat(':', folder.label(i), '\n'), h);
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return detail::cat(folder.size(), " images in ", folder.classes().size(), " classes, names ", hex);
}

void throw_agreed_failure(Collective& all, const std::string& failure, int failed, const std::string& what) {
  float first = failure.empty() ? static_cast<float>(all.size()) : static_cast<float>(all.rank());
  all.min(&first, 1);
  if (!failure.empty()) throw AgreedError(failure);
  throw AgreedError(detail::cat(what, " failed on ", failed, " of ", all.size(), " processes (the first: rank ",
                                static_cast<int>(first), ", whose error is printed under its rank)"));
}

void check_on_every_process(const std::function<void()>& check) {
  Collective* all = collective();
  if (!all) return check();
  std::string failure;
  try {
    check();
  } catch (const Error& e) {
    failure = e.what();
  }
  float failed = failure.empty() ? 0.f : 1.f;
  all->sum(&failed, 1);
  if (failed > 0) throw_agreed_failure(*all, failure, static_cast<int>(failed), "the checks before the command");
}

}  // namespace qat::apps
