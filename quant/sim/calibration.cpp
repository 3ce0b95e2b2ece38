#include "quant/sim/calibration.h"

#include <map>
#include <set>

#include "core/autograd.h"

#include "core/error.h"
#include "quant/sim/prepare.h"

namespace qat::quant {

QConfig calibration_qconfig(const QConfig& base, int64_t bins) {
  QConfig q = base;
  q.method = QuantMethod::minmax;
  q.observer = nullptr;
  q.activation_observer = [bins](const QuantSpec& spec, int64_t channels) -> std::unique_ptr<Observer> {
    QAT_CHECK(channels == 1, "calibration: activations are per-tensor, got ", channels, " channels");
    return std::make_unique<HistogramObserver>(spec, Calibrator::entropy, CalibratorOptions{}, bins);
  };
  return q;
}

namespace {
HistogramObserver* histogram_observer(FakeQuantizer* f) {
  auto* q = dynamic_cast<ObserverFakeQuantizer*>(f);
  return q ? dynamic_cast<HistogramObserver*>(&q->observer()) : nullptr;
}
}  // namespace

void begin_calibration(Module& model) {
  for (FakeQuantizer* f : fake_quantizers(model)) {
    f->set_fake_quant_enabled(false);
    f->set_observer_enabled(true);
    f->set_calibrating(true);
    if (HistogramObserver* h = histogram_observer(f)) h->set_ranging(true);
  }
}

void begin_histograms(Module& model) {
  for (FakeQuantizer* f : fake_quantizers(model))
    if (HistogramObserver* h = histogram_observer(f)) h->begin_histogram();
}

void stop_observing_weights(Module& model) {
  for (FakeQuantizer* f : fake_quantizers(model))
    if (f->config().is_weight) f->set_observer_enabled(false);
}

float CalibratedTensor::observed_min() const { return observer->range().min_val.data<float>()[0]; }
float CalibratedTensor::observed_max() const { return observer->range().max_val.data<float>()[0]; }

std::vector<CalibratedTensor> calibrated_tensors(Module& model) {
  std::vector<CalibratedTensor> out;
  for (auto& [name, m] : model.named_modules()) {
    auto* q = dynamic_cast<ObserverFakeQuantizer*>(m);
    if (!q || q->config().is_weight) continue;
    out.push_back({name, q, dynamic_cast<const HistogramObserver*>(&q->observer())});
  }
  return out;
}

std::map<std::string, float> choose_scales(const std::vector<CalibratedTensor>& tensors, Calibrator c,
                                           const CalibratorOptions& o) {
  std::map<std::string, float> out;
  for (const CalibratedTensor& t : tensors) {
    QAT_CHECK(t.observer, "calibration: ", t.name, " has no histogram observer (prepare with calibration_qconfig)");
    QAT_CHECK(!t.observer->ranging(), "calibration: ", t.name,
              " has its range but no histogram yet: begin_histograms(), then forward the calibration images again");
    QAT_CHECK(!t.observer->histogram().empty(), "calibration: ", t.name,
              " saw no finite value; forward calibration images first");
    const float thr = t.observer->threshold(c, o);
    // An all-zero tensor: the smallest scale the spec allows (compute_qparams).
    out[t.name] = thr > 0 ? cache_scale(thr) : scale_floor(t.observer->spec());
  }
  return out;
}

void apply_calibration(Module& model, const std::map<std::string, float>& scales,
                       const std::map<std::string, std::pair<float, float>>& observed) {
  const std::vector<CalibratedTensor> tensors = calibrated_tensors(model);
  std::set<std::string> names;
  for (const CalibratedTensor& t : tensors) {
    names.insert(t.name);
    const auto it = scales.find(t.name);
    QAT_CHECK(it != scales.end(), "calibration: no scale for tensor ", t.name);
    float lo = 0, hi = 0;
    if (const auto o = observed.find(t.name); o != observed.end()) {
      lo = o->second.first, hi = o->second.second;
      // The observer state a checkpoint carries: the recorded range, as if observed here.
      for (auto& [buf, v] : t.quantizer->named_buffers()) {
        if (buf != "min_val" && buf != "max_val") continue;
        Tensor b = v;
        b.data<float>()[0] = buf == "min_val" ? lo : hi;
        b.bump_version();
      }
    } else if (t.observer && !t.observer->histogram().empty()) lo = t.observed_min(), hi = t.observed_max();
    else QAT_CHECK(t.quantizer->config().spec.symmetric, "calibration: ", t.name, " is affine and its observed range is unknown");
    t.quantizer->set_qparams(qparams_for_cache_scale(t.quantizer->config().spec, it->second, lo, hi));
  }
  for (const auto& [name, s] : scales)
    QAT_CHECK(names.count(name), "calibration: scale for ", name, ", which is not a calibrated tensor of the model");
  for (FakeQuantizer* f : fake_quantizers(model)) {
    f->set_calibrating(false);
    f->set_fake_quant_enabled(true);
    if (!f->config().is_weight) continue;
    const auto* o = dynamic_cast<ObserverFakeQuantizer*>(f);
    QAT_CHECK(o && o->observer().initialized(),
              "calibration: a weight quantizer saw no weights; forward at least one batch first");
    f->set_qparams(o->observer().qparams());  // the weights' max per channel
  }
}

int64_t start_from_calibration(Module& qat_model, Module& calibrated) {
  std::map<std::string, FakeQuantizer*> source;
  for (auto& [name, m] : calibrated.named_modules())
    if (auto* f = dynamic_cast<FakeQuantizer*>(m)) source[name] = f;
  std::set<std::string> weight_quantizers;
  for (auto& [name, m] : qat_model.named_modules())
    if (auto* f = dynamic_cast<FakeQuantizer*>(m); f && f->config().is_weight) weight_quantizers.insert(name + ".");
  const TensorMap from = calibrated.state_dict();
  NoGradGuard ng;
  auto ends_with = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  // params: the network's must all be there (a learned quantizer's step and
  // offset are not: start_from sets them); buffers: those that are.
  auto copy_matching = [&](const NamedTensors& into, bool params) {
    for (const auto& [name, t] : into) {
      bool in_weight_quantizer = false;
      for (const std::string& w : weight_quantizers) in_weight_quantizer = in_weight_quantizer || name.rfind(w, 0) == 0;
      if (in_weight_quantizer) continue;
      const auto it = from.find(name);
      const bool match = it != from.end() && it->second.sizes() == t.sizes() && it->second.dtype() == t.dtype();
      if (!match && params && !ends_with(name, ".step") && !ends_with(name, ".offset"))
        QAT_FAIL("start_from_calibration: the calibrated model has no tensor ", name, " of shape ", t.sizes(),
                 it == from.end() ? std::string(" (missing)") : " (it has shape " + shape_str(it->second.sizes()) + ")");
      if (!match) continue;
      Tensor dst = t;
      dst.copy_(it->second);
    }
  };
  copy_matching(qat_model.named_parameters(), true);
  copy_matching(qat_model.named_buffers(), false);
  int64_t started = 0;
  for (auto& [name, m] : qat_model.named_modules()) {
    auto* f = dynamic_cast<FakeQuantizer*>(m);
    if (!f || f->config().is_weight) continue;
    const auto it = source.find(name);
    QAT_CHECK(it != source.end(), "start_from_calibration: the calibrated model has no quantizer ", name,
              " (was it calibrated with another model or backend?)");
    f->start_from(it->second->qparams());
    ++started;
  }
  return started;
}

}  // namespace qat::quant
