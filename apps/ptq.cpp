#include "apps/ptq.h"
#include "apps/model_file.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "apps/backend_config.h"
#include "apps/progress.h"
#include "core/autograd.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/ops/loss.h"
#include "core/ops/metrics.h"
#include "models/models.h"
#include "quant/convert/freeze.h"
#include "quant/sim/calibration.h"

namespace qat::apps {

namespace fs = std::filesystem;

std::vector<int64_t> balanced_indices(const data::ImageFolder& f, int64_t n, uint64_t seed) {
  Generator g(seed);
  std::vector<std::vector<int64_t>> per_class;
  for (int32_t c = 0; c < static_cast<int32_t>(f.num_classes()); ++c) {
    std::vector<int64_t> idx = f.indices_of(c);
    for (size_t i = idx.size(); i > 1; --i) std::swap(idx[i - 1], idx[g.below(i)]);
    per_class.push_back(std::move(idx));
  }
  std::vector<int64_t> out;
  for (size_t round = 0; static_cast<int64_t>(out.size()) < n; ++round) {
    bool any = false;
    for (const auto& idx : per_class)
      if (round < idx.size() && static_cast<int64_t>(out.size()) < n) out.push_back(idx[round]), any = true;
    if (!any) break;  // fewer images than asked for: all of them
  }
  std::sort(out.begin(), out.end());
  return out;
}

ImageSet load_image_set(const data::ImageFolder& f, const std::vector<int64_t>& idx, const data::TransformSpec& spec) {
  const int64_t S = spec.image_size, per = 3 * S * S, n = static_cast<int64_t>(idx.size());
  Tensor x = Tensor::empty({n, 3, S, S});
  std::vector<char> ok(idx.size(), 0);
  std::string first_error;
#pragma omp parallel for schedule(dynamic)
  for (int64_t i = 0; i < n; ++i) {
    try {
      Generator unused(0);  // the validation transform draws nothing
      if (auto img = f.load(idx[i])) {
        data::apply_transform(*img, spec, false, unused, x.data<float>() + i * per);
        ok[i] = 1;
      }
    } catch (const Error& e) {
#pragma omp critical
      if (first_error.empty()) first_error = e.what();
    }
  }
  QAT_CHECK(first_error.empty(), first_error);
  std::vector<int32_t> labels;
  int64_t kept = 0;  // skipped bad images (data.on_bad_image: skip) close the gaps
  for (int64_t i = 0; i < n; ++i) {
    if (!ok[i]) continue;
    if (kept != i) std::copy_n(x.data<float>() + i * per, per, x.data<float>() + kept * per);
    labels.push_back(f.label(idx[i]));
    ++kept;
  }
  QAT_CHECK(kept > 0, "none of the ", n, " images of ", f.root(), " could be read");
  return {x.narrow(0, 0, kept).contiguous(), Tensor::from_vector_i32(labels, {kept})};
}

double forward_all(Module& m, const Tensor& x, int64_t batch, const std::string& label,
                   const std::function<void()>& after_first) {
  NoGradGuard ng;
  const int64_t n = x.size(0), steps = (n + batch - 1) / batch;
  Progress progress(label, steps, 1);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t k = 0; k < steps; ++k) {
    const int64_t lo = k * batch, len = std::min(batch, n - lo);
    m.forward(x.narrow(0, lo, len).contiguous());
    if (k == 0 && after_first) after_first();
    progress.update(k + 1, lo + len);
  }
  progress.finish();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double calibration_passes(Module& m, const Tensor& x, int64_t batch) {
  quant::begin_calibration(m);
  const double ranging = forward_all(m, x, batch, "calibrate: ranges", [&] { quant::stop_observing_weights(m); });
  quant::begin_histograms(m);
  return ranging + forward_all(m, x, batch, "calibrate: histograms");
}

PtqModel prepare_for_calibration(const ExperimentConfig& cfg, const TensorMap& fp32) {
  PtqModel p{make_configured_model(cfg.model, cfg.train.seed), {}};
  p.model->load_state_dict(fp32);
  p.report = prepare_as_configured(*p.model, configured_backend(cfg), quant::calibration_qconfig(make_qconfig(cfg.quant)), cfg);
  p.model->eval();
  return p;
}

PtqModel calibrated_model(const ExperimentConfig& cfg, const TensorMap& fp32, const Tensor& calib,
                          quant::Calibrator c, const quant::CalibratorOptions& o) {
  PtqModel p = prepare_for_calibration(cfg, fp32);
  calibration_passes(*p.model, calib, cfg.train.batch_size);
  quant::apply_calibration(*p.model, quant::choose_scales(quant::calibrated_tensors(*p.model), c, o));
  return p;
}

Score score(const std::function<Tensor(const Tensor&)>& forward, const ImageSet& set, int64_t batch) {
  NoGradGuard ng;
  const int64_t n = set.images.size(0);
  int64_t correct = 0;
  double loss = 0;
  for (int64_t lo = 0; lo < n; lo += batch) {
    const int64_t len = std::min(batch, n - lo);
    const Tensor logits = forward(set.images.narrow(0, lo, len).contiguous());
    const Tensor labels = set.labels.narrow(0, lo, len).contiguous();
    correct += topk_correct(logits, labels, 1);
    loss += cross_entropy(logits, labels).item() * static_cast<double>(len);
  }
  return {static_cast<double>(correct) / static_cast<double>(n), loss / static_cast<double>(n)};
}

Score integer_score(Module& calibrated, const ImageSet& set, int64_t batch) {
  const quant::IntegerModel im = quant::freeze(calibrated);
  return score([&](const Tensor& x) { return im.forward(x); }, set, batch);
}

}  // namespace qat::apps
