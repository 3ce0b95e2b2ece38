#pragma once
// QuantSpec: how one tensor is quantized (docs/math/fake_quant.md §1-2).
//   signed b-bit:   [-2^(b-1), 2^(b-1)-1]; narrow range drops -2^(b-1)
//   unsigned b-bit: [0, 2^b - 1]
// Scale formulas: minmax ("Google"/TFLite/PyTorch), power_of_two ("Cambricon")
// and amax_over_qmax (TensorRT: symmetric s = max|x| / qmax, int8: / 127).
#include <cstdint>
#include <string>

#include "core/enum_names.h"

namespace qat::quant {

enum class ScaleFormula { minmax, power_of_two, amax_over_qmax };
constexpr auto enum_names(ScaleFormula) {
  return std::to_array<EnumName<ScaleFormula>>(
      {{ScaleFormula::minmax, "minmax"},
       {ScaleFormula::power_of_two, "power_of_two"},
       {ScaleFormula::amax_over_qmax, "amax_over_qmax"}});
}
enum class SteKind { clipped, plain };  // clipped: zero gradient outside [qmin, qmax] (PyTorch)
constexpr auto enum_names(SteKind) {
  return std::to_array<EnumName<SteKind>>({{SteKind::clipped, "clipped"}, {SteKind::plain, "plain"}});
}
// How a quantizer gets its qparams: observed ranges (minmax, moving_average)
// or learned steps (lsq, lsq_plus).
enum class QuantMethod { minmax, moving_average, lsq, lsq_plus };
constexpr auto enum_names(QuantMethod) {
  return std::to_array<EnumName<QuantMethod>>({{QuantMethod::minmax, "minmax"},
                                               {QuantMethod::moving_average, "moving_average"},
                                               {QuantMethod::lsq, "lsq"},
                                               {QuantMethod::lsq_plus, "lsq_plus"}});
}
const char* method_name(QuantMethod m);

struct QuantSpec {
  int bits = 8;               // 2..8
  bool is_signed = true;
  bool symmetric = true;      // z = 0 (signed) / affine with a zero point
  bool per_channel = false;
  int64_t axis = 0;           // channel axis for per-channel
  bool narrow_range = false;  // signed only: qmin = -(2^(b-1) - 1)
  ScaleFormula formula = ScaleFormula::minmax;
  float min_scale = 0.f;      // scales are clamped up to this (e.g. 2^-12); 0: only > 0 by construction

  int32_t qmin() const;
  int32_t qmax() const;
  // Throws qat::Error naming `where` when the spec is inconsistent
  // (bits out of 2..8, narrow range on unsigned, power_of_two with affine...).
  void validate(const std::string& where) const;
  std::string describe() const;  // e.g. "int8 sym per-channel(0) narrow"
};

}  // namespace qat::quant
