#include "quant/backend.h"

#include "core/error.h"

namespace qat::quant {

const char* pattern_name(Pattern p) { return enum_name(p); }

namespace {

int bits_for(const QConfig& q, const std::string& layer, bool weight) {
  auto it = q.overrides.find(layer);
  const int over = it == q.overrides.end() ? 0 : (weight ? it->second.weight_bits : it->second.activation_bits);
  return over > 0 ? over : (weight ? q.weight_bits : q.activation_bits);
}

bool resolve(const std::optional<bool>& asked, const std::optional<bool>& allowed, bool fallback,
             const std::string& backend, const std::string& layer, const char* what) {
  if (asked && allowed && *asked != *allowed)
    QAT_FAIL("prepare: layer ", layer, ": backend '", backend, "' requires ", what, " = ",
             *allowed ? "true" : "false", ", but the quant config asks for ", *asked ? "true" : "false");
  return asked ? *asked : (allowed ? *allowed : fallback);
}

QuantSpec make_spec(const Backend& b, const TensorRule& r, const QConfig& q, const std::string& layer, bool weight) {
  const char* kind = weight ? "weights" : "activations";
  QuantSpec s;
  s.bits = bits_for(q, layer, weight);
  QAT_CHECK(s.bits >= r.min_bits && s.bits <= r.max_bits, "prepare: layer ", layer, ": ", s.bits, "-bit ", kind,
            " are outside backend '", b.name, "' range [", r.min_bits, ", ", r.max_bits, "] bits");
  s.is_signed = r.is_signed;
  s.narrow_range = r.narrow_range;
  s.min_scale = b.min_scale;
  if (weight) {
    s.per_channel = resolve(q.weight_per_channel, r.per_channel, true, b.name, layer, "weights.per_channel");
    s.axis = 0;
  }
  if (q.formula && r.formula && *q.formula != *r.formula)
    QAT_FAIL("prepare: layer ", layer, ": backend '", b.name, "' requires ", kind, " scales by ", enum_name(*r.formula));
  s.formula = q.formula ? *q.formula : (r.formula ? *r.formula : ScaleFormula::minmax);
  // Power-of-two and amax/qmax scales come with a zero point of 0, so "auto" means symmetric then.
  const std::string sym = std::string(kind) + ".symmetric";
  s.symmetric = resolve(weight ? q.weight_symmetric : q.activation_symmetric, r.symmetric,
                        weight || s.formula != ScaleFormula::minmax, b.name, layer, sym.c_str());
  s.validate("prepare: layer " + layer + " (" + kind + ")");
  return s;
}

}  // namespace

QuantSpec weight_spec(const Backend& b, const QConfig& q, const std::string& layer) {
  return make_spec(b, b.weight, q, layer, true);
}

QuantSpec activation_spec(const Backend& b, const QConfig& q, const std::string& layer) {
  return make_spec(b, b.activation, q, layer, false);
}

}  // namespace qat::quant
