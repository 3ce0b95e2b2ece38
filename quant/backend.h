#pragma once
// A backend description is data, not code (docs/architecture.md, PyTorch's
// BackendConfig idea): which op patterns get quantized, and the dtypes and
// ranges the target allows. apps/ reads it from configs/backends/*.yaml;
// prepare() follows it. A pattern the backend does not list stays float.
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "quant/spec.h"

namespace qat::quant {

// conv+bn+relu6 and conv+relu6: MobileNetV2's blocks; add and add+relu: a
// residual add of two quantized tensors with one output quantizer (after
// the ReLU when one follows), as integer runtimes run it (graph models);
// concat: a concat of quantized branches with its own output quantizer
// (Note [integer concat]).
enum class Pattern {
  conv,
  conv_relu,
  conv_bn,
  conv_bn_relu,
  linear,
  linear_relu,
  conv_relu6,
  conv_bn_relu6,
  add,
  add_relu,
  concat
};
constexpr auto enum_names(Pattern) {
  return std::to_array<EnumName<Pattern>>({{Pattern::conv, "conv"},
                                           {Pattern::conv_relu, "conv+relu"},
                                           {Pattern::conv_bn, "conv+bn"},
                                           {Pattern::conv_bn_relu, "conv+bn+relu"},
                                           {Pattern::linear, "linear"},
                                           {Pattern::linear_relu, "linear+relu"},
                                           {Pattern::conv_relu6, "conv+relu6"},
                                           {Pattern::conv_bn_relu6, "conv+bn+relu6"},
                                           {Pattern::add, "add"},
                                           {Pattern::add_relu, "add+relu"},
                                           {Pattern::concat, "concat"}});
}
const char* pattern_name(Pattern p);

// What one tensor kind (weights or activations) may be on this backend.
// An unset optional means "either; the qconfig chooses (default in brackets)".
struct TensorRule {
  bool is_signed = true;
  std::optional<bool> symmetric;     // [weights: true, activations: false]
  std::optional<bool> per_channel;   // [weights: true]; activations are always per-tensor
  bool narrow_range = false;         // signed only: [-(2^(b-1)-1), 2^(b-1)-1]
  std::optional<ScaleFormula> formula;  // [minmax]
  int min_bits = 2, max_bits = 8;
};

struct Backend {
  std::string name;
  std::set<Pattern> patterns;
  TensorRule weight, activation;
  float min_scale = 0.f;  // e.g. 2^-12; 0: none
};

// What the user asks for (the YAML `quant:` section); unset values take the
// backend's choice. A request the backend does not allow is an error naming
// the layer and the constraint.
struct LayerBits {
  // 0: keep the global setting. activation_bits: the activation the layer
  // reads (Note [activation overrides], quant/sim/prepare.cpp).
  int weight_bits = 0, activation_bits = 0;
};

class Observer;  // quant/observe/observer.h
// Makes one observer for a spec and a channel count.
using ObserverFactory = std::function<std::unique_ptr<Observer>(const QuantSpec& spec, int64_t channels)>;

struct QConfig {
  QuantMethod method = QuantMethod::moving_average;
  SteKind ste = SteKind::clipped;
  float averaging_constant = 0.01f;
  int weight_bits = 8, activation_bits = 8;
  std::optional<bool> weight_symmetric, weight_per_channel, activation_symmetric;
  std::optional<ScaleFormula> formula;
  std::map<std::string, LayerBits> overrides;  // by module name, e.g. "features.0"
  // When set, every quantizer that observes uses this observer instead of
  // its method's own: all quantizers under minmax / moving_average, and the
  // network input's quantizer under lsq (prepare gives it an observer).
  // Learned quantizers (lsq, lsq_plus) have no observer and ignore it. How a
  // new Observer subclass plugs in.
  ObserverFactory observer;
  // When set, activation quantizers use this one instead (post-training
  // calibration: histograms for activations, min/max for weights).
  ObserverFactory activation_observer;
};

// The specs a layer gets; throws naming `layer` on a violated constraint.
QuantSpec weight_spec(const Backend& b, const QConfig& q, const std::string& layer);
QuantSpec activation_spec(const Backend& b, const QConfig& q, const std::string& layer);

}  // namespace qat::quant
