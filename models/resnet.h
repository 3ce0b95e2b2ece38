#pragma once
// ResNets as graph models (layers/graph.h, Note [graph model]), in
// torchvision's layout and parameter names (conv1, bn1, layer1.0.conv1,
// layer2.0.downsample.0, ..., fc), so that PyTorch loads a qat checkpoint
// by name:
//   resnet18   4 stages of 2 basic blocks, 64/128/256/512 channels. Stem
//              `imagenet`: conv 7x7 stride 2, max pool 3x3 stride 2 (224 and
//              128 px inputs); `small`: conv 3x3 stride 1, no max pool
//              (32 px inputs, as the CIFAR variants do).
//   resnet20   He et al.'s CIFAR ResNet: conv 3x3 to 16 channels, 3 stages of
//              3 basic blocks, 16/32/64 channels, global average pooling, fc.
//              Where a block changes the shape, its shortcut is a 1x1
//              convolution and BN (the paper's option B, torchvision's
//              downsample), not zero padding.
// A basic block: conv3x3 (stride s) - BN - ReLU - conv3x3 - BN, plus the
// shortcut, then ReLU. Convolutions without bias; PyTorch's default
// initialisation (layers/layers.h).
#include <cstdint>
#include <memory>
#include <string>

#include "core/enum_names.h"
#include "layers/graph.h"

namespace qat {

enum class ResNetStem { imagenet, small };
constexpr auto enum_names(ResNetStem) {
  return std::to_array<EnumName<ResNetStem>>({{ResNetStem::imagenet, "imagenet"}, {ResNetStem::small, "small"}});
}

std::shared_ptr<Graph> resnet18(int64_t num_classes, ResNetStem stem, uint64_t seed);
std::shared_ptr<Graph> resnet20(int64_t num_classes, uint64_t seed);

// One basic block named `prefix` ("layer1.0") on node `input` with `in`
// channels; returns its output node.
std::string basic_block(Graph& g, const std::string& prefix, const std::string& input, int64_t in, int64_t planes,
                        int64_t stride, Generator& gen);

}  // namespace qat
