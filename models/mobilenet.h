#pragma once
// MobileNetV2 (Sandler et al.) as a graph model (layers/graph.h), in
// torchvision's layout and parameter names (features.0.0.weight,
// features.2.conv.1.0.weight, classifier.1.weight), width multiplier and
// channel rounding as torchvision's (_make_divisible to 8):
//   features.0     conv 3x3 (stride 2) - BN - ReLU6 to 32 w channels
//   features.1-17  inverted residuals (t, c, n, s) = (1,16,1,1) (6,24,2,2)
//                  (6,32,3,2) (6,64,4,2) (6,96,3,1) (6,160,3,2) (6,320,1,1)
//   features.18    conv 1x1 - BN - ReLU6 to 1280 max(1, w) channels
//   then global average pooling, dropout 0.2, linear.
// An inverted residual: 1x1 expansion to t in channels (when t > 1) - BN -
// ReLU6, depthwise 3x3 (stride s) - BN - ReLU6, 1x1 projection - BN, plus
// the input where the stride is 1 and the channels are kept.
// Stem `small` (32 px inputs, as the CIFAR variants do): features.0 and the
// first 24-channel stage at stride 1, so the network halves the input three
// times instead of five.
#include <cstdint>
#include <memory>
#include <string>

#include "layers/graph.h"
#include "models/resnet.h"

namespace qat {

std::shared_ptr<Graph> mobilenet_v2(int64_t num_classes, double width_mult, ResNetStem stem, uint64_t seed);

// One inverted residual named `prefix` ("features.2") on node `input`;
// returns its output node.
std::string inverted_residual(Graph& g, const std::string& prefix, const std::string& input, int64_t in, int64_t out,
                              int64_t stride, int64_t expand_ratio, Generator& gen);

// torchvision's _make_divisible: v rounded to a multiple of `divisor`, not
// below 90% of v.
int64_t make_divisible(double v, int64_t divisor = 8);

}  // namespace qat
