#pragma once
// A weight's int8 integers as INT8 training's GEMMs take them (int8_ops.h):
// what the weight quantizer writes (quant/sim/weight_codes.h:
// observe_and_quantize_codes) and what the ops recover from a fake-quantized
// weight.
#include <cstdint>
#include <memory>
#include <vector>

namespace qat::quant {

struct QuantCodes {
  int64_t rows = 0, cols = 0;     // rows: x.size(0) (output channels), cols: the rest
  std::unique_ptr<int8_t[]> q;    // (rows, cols), row-major
  std::vector<int64_t> rowsum;    // sum of each row's q
  std::vector<float> scale;       // each row's scale (per-tensor: the one scale, repeated)
  // Flat indices whose gradient the clipped STE stops (nearbyint(w / s)
  // outside [qmin, qmax]; rare: at most the extremes of a min/max range).
  // Empty under the plain STE.
  std::vector<int64_t> clipped;
  // Keeps the buffer when the size is unchanged (a weight's codes are
  // rebuilt every step: a fresh 57 MB allocation page-faults each time).
  void resize(int64_t rows, int64_t cols);
};

}  // namespace qat::quant
