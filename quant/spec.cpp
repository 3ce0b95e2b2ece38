#include "quant/spec.h"

#include "core/error.h"

namespace qat::quant {

int32_t QuantSpec::qmin() const {
  if (!is_signed) return 0;
  const int32_t full = -(1 << (bits - 1));
  return narrow_range ? full + 1 : full;
}

int32_t QuantSpec::qmax() const { return is_signed ? (1 << (bits - 1)) - 1 : (1 << bits) - 1; }

void QuantSpec::validate(const std::string& where) const {
  QAT_CHECK(bits >= 2 && bits <= 8, where, ": bits must be in 2..8, got ", bits);
  QAT_CHECK(!narrow_range || is_signed, where, ": narrow range needs a signed type");
  QAT_CHECK(formula != ScaleFormula::power_of_two || symmetric, where,
            ": power_of_two scales need symmetric quantization (zero point 0)");
  QAT_CHECK(formula != ScaleFormula::amax_over_qmax || (symmetric && is_signed), where,
            ": amax_over_qmax scales need signed symmetric quantization (zero point 0)");
  QAT_CHECK(min_scale >= 0.f, where, ": min_scale must be >= 0, got ", min_scale);
  QAT_CHECK(axis >= 0, where, ": channel axis must be >= 0, got ", axis);
}

std::string QuantSpec::describe() const {
  std::string s = (is_signed ? "int" : "uint") + std::to_string(bits);
  s += symmetric ? " sym" : " affine";
  s += per_channel ? " per-channel(" + std::to_string(axis) + ")" : " per-tensor";
  if (narrow_range) s += " narrow";
  if (formula == ScaleFormula::power_of_two) s += " pow2";
  if (formula == ScaleFormula::amax_over_qmax) s += " amax/qmax";
  return s;
}

const char* method_name(QuantMethod m) { return enum_name(m); }

}  // namespace qat::quant
