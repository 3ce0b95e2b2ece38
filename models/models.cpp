#include "models/models.h"

#include "core/ops.h"
#include "models/mobilenet.h"
#include "models/resnet.h"

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

namespace {

// The registry, one row per model: names, sizes and kinds are read from here only.
struct ModelEntry {
  const char* name;
  int64_t min_input;  // least height and width (AlexNet's convolutions and pools need 63)
  bool graph;         // a Graph (layers/graph.h) rather than a chain
  bool takes_stem;    // model.stem applies
  ModulePtr (*make)(int64_t num_classes, uint64_t seed, const ModelOptions& options);
};

const ModelEntry kModels[] = {
    {"alexnet", kAlexNetMinInput, false, false,
     [](int64_t c, uint64_t s, const ModelOptions&) -> ModulePtr { return std::make_shared<AlexNet>(c, false, s); }},
    {"alexnet_bn", kAlexNetMinInput, false, false,
     [](int64_t c, uint64_t s, const ModelOptions&) -> ModulePtr { return std::make_shared<AlexNet>(c, true, s); }},
    {"small_cnn", 1, false, false,
     [](int64_t c, uint64_t s, const ModelOptions&) -> ModulePtr { return std::make_shared<SmallCNN>(3, c, s); }},
    // (the stem's two halvings and three stages' leave 1 x 1)
    {"resnet18", 32, true, true,
     [](int64_t c, uint64_t s, const ModelOptions& o) -> ModulePtr { return resnet18(c, o.stem, s); }},
    {"resnet20", 8, true, false,  // (two halvings)
     [](int64_t c, uint64_t s, const ModelOptions&) -> ModulePtr { return resnet20(c, s); }},
    {"mobilenet_v2", 32, true, true,
     [](int64_t c, uint64_t s, const ModelOptions& o) -> ModulePtr { return mobilenet_v2(c, 1.0, o.stem, s); }},
};

const ModelEntry* find_model(const std::string& name) {
  for (const ModelEntry& e : kModels)
    if (name == e.name) return &e;
  return nullptr;
}

}  // namespace

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const ModelEntry& e : kModels) names.push_back(e.name);
  return names;
}

int64_t model_min_input_size(const std::string& name) {
  const ModelEntry* e = find_model(name);
  QAT_CHECK(e != nullptr, "model_min_input_size: unknown model '", name, "'");
  return e->min_input;
}

bool model_is_graph(const std::string& name) {
  const ModelEntry* e = find_model(name);
  return e && e->graph;
}

bool model_takes_stem(const std::string& name) {
  const ModelEntry* e = find_model(name);
  return e && e->takes_stem;
}

ModulePtr make_model(const std::string& name, int64_t num_classes, uint64_t seed, const ModelOptions& options) {
  const ModelEntry* e = find_model(name);
  if (!e) {
    std::string known;
    for (auto& n : model_names()) known += (known.empty() ? "" : ", ") + n;
    QAT_FAIL("make_model: unknown model '", name, "' (known: ", known, ")");
  }
  QAT_CHECK(options.stem == ResNetStem::imagenet || e->takes_stem, "make_model: ", name,
            " has no stem choice (model.stem applies to resnet18 and mobilenet_v2)");
  return e->make(num_classes, seed, options);
}

}  // namespace qat
