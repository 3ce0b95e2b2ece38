#pragma once
// Float ONNX models (opset 11 to 17) read into a Graph with their weights
// (model.onnx), so that a network trained elsewhere is fine-tuned or
// quantized here.
//
// Note [onnx import]
// ONNX's own protobuf classes read the file; the nodes are taken in the
// file's order (ONNX requires it topological) and mapped:
//   Conv -> Conv2d (square kernels, equal strides, symmetric pads, groups),
//   BatchNormalization -> BatchNorm2d (running statistics, eps; ONNX's
//   momentum m is PyTorch's 1 - m), Relu -> ReLU, Clip with bounds 0 and 6
//   (inputs from initializers or Constant nodes) -> ReLU6, Add of two
//   computed tensors -> add, Concat on axis 1 -> concat, MaxPool,
//   AveragePool, GlobalAveragePool, Flatten (axis 1), Reshape to (N, -1)
//   -> Flatten, Gemm and MatMul (+ Add of a constant bias) -> Linear;
//   Dropout and Identity pass their input on.
// Any other op, or one of these with attributes qat's layers do not have
// (asymmetric padding, ceil_mode, a Clip to other bounds), is refused,
// naming the node, its op and what is wrong; so is a file that does not
// hold together: integer weights, a kernel_shape other than the weight's,
// an output written twice, no opset for the default domain. A module is named by its
// weight's initializer where that reads as a state-dict name
// ("layer1.0.conv1.weight" -> layer1.0.conv1, as torch.onnx.export writes
// an unfolded model), else by the ONNX node's name with '/' and '.' made
// '_'. Eval-mode exports (BN folded into the convs' biases) and training-mode
// exports (BatchNormalization kept) both import.
#include <memory>
#include <string>

#include "layers/graph.h"

namespace qat::apps {

std::shared_ptr<Graph> import_onnx(const std::string& path);

}  // namespace qat::apps
