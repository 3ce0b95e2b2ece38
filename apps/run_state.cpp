#include "apps/run_state.h"

#include <cstdio>
#include <set>

#include "layers/layers.h"
#include "models/checkpoint.h"

namespace qat::apps {

std::vector<Generator*> model_generators(Module& model) {
  std::vector<Generator*> out;
  std::set<Generator*> seen;
  for (auto& [name, m] : model.named_modules())
    if (auto* d = dynamic_cast<Dropout*>(m))
      if (seen.insert(d->generator().get()).second) out.push_back(d->generator().get());
  return out;
}

namespace {

std::string hex_state(const Generator& g) {
  std::string s;
  char buf[17];
  for (uint64_t w : g.state()) {
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(w));
    s += buf;
  }
  return s;
}

Generator::State parse_state(const std::string& hex, const std::string& path) {
  QAT_CHECK(hex.size() == 64, "checkpoint ", path, ": malformed generator state '", hex, "'");
  Generator::State st{};
  for (int i = 0; i < 4; ++i) st[i] = std::stoull(hex.substr(16 * i, 16), nullptr, 16);
  return st;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

const std::string& meta(const Metadata& m, const std::string& key, const std::string& path) {
  auto it = m.find(key);
  QAT_CHECK(it != m.end(), "checkpoint ", path, ": metadata '", key, "' is missing (not a qat training checkpoint?)");
  return it->second;
}

}  // namespace

namespace {
bool all_finite(const Tensor& t) {
  if (t.dtype() != DType::f32) return true;
  const Tensor c = t.to(Device::cpu).contiguous();  // a model trained on cuda is checked on host copies
  const float* p = c.data<float>();
  const int64_t n = c.numel();
  int64_t bad = 0;
  // x - x is 0 for every finite x and NaN for NaN or +-inf.
#pragma omp parallel for reduction(+ : bad) if (n > (int64_t{1} << 20))
  for (int64_t i = 0; i < n; ++i) bad += !(p[i] - p[i] == 0.f);
  return bad == 0;
}
}  // namespace

std::string first_non_finite(const Module& model, const Optimizer* optimizer) {
  for (const auto& [name, t] : model.named_parameters())
    if (!all_finite(t)) return name;
  for (const auto& [name, t] : model.named_buffers())
    if (!all_finite(t)) return name;
  if (optimizer)
    for (const auto& [name, t] : optimizer->state_dict())
      if (!all_finite(t)) return name;
  return "";
}

void save_run_state(const std::string& path, Module& model, const Optimizer* optimizer, const RunState& s,
                    const std::string& config_hash, const Metadata& extra) {
  Metadata m{{"format", "qat-train-1"},
             {"epoch", std::to_string(s.epoch)},
             {"step", std::to_string(s.step)},
             {"best_top1", num(s.best_top1)},
             {"epoch_loss_sum", num(s.epoch_loss_sum)},
             {"epoch_correct", std::to_string(s.epoch_correct)},
             {"epoch_images", std::to_string(s.epoch_images)},
             {"config_hash", config_hash}};
  const auto gens = model_generators(model);
  for (size_t i = 0; i < gens.size(); ++i) m["generator" + std::to_string(i)] = hex_state(*gens[i]);
  for (const auto& [k, v] : extra) m[k] = v;
  save_checkpoint(path, model, optimizer, m);
}

RunState load_run_state(const std::string& path, Module& model, Optimizer* optimizer,
                        const std::string& expected_hash) {
  const Metadata m = load_checkpoint(path, model, optimizer);
  const std::string& hash = meta(m, "config_hash", path);
  QAT_CHECK(expected_hash.empty() || hash == expected_hash, "checkpoint ", path, " was trained with config hash ",
            hash, " but the config now hashes to ", expected_hash,
            "; resume with the same config (output.dir and train.threads may differ)");
  RunState s;
  try {
    s.epoch = std::stoll(meta(m, "epoch", path));
    s.step = std::stoll(meta(m, "step", path));
    s.best_top1 = std::stod(meta(m, "best_top1", path));
    s.epoch_loss_sum = std::stod(meta(m, "epoch_loss_sum", path));
    s.epoch_correct = std::stoll(meta(m, "epoch_correct", path));
    s.epoch_images = std::stoll(meta(m, "epoch_images", path));
  } catch (const std::logic_error& e) {
    QAT_FAIL("checkpoint ", path, ": malformed progress metadata (", e.what(), ")");
  }
  const auto gens = model_generators(model);
  for (size_t i = 0; i < gens.size(); ++i)
    gens[i]->set_state(parse_state(meta(m, "generator" + std::to_string(i), path), path));
  return s;
}

}  // namespace qat::apps
