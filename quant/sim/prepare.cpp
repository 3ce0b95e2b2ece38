#include "quant/sim/prepare.h"

#include "layers/graph.h"
#include "quant/sim/avg_pool_on_grid.h"
#include "quant/sim/prepare_detail.h"
#include "quant/sim/qat_modules.h"

namespace qat::quant {

using namespace prepare_detail;

namespace {

template <class T>
std::shared_ptr<T> child_as(const std::vector<std::pair<std::string, ModulePtr>>& ch, size_t i) {
  return i < ch.size() ? std::dynamic_pointer_cast<T>(ch[i].second) : nullptr;
}

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

struct Rewriter {
  const Backend& backend;
  const QConfig& q;
  PrepareReport report;
  std::vector<std::pair<Module*, std::string>> qat_layers;  // in forward order

  bool allowed(Pattern p) const { return backend.patterns.count(p) > 0; }

  QuantizerConfig weight_cfg(const std::string& layer) const { return weight_config(backend, q, layer); }

  // Rewrites the children of `m` (named `prefix`), then recurses into them.
  void rewrite(Module& m, const std::string& prefix) {
    auto ch = m.children();  // a copy: we replace entries as we go
    for (size_t i = 0; i < ch.size(); ++i) {
      const std::string name = join(prefix, ch[i].first);
      if (auto conv = child_as<Conv2d>(ch, i)) {
        auto bn = child_as<BatchNorm2d>(ch, i + 1);
        const size_t act = i + (bn ? 2 : 1);
        const bool relu_after = child_as<ReLU>(ch, act) != nullptr, relu6_after = child_as<ReLU6>(ch, act) != nullptr;
        Pattern p;
        size_t used;
        if (bn && relu_after && allowed(Pattern::conv_bn_relu)) p = Pattern::conv_bn_relu, used = 3;
        else if (bn && relu6_after && allowed(Pattern::conv_bn_relu6)) p = Pattern::conv_bn_relu6, used = 3;
        else if (bn && allowed(Pattern::conv_bn)) p = Pattern::conv_bn, used = 2;
        else if (!bn && relu_after && allowed(Pattern::conv_relu)) p = Pattern::conv_relu, used = 2;
        else if (!bn && relu6_after && allowed(Pattern::conv_relu6)) p = Pattern::conv_relu6, used = 2;
        else if (allowed(Pattern::conv)) p = Pattern::conv, used = 1;
        else {
          report.float_layers.push_back(name);
          continue;
        }
        const bool has_bn = p == Pattern::conv_bn || p == Pattern::conv_bn_relu || p == Pattern::conv_bn_relu6;
        const bool has_relu = p == Pattern::conv_relu || p == Pattern::conv_bn_relu;
        auto qc = std::make_shared<QatConv2d>(*conv, has_bn ? bn : nullptr, has_relu, weight_cfg(name));
        qc->relu6 = p == Pattern::conv_relu6 || p == Pattern::conv_bn_relu6;
        replace(m, ch, i, used, qc);
        add_layer(qc.get(), name, p, qc->weight_fake_quant->config().spec);
        i += used - 1;
      } else if (auto lin = child_as<Linear>(ch, i)) {
        const bool relu_after = child_as<ReLU>(ch, i + 1) != nullptr;
        Pattern p;
        size_t used;
        if (relu_after && allowed(Pattern::linear_relu)) p = Pattern::linear_relu, used = 2;
        else if (allowed(Pattern::linear)) p = Pattern::linear, used = 1;
        else {
          report.float_layers.push_back(name);
          continue;
        }
        auto ql = std::make_shared<QatLinear>(*lin, p == Pattern::linear_relu, weight_cfg(name));
        replace(m, ch, i, used, ql);
        add_layer(ql.get(), name, p, ql->weight_fake_quant->config().spec);
        i += used - 1;
      } else if (std::dynamic_pointer_cast<AdaptiveAvgPool2d>(ch[i].second)) {
        avgpools.emplace_back(&m, ch[i].first, qat_layers.size());
      } else {
        rewrite(*ch[i].second, name);
      }
    }
  }

  void replace(Module& m, const std::vector<std::pair<std::string, ModulePtr>>& ch, size_t i, size_t used,
               ModulePtr block) {
    m.replace_child(ch[i].first, std::move(block));
    for (size_t k = 1; k < used; ++k) m.replace_child(ch[i + k].first, std::make_shared<Identity>());
  }

  void add_layer(Module* layer, const std::string& name, Pattern p, const QuantSpec& w) {
    qat_layers.emplace_back(layer, name);
    report.layers.push_back({name, pattern_name(p), w, std::nullopt, std::nullopt});
  }

