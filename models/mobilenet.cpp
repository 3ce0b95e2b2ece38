#include "models/mobilenet.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "layers/layers.h"

namespace qat {

namespace {

// conv (k x k, `groups`) - BN (- ReLU6) as torchvision's Conv2dNormActivation:
// nodes prefix.0, prefix.1 (, prefix.2).
std::string conv_bn_act(Graph& g, const std::string& prefix, const std::string& input, int64_t in, int64_t out,
                        int64_t k, int64_t stride, int64_t groups, bool act, Generator& gen) {
  std::string h = g.add(prefix + ".0", std::make_shared<Conv2d>(Conv2dOptions{in, out, k, stride, k / 2, 1, groups, false}, gen),
                        input);
  h = g.add(prefix + ".1", std::make_shared<BatchNorm2d>(out), h);
  return act ? g.add(prefix + ".2", std::make_shared<ReLU6>(), h) : h;
}

}  // namespace

int64_t make_divisible(double v, int64_t divisor) {
  int64_t r = std::max<int64_t>(divisor, static_cast<int64_t>(v + divisor / 2.0) / divisor * divisor);
  if (static_cast<double>(r) < 0.9 * v) r += divisor;
  return r;
}

std::string inverted_residual(Graph& g, const std::string& prefix, const std::string& input, int64_t in, int64_t out,
                              int64_t stride, int64_t expand_ratio, Generator& gen) {
  const int64_t hidden = static_cast<int64_t>(std::llround(static_cast<double>(in * expand_ratio)));
  const std::string c = prefix + ".conv.";
  std::string h = input;
  int i = 0;
  if (expand_ratio != 1) h = conv_bn_act(g, c + std::to_string(i++), h, in, hidden, 1, 1, 1, true, gen);
  h = conv_bn_act(g, c + std::to_string(i++), h, hidden, hidden, 3, stride, hidden, true, gen);
  h = g.add(c + std::to_string(i++), std::make_shared<Conv2d>(Conv2dOptions{hidden, out, 1, 1, 0, 1, 1, false}, gen), h);
  h = g.add(c + std::to_string(i), std::make_shared<BatchNorm2d>(out), h);
  if (stride == 1 && in == out) h = g.add_op(prefix + ".add", GraphOp::add, {input, h});
  return h;
}

std::shared_ptr<Graph> mobilenet_v2(int64_t num_classes, double width_mult, ResNetStem stem, uint64_t seed) {
  QAT_CHECK(num_classes >= 1, "mobilenet_v2: num_classes must be >= 1, got ", num_classes);
  QAT_CHECK(width_mult > 0 && width_mult <= 4, "mobilenet_v2: width multiplier must be in (0, 4], got ", width_mult);
  Generator gen(seed);
  auto g = std::make_shared<Graph>();
  auto dropout_gen = std::make_shared<Generator>(seed ^ 0x5eedd20f0f5eedULL);
  const bool small = stem == ResNetStem::small;
  int64_t in = make_divisible(32 * width_mult);
  const int64_t last = make_divisible(1280 * std::max(1.0, width_mult));
  std::string h = conv_bn_act(*g, "features.0", Graph::kInput, 3, in, 3, small ? 1 : 2, 1, true, gen);
  struct Stage {
    int64_t t, c, n, s;
  };
  const Stage stages[] = {{1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 3, 2}, {6, 64, 4, 2},
                          {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
  int index = 1;
  for (const Stage& st : stages) {
    const int64_t out = make_divisible(static_cast<double>(st.c) * width_mult);
    const int64_t first_stride = small && st.c == 24 ? 1 : st.s;
    for (int64_t b = 0; b < st.n; ++b) {
      h = inverted_residual(*g, "features." + std::to_string(index++), h, in, out, b == 0 ? first_stride : 1, st.t,
                            gen);
      in = out;
    }
  }
  h = conv_bn_act(*g, "features." + std::to_string(index), h, in, last, 1, 1, 1, true, gen);
  h = g->add("avgpool", std::make_shared<AdaptiveAvgPool2d>(1, 1), h);
  h = g->add("flatten", std::make_shared<Flatten>(), h);
  h = g->add("classifier.0", std::make_shared<Dropout>(0.2f, dropout_gen), h);
  g->set_output(g->add("classifier.1", std::make_shared<Linear>(last, num_classes, gen), h));
  g->check();
  return g;
}

}  // namespace qat
