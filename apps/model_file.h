#pragma once
// A network described in YAML (model.file), built as a Graph.
//
// Note [model file]
//   name: resnet20                 # what checkpoints record as the model
//   blocks:                        # optional: sub-graphs used by nodes below
//     basic:
//       params: [channels]         # what an instance's args give; "$channels" in a value
//       nodes:                     # node names are relative to the instance's name
//         - {name: conv1, op: conv2d, in: $channels, out: $channels, kernel: 3, padding: 1, bias: false}
//         - ...
//         - {name: add, op: add, inputs: [bn2, input]}   # "input": the block's input
//       output: relu_1             # optional: the block's last node otherwise
//   nodes:
//     - {name: conv1, op: conv2d, in: 3, out: 16, kernel: 3, padding: 1, bias: false}
//     - {name: "layer1.{i}", block: basic, repeat: 3, args: {channels: 16}}   # layer1.0 .. layer1.2
//     - {name: fc, op: linear, in: 64, out: $num_classes}
//   output: fc                     # optional: the last node otherwise
// A node reads the node above it unless it names `input:` (one) or
// `inputs:` (add: two, concat: two or more); it reads only nodes above it,
// so a file cannot describe a cycle. A block instance reads like a node and
// is read as its output node; `repeat: N` chains N instances named by `{i}`
// from `from:` (default 0). `$num_classes` is model.num_classes everywhere.
// Ops and their keys (defaults as PyTorch's):
//   conv2d in out kernel [stride 1] [padding 0] [dilation 1] [groups 1] [bias true]
//   linear in out [bias true]        batch_norm channels [eps 1e-5] [momentum 0.1]
//   relu relu6 hardswish flatten identity     dropout [p 0.5]
//   max_pool kernel [stride kernel] [padding 0]     adaptive_avg_pool [size 1]
//   add concat                        (inputs)
// Weights are drawn from the seed in the order the nodes are listed, as the
// built-in models draw theirs, so a file that lists a built-in's layers in
// its order builds the same network (tests/apps/test_model_file.cpp). Every
// error names the file, the line and the node.
#include <cstdint>
#include <memory>
#include <string>

#include "layers/graph.h"

namespace qat::apps {

struct ModelConfig;

// The configured network: the model file's, the ONNX model's (its weights;
// the seed unused) or the built-in model.name's.
ModulePtr make_configured_model(const ModelConfig& model, uint64_t seed);

// Builds the configured network and runs one image of image_size x
// image_size through it in eval mode, so that shapes that do not fit fail
// before training, naming the node and its line (or ONNX node), and checks
// that it gives model.num_classes logits.
void dry_run_model(const ModelConfig& model, int64_t image_size);
// The same on `g`, the network built from `model` (left in eval mode).
void dry_run(const ModelConfig& model, Module& g, int64_t image_size);

// The graph of model file `path`; $num_classes is `num_classes`.
std::shared_ptr<Graph> load_model_file(const std::string& path, int64_t num_classes, uint64_t seed);

// The file's `name:` (read without building the network).
std::string model_file_name(const std::string& path);

}  // namespace qat::apps