  // (parent, child name, number of QAT layers before it)
  std::vector<std::tuple<Module*, std::string, size_t>> avgpools;
};

template <class F>
void with_qat_layer(Module* m, F&& f) {
  if (auto* c = dynamic_cast<QatConv2d*>(m)) f(*c);
  else if (auto* l = dynamic_cast<QatLinear*>(m)) f(*l);
}

}  // namespace

namespace prepare_detail {

QuantizerConfig weight_config(const Backend& b, const QConfig& q, const std::string& layer) {
  return {weight_spec(b, q, layer), q.method, q.ste, q.averaging_constant, true, q.observer};
}

std::shared_ptr<FakeQuantizer> activation_quantizer(const Backend& b, const QConfig& q, const std::string& layer) {
  return make_fake_quantizer(
      QuantizerConfig{activation_spec(b, q, layer), q.method, q.ste, q.averaging_constant, false,
                      q.activation_observer ? q.activation_observer : q.observer},
      1);
}

std::shared_ptr<FakeQuantizer> input_quantizer(const Backend& b, const QConfig& q, const std::string& layer) {
  // The network input is data (normalised pixels, negative too), not a
  // learned post-ReLU activation: plain LSQ (no offset) would clip its
  // negative half on an unsigned grid, so it gets an affine observer.
  QConfig input_q = q;
  if (input_q.method == QuantMethod::lsq) input_q.method = QuantMethod::moving_average;
  auto in = activation_quantizer(b, input_q, layer);
  QuantizerConfig in_cfg = in->config();
  if (!in_cfg.spec.is_signed && in_cfg.spec.formula == ScaleFormula::power_of_two) {
    // Power-of-two scales have zero point 0, so an unsigned grid would
    // clip every negative input; the input gets the signed grid.
    in_cfg.spec.is_signed = true;
    in = make_fake_quantizer(in_cfg, 1);
  }
  return in;
}

// Note [activation overrides]
// A layer's override (QConfig::overrides) sets the bits of its weights and of
// the activation it reads: the network input for the first layer, else the
// output of the quantized layer before it, whose output quantizer therefore
// takes the consumer's activation bits. "First and last layer at 8 bits" is
// then {weight_bits: 8, activation_bits: 8} on both, as in the LSQ paper:
// each of those layers multiplies 8-bit operands.
//
// An override naming no quantized layer would silently do nothing.
void check_overrides(const QConfig& q, const PrepareReport& report) {
  std::string names;
  for (const auto& l : report.layers) names += (names.empty() ? "" : ", ") + l.name;
  for (const auto& [layer, bits] : q.overrides) {
    bool found = false;
    for (const auto& l : report.layers) found = found || l.name == layer;
    QAT_CHECK(found, "quant.overrides.", layer, ": names no quantized layer (quantized layers: ", names, ")");
  }
}

}  // namespace prepare_detail

PrepareReport prepare(Module& model, const Backend& backend, const QConfig& qconfig) {
  if (auto* graph = dynamic_cast<Graph*>(&model)) return prepare_graph(*graph, backend, qconfig);
  Rewriter rw{backend, qconfig, {}, {}, {}};
  rw.rewrite(model, "");
  QAT_CHECK(!rw.qat_layers.empty(), "prepare: backend '", backend.name,
            "' quantizes none of the model's layers (patterns it lists do not occur)");
  check_overrides(qconfig, rw.report);
  std::vector<std::shared_ptr<FakeQuantizer>> outputs(rw.qat_layers.size());
  for (size_t k = 0; k < rw.qat_layers.size(); ++k) {
    Module* layer = rw.qat_layers[k].first;
    const std::string& name = rw.qat_layers[k].second;  // (not a structured binding: the lambda uses it)
    PreparedLayer& info = rw.report.layers[k];
    with_qat_layer(layer, [&](auto& l) {
      if (k == 0) {
        l.set_input_quantizer(input_quantizer(backend, qconfig, name));
        info.input = l.input_fake_quant->config().spec;
      }
      if (k + 1 < rw.qat_layers.size()) {
        // Note [activation overrides]: the activation a layer reads is set
        // by its own override, so this output follows the next layer's.
        outputs[k] = activation_quantizer(backend, qconfig, rw.qat_layers[k + 1].second);
        l.set_output_quantizer(outputs[k]);
        info.output = outputs[k]->config().spec;
      }
    });
  }
  for (auto& [parent, child, before] : rw.avgpools) {
    if (before == 0 || !outputs[before - 1]) continue;  // float input: nothing to share
    ModulePtr pool;
    for (auto& [n, c] : parent->children())
      if (n == child) pool = c;
    auto seq = std::make_shared<AvgPoolOnGrid>(pool, std::make_shared<SharedFakeQuantizer>(outputs[before - 1]));
    parent->replace_child(child, seq);
  }
  return rw.report;
}

std::string PrepareReport::to_string() const {
  std::string s = "prepared for quantization-aware training:\n";
  for (const auto& l : layers) {
    s += "  " + l.name + ": " + l.pattern + ", weights " + l.weight.describe();
    if (l.input) s += ", input " + l.input->describe();
    s += l.output ? ", output " + l.output->describe() : std::string(", float output");
    s += "\n";
  }
  for (const auto& a : adds) s += "  " + a.name + ": " + a.pattern + ", output " + a.output.describe() + "\n";
  for (const auto& f : float_layers) s += "  " + f + ": left in float (pattern not in the backend)\n";
  return s;
}

std::vector<FakeQuantizer*> fake_quantizers(Module& model) {
  std::vector<FakeQuantizer*> out;
  for (auto& [n, m] : model.named_modules())
    if (auto* f = dynamic_cast<FakeQuantizer*>(m)) out.push_back(f);
  return out;
}

void disable_observers(Module& model) {
  for (FakeQuantizer* f : fake_quantizers(model)) f->set_observer_enabled(false);
}

void freeze_bn_stats(Module& model) {
  for (auto& [n, m] : model.named_modules())
    if (auto* c = dynamic_cast<QatConv2d*>(m)) c->freeze_bn_stats();
}

}  // namespace qat::quant
