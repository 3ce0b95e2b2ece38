// Optimizers on cuda parameters (optim/sgd.cu, optim/adamw.cu) against the
// same optimizers on CPU copies, and Module::to. The element rules are shared
// (optim/math.h) and the CPU goldens cover them; on a GPU each side's
// compiler may fuse a * b + c differently, so the two agree to a few float
// roundings per step, not bit for bit.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>

#include "core/generator.h"
#include "layers/layers.h"
#include "optim/adamw.h"
#include "optim/sgd.h"
#include "tests/cuda_test_util.h"

using namespace qat;

namespace {

// Runs `steps` updates with the same gradients on a CPU parameter and on its
// copy on cuda; returns the largest difference relative to max(1, |p|).
template <class MakeOptimizer>
double largest_step_difference(MakeOptimizer make, int steps) {
  Generator gen(7);
  Tensor cpu = Tensor::randn({3, 257}, gen);  // not a multiple of any block size
  Tensor dev = cpu.to(Device::cuda);
  cpu.set_requires_grad(true);
  dev.set_requires_grad(true);
  std::unique_ptr<Optimizer> on_cpu = make(cpu), on_dev = make(dev);
  for (int s = 0; s < steps; ++s) {
    const Tensor g = Tensor::randn(cpu.sizes(), gen);
    cpu.impl_ptr()->grad = g.clone().impl_shared();
    dev.impl_ptr()->grad = g.to(Device::cuda).impl_shared();
    on_cpu->step();
    on_dev->step();
  }
  const std::vector<float> a = cpu.to_vector(), b = dev.to_vector();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]) / std::max(1.0, std::abs(double(a[i]))));
  return worst;
}

std::vector<ParamGroup> one_group(const Tensor& p, double lr, double wd) { return {{"default", {p}, lr, wd}}; }

}  // namespace

TEST_CASE("SGD and AdamW update cuda parameters as they update CPU ones", "[cuda][optim]") {
  if (!testing::cuda_device_or_skip()) return;
  // Each step adds a few roundings of |p| (~1) to the difference; 10 steps.
  const double bound = 64 * 1.2e-7;
  for (const bool nesterov : {false, true}) {
    INFO("SGD momentum 0.9, nesterov " << nesterov);
    CHECK(largest_step_difference(
              [&](const Tensor& p) {
                return std::make_unique<SGD>(one_group(p, 0.1, 5e-4), SGDOptions{0.9, 0.0, nesterov});
              },
              10) <= bound);
  }
  INFO("SGD without momentum, dampening");
  CHECK(largest_step_difference([](const Tensor& p) { return std::make_unique<SGD>(one_group(p, 0.1, 1e-2)); }, 10) <=
        bound);
  CHECK(largest_step_difference(
            [](const Tensor& p) { return std::make_unique<SGD>(one_group(p, 0.05, 0.0), SGDOptions{0.5, 0.3}); },
            10) <= bound);
  INFO("AdamW");
  CHECK(largest_step_difference([](const Tensor& p) { return std::make_unique<AdamW>(one_group(p, 1e-2, 1e-2)); },
                                10) <= bound);
}

TEST_CASE("an optimizer's state of cuda parameters lives on cuda and round-trips through a state dict",
          "[cuda][optim]") {
  if (!testing::cuda_device_or_skip()) return;
  Generator gen(3);
  Tensor p = Tensor::randn({64}, gen).to(Device::cuda);
  p.set_requires_grad(true);
  SGD sgd(one_group(p, 0.1, 0.0), SGDOptions{0.9});
  p.impl_ptr()->grad = Tensor::randn({64}, gen).to(Device::cuda).impl_shared();
  sgd.step();
  const TensorMap state = sgd.state_dict();
  const Tensor& momentum = state.at("optim.group0.param0.momentum");
  CHECK(momentum.device() == Device::cuda);
  // Loaded from host copies (as from a checkpoint), the buffers go back to cuda.
  TensorMap on_host;
  for (const auto& [k, t] : state) on_host[k] = t.to(Device::cpu);
  SGD again(one_group(p, 0.1, 0.0), SGDOptions{0.9});
  again.load_state_dict(on_host);
  const Tensor loaded = again.state_dict().at("optim.group0.param0.momentum");  // (state_dict() is a temporary)
  CHECK(loaded.device() == Device::cuda);
  CHECK(loaded.to_vector() == momentum.to_vector());
}

TEST_CASE("Module::to moves parameters and buffers in place, keeping every handle", "[cuda][module]") {
  Generator gen(1);
  Linear fc(4, 3, gen);
  BatchNorm2d bn(3);
  const Tensor weight = fc.weight;  // a handle held outside the module's registry (the layer's own, an optimizer's)
  const std::vector<float> before = weight.to_vector();
  fc.to(Device::cpu);  // already there: nothing moves
  CHECK(weight.device() == Device::cpu);
  if (!testing::cuda_device_or_skip()) {
    // No GPU: refused naming it, and nothing moved.
    const std::string why = cuda::built() ? cuda::device_info().reason : "built without CUDA";
    CHECK_THROWS_WITH(fc.to(Device::cuda), Catch::Matchers::Contains("a cuda tensor (shape [3, 4], float32)") &&
                                               Catch::Matchers::Contains(why));
    CHECK(weight.device() == Device::cpu);
    CHECK(weight.to_vector() == before);
    return;
  }
  fc.to(Device::cuda);
  bn.to(Device::cuda);
  CHECK(weight.device() == Device::cuda);
  CHECK(weight.requires_grad());
  CHECK(weight.to_vector() == before);
  for (const auto& [name, t] : bn.named_buffers()) {
    INFO(name);
    CHECK(t.device() == Device::cuda);
  }
  fc.to(Device::cpu);
  CHECK(weight.device() == Device::cpu);
  CHECK(weight.to_vector() == before);
}
