#include "models/resnet.h"

#include "core/error.h"
#include "layers/layers.h"

namespace qat {

namespace {

ModulePtr conv(int64_t in, int64_t out, int64_t k, int64_t stride, Generator& gen) {
  return std::make_shared<Conv2d>(Conv2dOptions{in, out, k, stride, k / 2, 1, 1, false}, gen);
}

// conv - BN (- ReLU) as nodes `prefix``conv`, `prefix``bn` (and `relu`).
std::string conv_bn(Graph& g, const std::string& conv_name, const std::string& bn_name, const std::string& input,
                    int64_t in, int64_t out, int64_t k, int64_t stride, Generator& gen) {
  const std::string c = g.add(conv_name, conv(in, out, k, stride, gen), input);
  return g.add(bn_name, std::make_shared<BatchNorm2d>(out), c);
}

// Stages of basic blocks after the stem: `blocks` per stage, the first
// block of every stage but the first halving the size. Returns the last node.
std::string stages(Graph& g, std::string h, int64_t in, const std::vector<int64_t>& widths, int blocks,
                   Generator& gen) {
  for (size_t s = 0; s < widths.size(); ++s)
    for (int b = 0; b < blocks; ++b) {
      const int64_t stride = s > 0 && b == 0 ? 2 : 1;
      h = basic_block(g, "layer" + std::to_string(s + 1) + "." + std::to_string(b), h, in, widths[s], stride, gen);
      in = widths[s];
    }
  return h;
}

// Global average pooling, flatten and the classifier.
void head(Graph& g, const std::string& h, int64_t features, int64_t num_classes, Generator& gen) {
  const std::string p = g.add("avgpool", std::make_shared<AdaptiveAvgPool2d>(1, 1), h);
  const std::string f = g.add("flatten", std::make_shared<Flatten>(), p);
  g.set_output(g.add("fc", std::make_shared<Linear>(features, num_classes, gen), f));
}

}  // namespace

std::string basic_block(Graph& g, const std::string& prefix, const std::string& input, int64_t in, int64_t planes,
                        int64_t stride, Generator& gen) {
  const std::string p = prefix + ".";
  std::string h = conv_bn(g, p + "conv1", p + "bn1", input, in, planes, 3, stride, gen);
  h = g.add(p + "relu", std::make_shared<ReLU>(), h);
  h = conv_bn(g, p + "conv2", p + "bn2", h, planes, planes, 3, 1, gen);
  std::string shortcut = input;
  if (stride != 1 || in != planes)
    shortcut = conv_bn(g, p + "downsample.0", p + "downsample.1", input, in, planes, 1, stride, gen);
  const std::string sum = g.add_op(p + "add", GraphOp::add, {h, shortcut});
  return g.add(p + "relu_1", std::make_shared<ReLU>(), sum);
}

std::shared_ptr<Graph> resnet18(int64_t num_classes, ResNetStem stem, uint64_t seed) {
  QAT_CHECK(num_classes >= 1, "resnet18: num_classes must be >= 1, got ", num_classes);
  Generator gen(seed);
  auto g = std::make_shared<Graph>();
  const bool imagenet = stem == ResNetStem::imagenet;
  std::string h = conv_bn(*g, "conv1", "bn1", Graph::kInput, 3, 64, imagenet ? 7 : 3, imagenet ? 2 : 1, gen);
  h = g->add("relu", std::make_shared<ReLU>(), h);
  if (imagenet) h = g->add("maxpool", std::make_shared<MaxPool2d>(3, 2, 1), h);
  h = stages(*g, h, 64, {64, 128, 256, 512}, 2, gen);
  head(*g, h, 512, num_classes, gen);
  g->check();
  return g;
}

std::shared_ptr<Graph> resnet20(int64_t num_classes, uint64_t seed) {
  QAT_CHECK(num_classes >= 1, "resnet20: num_classes must be >= 1, got ", num_classes);
  Generator gen(seed);
  auto g = std::make_shared<Graph>();
  std::string h = conv_bn(*g, "conv1", "bn1", Graph::kInput, 3, 16, 3, 1, gen);
  h = g->add("relu", std::make_shared<ReLU>(), h);
  h = stages(*g, h, 16, {16, 32, 64}, 3, gen);
  head(*g, h, 64, num_classes, gen);
  g->check();
  return g;
}

}  // namespace qat
