#include "layers/layers.h"

#include <cmath>

#include "core/ops.h"

namespace qat {

namespace {
// PyTorch's default for conv/linear: kaiming_uniform(a=sqrt(5)) for the weight
// reduces to U(-1/sqrt(fan_in), 1/sqrt(fan_in)); the bias uses the same bound.
Tensor fan_in_uniform(const Shape& shape, int64_t fan_in, Generator& gen) {
  const float bound = 1.f / std::sqrt(static_cast<float>(fan_in));
  return Tensor::uniform(shape, gen, -bound, bound);
}
}  // namespace

Conv2d::Conv2d(const Conv2dOptions& o, Generator& gen) : opt_(o) {
  QAT_CHECK(o.in_channels > 0 && o.out_channels > 0 && o.kernel > 0 && o.groups > 0 &&
                o.in_channels % o.groups == 0 && o.out_channels % o.groups == 0,
            "Conv2d: invalid channels ", o.in_channels, "->", o.out_channels, " kernel ", o.kernel, " groups ",
            o.groups);
  const int64_t fan_in = o.in_channels / o.groups * o.kernel * o.kernel;
  weight = register_parameter("weight", fan_in_uniform({o.out_channels, o.in_channels / o.groups, o.kernel, o.kernel},
                                                       fan_in, gen));
  if (o.bias) bias = register_parameter("bias", fan_in_uniform({o.out_channels}, fan_in, gen));
}

Conv2dParams Conv2d::params() const {
  return {opt_.stride, opt_.stride, opt_.padding, opt_.padding, opt_.dilation, opt_.dilation, opt_.groups};
}

Tensor Conv2d::forward(const Tensor& x) { return conv2d(x, weight, bias, params()); }

std::string Conv2d::describe() const {
  return detail::cat(opt_.in_channels, "->", opt_.out_channels, ", k=", opt_.kernel, ", s=", opt_.stride,
                     ", p=", opt_.padding, opt_.dilation != 1 ? detail::cat(", d=", opt_.dilation) : "",
                     opt_.groups != 1 ? detail::cat(", g=", opt_.groups) : "", opt_.bias ? "" : ", no bias");
}

Linear::Linear(int64_t in, int64_t out, Generator& gen, bool has_bias) : in_features(in), out_features(out) {
  QAT_CHECK(in > 0 && out > 0, "Linear: invalid features ", in, "->", out);
  weight = register_parameter("weight", fan_in_uniform({out, in}, in, gen));
  if (has_bias) bias = register_parameter("bias", fan_in_uniform({out}, in, gen));
}

Tensor Linear::forward(const Tensor& x) { return linear(x, weight, bias); }

std::string Linear::describe() const { return detail::cat(in_features, "->", out_features); }

BatchNorm2d::BatchNorm2d(int64_t c, float eps_, float momentum_) : channels(c), eps(eps_), momentum(momentum_) {
  QAT_CHECK(c > 0, "BatchNorm2d: invalid channel count ", c);
  weight = register_parameter("weight", Tensor::ones({c}));
  bias = register_parameter("bias", Tensor::zeros({c}));
  running_mean = register_buffer("running_mean", Tensor::zeros({c}));
  running_var = register_buffer("running_var", Tensor::ones({c}));
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  QAT_CHECK(x.dim() == 4, "BatchNorm2d: expected input (N,C,H,W), got ", x.sizes());
  return batch_norm(x, weight, bias, running_mean, running_var, is_training(), momentum, eps);
}

std::string BatchNorm2d::describe() const { return detail::cat(channels, ", eps=", eps, ", momentum=", momentum); }

Tensor ReLU::forward(const Tensor& x) { return relu(x); }

Tensor ReLU6::forward(const Tensor& x) { return relu6(x); }

Tensor Hardswish::forward(const Tensor& x) { return hardswish(x); }

MaxPool2d::MaxPool2d(int64_t kernel, int64_t stride, int64_t padding)
    : params{kernel, kernel, stride, stride, padding, padding} {}

Tensor MaxPool2d::forward(const Tensor& x) { return max_pool2d(x, params); }

std::string MaxPool2d::describe() const {
  return detail::cat("k=", params.kernel_h, ", s=", params.stride_h, ", p=", params.pad_h);
}

AvgPool2d::AvgPool2d(int64_t kernel, int64_t stride, int64_t padding, bool include_pad)
    : params{kernel, kernel, stride, stride, padding, padding}, count_include_pad(include_pad) {}

Tensor AvgPool2d::forward(const Tensor& x) { return avg_pool2d(x, params, count_include_pad); }

std::string AvgPool2d::describe() const {
  return detail::cat("k=", params.kernel_h, ", s=", params.stride_h, ", p=", params.pad_h,
                     count_include_pad ? "" : ", padding not counted");
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) { return adaptive_avg_pool2d(x, out_h, out_w); }

std::string AdaptiveAvgPool2d::describe() const { return detail::cat(out_h, "x", out_w); }

Dropout::Dropout(float p_, std::shared_ptr<Generator> gen) : p(p_), gen_(std::move(gen)) {
  QAT_CHECK(p >= 0.f && p <= 1.f, "Dropout: probability must be in [0, 1], got ", p);
  QAT_CHECK(gen_ != nullptr, "Dropout: needs a generator");
}

Tensor Dropout::forward(const Tensor& x) { return dropout(x, p, is_training(), *gen_); }

std::string Dropout::describe() const { return detail::cat("p=", p); }

Tensor Flatten::forward(const Tensor& x) { return flatten(x, 1); }

Sequential::Sequential(std::vector<ModulePtr> layers) {
  for (auto& l : layers) push_back(std::move(l));
}

void Sequential::push_back(ModulePtr m) { register_module(std::to_string(children().size()), std::move(m)); }

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& [name, m] : children()) h = m->forward(h);
  return h;
}

}  // namespace qat
