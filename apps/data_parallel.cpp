#include "apps/data_parallel.h"

#include <chrono>
#include <cstring>

#include "core/error.h"
#include "layers/layers.h"

namespace qat::apps {

double sum_gradients(const std::vector<Tensor>& params, Collective& all) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<float> bucket;
  bucket.reserve(static_cast<size_t>(kBucketFloats));
  std::vector<Tensor> in_bucket;
  auto flush = [&] {
    if (bucket.empty()) return;
    all.sum(bucket.data(), static_cast<int64_t>(bucket.size()));
    size_t at = 0;
    for (Tensor& g : in_bucket) {
      std::memcpy(g.data<float>(), bucket.data() + at, sizeof(float) * static_cast<size_t>(g.numel()));
      g.bump_version();
      at += static_cast<size_t>(g.numel());
    }
    bucket.clear();
    in_bucket.clear();
  };
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    Tensor g = it->grad();
    if (!g.defined()) continue;
    QAT_CHECK(g.is_contiguous() && g.dtype() == DType::f32, "data-parallel: a gradient of shape ", g.sizes(),
              " is not a contiguous f32 tensor");
    const float* p = g.data<float>();
    if (static_cast<int64_t>(bucket.size()) + g.numel() > kBucketFloats) flush();
    if (g.numel() > kBucketFloats) {  // a large one alone, in place
      all.sum(g.data<float>(), g.numel());
      g.bump_version();
      continue;
    }
    bucket.insert(bucket.end(), p, p + g.numel());
    in_bucket.push_back(g);
  }
  flush();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void average_batch_norm_statistics(Module& model, Collective& all) {
  std::vector<Tensor> stats;
  int64_t n = 0;
  for (auto& [name, m] : model.named_modules())
    if (auto* bn = dynamic_cast<BatchNorm2d*>(m))
      for (Tensor* t : {&bn->running_mean, &bn->running_var}) {
        stats.push_back(*t);
        n += t->numel();
      }
  if (stats.empty()) return;
  std::vector<double> v;
  v.reserve(static_cast<size_t>(n));
  for (const Tensor& t : stats)
    for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.data<float>()[i]);
  all.sum(v.data(), n);
  size_t at = 0;
  for (Tensor& t : stats) {
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(v[at++] / all.size());
    t.bump_version();
  }
}

void check_same_state(const TensorMap& state, Collective& all, const std::string& when) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a over names and bytes, in name order
  for (const auto& [name, t] : state) {
    for (const char ch : name) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ULL;
    const Tensor c = t.contiguous();
    const auto* b = static_cast<const unsigned char*>(c.impl_ptr()->storage->data) +
                    static_cast<size_t>(c.impl_ptr()->offset) * dtype_size(c.dtype());
    for (size_t i = 0; i < c.nbytes(); ++i) h = (h ^ b[i]) * 1099511628211ULL;
  }
  // four 16-bit pieces as floats (exact): equal on every process iff min == max
  float lo[4], hi[4];
  for (int i = 0; i < 4; ++i) lo[i] = hi[i] = static_cast<float>((h >> (16 * i)) & 0xffffu);
  all.min(lo, 4);
  all.max(hi, 4);
  for (int i = 0; i < 4; ++i)
    QAT_CHECK(lo[i] == hi[i], "data-parallel: the processes hold different models ", when,
              " (their parameters, buffers or optimizer state differ); stopping");
}

}  // namespace qat::apps
