#pragma once
// ONNX export of the frozen integer model in the QDQ form (docs/onnx.md):
// float ops (Conv, Gemm, MaxPool, Relu, Flatten) between
// QuantizeLinear/DequantizeLinear pairs that carry qat's grids:
//   activations  Q -> DQ per tensor (uint8 or int8, the grid's zero point)
//   weights      int8 initializer (O, I, KH, KW) -> DQ per channel (axis 0)
//   biases       float initializers: qat's int32 bias and its fraction, times
//                s_x s_w[c] (an int32 bias + DQ would drop the fraction)
// BN is folded as in qat's freeze (the export starts from its IntegerModel).
// Grids of fewer than 8 bits stay in 8-bit containers: a Clip to the grid's
// range before each QuantizeLinear (opset 13 has no INT4 type; ONNX 1.12, the
// library that writes the file, knows none). The file is written with the
// ONNX library's protobuf classes and checked with its checker.
#include <string>

#include "quant/integer/integer_model.h"

namespace qat::apps {

enum class OnnxProfile {
  standard,  // any qat grid: uint8 or int8 activations with their zero points
  tensorrt,  // TensorRT's explicit quantization: int8, zero points 0, 8 bits
};

struct OnnxExportOptions {
  OnnxProfile profile = OnnxProfile::standard;
  int64_t image_size = 224;  // the input's height and width (fixed in the graph)
  // Biases as int32 + DequantizeLinear (the pattern ONNX Runtime runs on its
  // integer kernels) instead of float biases carrying qat's bias fraction
  // (the same results as qat's integer model, but run in float).
  bool int32_bias = false;
  std::string producer = "qat";
};

// Builds, checks (onnx::checker) and writes `path`. Throws naming the layer
// for what the QDQ form cannot express: LSQ+ fractional zero points, and
// under the tensorrt profile any grid that is not int8 with zero point 0.
void export_onnx(const quant::IntegerModel& model, const OnnxExportOptions& opt, const std::string& path);

}  // namespace qat::apps
