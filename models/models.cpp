#include "models/models.h"

#include "core/ops.h"

namespace qat {

namespace {

// conv (+ BN) + ReLU appended to `seq`, as torchvision's layout.
void conv_block(Sequential& seq, int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad, bool bn,
                Generator& gen) {
  seq.push_back(std::make_shared<Conv2d>(Conv2dOptions{in, out, k, stride, pad, 1, 1, !bn}, gen));
  if (bn) seq.push_back(std::make_shared<BatchNorm2d>(out));
  seq.push_back(std::make_shared<ReLU>());
}

}  // namespace

AlexNet::AlexNet(int64_t num_classes, bool batch_norm, uint64_t seed)
    : batch_norm_(batch_norm), dropout_gen_(std::make_shared<Generator>(seed ^ 0x5eedd20f0f5eedULL)) {
  QAT_CHECK(num_classes >= 1, "AlexNet: num_classes must be >= 1, got ", num_classes);
  Generator gen(seed);
  auto features = register_module("features", std::make_shared<Sequential>());
  conv_block(*features, 3, 64, 11, 4, 2, batch_norm, gen);
  features->push_back(std::make_shared<MaxPool2d>(3, 2));
  conv_block(*features, 64, 192, 5, 1, 2, batch_norm, gen);
  features->push_back(std::make_shared<MaxPool2d>(3, 2));
  conv_block(*features, 192, 384, 3, 1, 1, batch_norm, gen);
  conv_block(*features, 384, 256, 3, 1, 1, batch_norm, gen);
  conv_block(*features, 256, 256, 3, 1, 1, batch_norm, gen);
  features->push_back(std::make_shared<MaxPool2d>(3, 2));
  register_module("avgpool", std::make_shared<AdaptiveAvgPool2d>(6, 6));
  register_module("flatten", std::make_shared<Flatten>());  // torch.flatten in torchvision's forward
  auto classifier = register_module("classifier", std::make_shared<Sequential>());
  classifier->push_back(std::make_shared<Dropout>(0.5f, dropout_gen_));
  classifier->push_back(std::make_shared<Linear>(256 * 6 * 6, 4096, gen));
  classifier->push_back(std::make_shared<ReLU>());
  classifier->push_back(std::make_shared<Dropout>(0.5f, dropout_gen_));
  classifier->push_back(std::make_shared<Linear>(4096, 4096, gen));
  classifier->push_back(std::make_shared<ReLU>());
  classifier->push_back(std::make_shared<Linear>(4096, num_classes, gen));
}

namespace {
constexpr int64_t kAlexNetMinInput = 63;
}

Tensor AlexNet::forward(const Tensor& x) {
  QAT_CHECK(x.dim() == 4 && x.size(1) == 3 && x.size(2) >= kAlexNetMinInput && x.size(3) >= kAlexNetMinInput,
            type_name(), ": expected input (N,3,H,W) with H,W >= ", kAlexNetMinInput, ", got ", x.sizes());
  Tensor h = x;
  for (auto& [name, m] : children()) h = m->forward(h);
  return h;
}

SmallCNN::SmallCNN(int64_t in_channels, int64_t num_classes, uint64_t seed) {
  Generator gen(seed);
  auto features = register_module("features", std::make_shared<Sequential>());
  conv_block(*features, in_channels, 8, 3, 1, 1, true, gen);
  features->push_back(std::make_shared<MaxPool2d>(2, 2));
  conv_block(*features, 8, 16, 3, 1, 1, true, gen);
  features->push_back(std::make_shared<AdaptiveAvgPool2d>(1, 1));
  features->push_back(std::make_shared<Flatten>());
  register_module("fc", std::make_shared<Linear>(16, num_classes, gen));
}

Tensor SmallCNN::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& [name, m] : children()) h = m->forward(h);
  return h;
}

std::vector<std::string> model_names() { return {"alexnet", "alexnet_bn", "small_cnn"}; }

int64_t model_min_input_size(const std::string& name) {
  if (name == "alexnet" || name == "alexnet_bn") return kAlexNetMinInput;
  if (name == "small_cnn") return 1;
  QAT_FAIL("model_min_input_size: unknown model '", name, "'");
}

ModulePtr make_model(const std::string& name, int64_t num_classes, uint64_t seed) {
  if (name == "alexnet") return std::make_shared<AlexNet>(num_classes, false, seed);
  if (name == "alexnet_bn") return std::make_shared<AlexNet>(num_classes, true, seed);
  if (name == "small_cnn") return std::make_shared<SmallCNN>(3, num_classes, seed);
  std::string known;
  for (auto& n : model_names()) known += (known.empty() ? "" : ", ") + n;
  QAT_FAIL("make_model: unknown model '", name, "' (known: ", known, ")");
}

}  // namespace qat
