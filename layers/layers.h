#pragma once
// The standard layers, with PyTorch's default initialisation:
// Conv2d/Linear weights kaiming_uniform(a=sqrt(5)) = U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
// biases U(-1/sqrt(fan_in), 1/sqrt(fan_in)); BatchNorm weight 1, bias 0,
// running mean 0, running var 1.
#include <memory>

#include "core/generator.h"
#include "core/ops/conv2d.h"
#include "core/ops/pool.h"
#include "layers/module.h"

namespace qat {

struct Conv2dOptions {
  int64_t in_channels, out_channels, kernel;
  int64_t stride = 1, padding = 0, dilation = 1, groups = 1;
  bool bias = true;
};

// x: (N, in, H, W) -> (N, out, OH, OW). Parameters: weight (out, in/groups, k, k), bias (out).
class Conv2d : public Module {
 public:
  Conv2d(const Conv2dOptions& o, Generator& gen);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Conv2d"; }
  std::string describe() const override;
  const Conv2dOptions& options() const { return opt_; }
  Conv2dParams params() const;
  Tensor weight, bias;

 private:
  Conv2dOptions opt_;
};

// x: (N, in) -> (N, out). Parameters: weight (out, in), bias (out).
class Linear : public Module {
 public:
  Linear(int64_t in, int64_t out, Generator& gen, bool bias = true);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Linear"; }
  std::string describe() const override;
  int64_t in_features, out_features;
  Tensor weight, bias;
};

// x: (N, C, H, W). Parameters weight, bias (C); buffers running_mean, running_var (C).
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t channels, float eps = 1e-5f, float momentum = 0.1f);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "BatchNorm2d"; }
  std::string describe() const override;
  int64_t channels;
  float eps, momentum;
  Tensor weight, bias, running_mean, running_var;
};

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ReLU"; }
};

// min(max(x, 0), 6) (MobileNetV2's activation).
class ReLU6 : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ReLU6"; }
};

// x relu6(x + 3) / 6 (MobileNetV3's activation).
class Hardswish : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Hardswish"; }
};

class MaxPool2d : public Module {
 public:
  MaxPool2d(int64_t kernel, int64_t stride, int64_t padding = 0);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "MaxPool2d"; }
  std::string describe() const override;
  Pool2dParams params;
};

// Average over each window; count_include_pad: the padding's zeros count in
// the mean (PyTorch's default) or not (ONNX AveragePool's default).
class AvgPool2d : public Module {
 public:
  AvgPool2d(int64_t kernel, int64_t stride, int64_t padding = 0, bool count_include_pad = true);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "AvgPool2d"; }
  std::string describe() const override;
  Pool2dParams params;
  bool count_include_pad;
};

class AdaptiveAvgPool2d : public Module {
 public:
  AdaptiveAvgPool2d(int64_t out_h, int64_t out_w) : out_h(out_h), out_w(out_w) {}
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "AdaptiveAvgPool2d"; }
  std::string describe() const override;
  int64_t out_h, out_w;
};

// Draws its masks from a shared generator (the model's), so a run is
// reproducible from the seed and resumable from the generator's state.
class Dropout : public Module {
 public:
  Dropout(float p, std::shared_ptr<Generator> gen);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Dropout"; }
  std::string describe() const override;
  const std::shared_ptr<Generator>& generator() const { return gen_; }
  float p;

 private:
  std::shared_ptr<Generator> gen_;
};

// (N, d1, d2, ...) -> (N, d1*d2*...)
class Flatten : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Flatten"; }
};

// Children named "0", "1", ... applied in order.
class Sequential : public Module {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<ModulePtr> layers);
  void push_back(ModulePtr m);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Sequential"; }
  size_t size() const { return children().size(); }
};

}  // namespace qat

namespace qat {
// Passes its input through; stands in for modules folded into a neighbour
// (keeps the Sequential's indices, and so the state-dict names, stable).
class Identity : public Module {
 public:
  Tensor forward(const Tensor& x) override { return x; }
  std::string type_name() const override { return "Identity"; }
};
}  // namespace qat
