#include "quant/int8_training/quant_codes.h"

namespace qat::quant {

void QuantCodes::resize(int64_t r, int64_t c) {
  if (!q || r * c != rows * cols) q.reset(new int8_t[static_cast<size_t>(r * c)]);  // uninitialised: all written
  rows = r, cols = c;
  rowsum.resize(static_cast<size_t>(r));
  scale.resize(static_cast<size_t>(r));
  clipped.clear();
}

}  // namespace qat::quant
