#pragma once
// Model zoo and registry.
//  alexnet     torchvision layout: features (convs 64-192-384-256-256 with
//              kernels 11/5/3/3/3, ReLU, max-pools), avgpool (adaptive 6x6),
//              classifier (dropout, 9216->4096, ReLU, dropout, 4096->4096,
//              ReLU, 4096->N). Input (N,3,H,W), H,W >= 63.
//  alexnet_bn  the same with BatchNorm2d after every conv (convs without bias).
//  small_cnn   a tiny conv net for tests (conv-bn-relu x2, pool, linear).
//  resnet18    torchvision's ResNet-18, a graph model (models/resnet.h); its stem
//              by ModelOptions (model.stem: imagenet for 128 px and up, small for 32 px).
//  mobilenet_v2  torchvision's MobileNetV2 (width 1), a graph model
//              (models/mobilenet.h); model.stem as resnet18's.
//  resnet20    He et al.'s CIFAR ResNet-20, a graph model (models/resnet.h).
#include <memory>
#include <string>
#include <vector>

#include "core/generator.h"
#include "layers/layers.h"
#include "models/resnet.h"

namespace qat {

class AlexNet : public Module {
 public:
  AlexNet(int64_t num_classes, bool batch_norm, uint64_t seed);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return batch_norm_ ? "AlexNetBN" : "AlexNet"; }
  // The generator the dropout layers draw from (save/restore it to resume).
  Generator& dropout_generator() { return *dropout_gen_; }

 private:
  bool batch_norm_;
  std::shared_ptr<Generator> dropout_gen_;
};

class SmallCNN : public Module {
 public:
  SmallCNN(int64_t in_channels, int64_t num_classes, uint64_t seed);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "SmallCNN"; }
};

// Both models apply their children in registration order (so graph rewrites
// such as quant::prepare() can swap any child).

// What a model's name leaves open (model.stem).
struct ModelOptions {
  ResNetStem stem = ResNetStem::imagenet;  // resnet18 and mobilenet_v2 only (model_takes_stem)
};
// Registry: name in model_names(); weights initialised from `seed`.
ModulePtr make_model(const std::string& name, int64_t num_classes, uint64_t seed = 0, const ModelOptions& options = {});
// Whether the model is a Graph (layers/graph.h) rather than a chain.
bool model_is_graph(const std::string& name);
// Whether the model's first layers follow model.stem (imagenet | small).
bool model_takes_stem(const std::string& name);
std::vector<std::string> model_names();
// The least input height and width the model takes (AlexNet's convolutions
// and pools need 63); 1 where any size works. An unknown name is an error.
int64_t model_min_input_size(const std::string& name);

}  // namespace qat
