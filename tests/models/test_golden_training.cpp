// Golden training run: whole SGD training steps of small_cnn against PyTorch.
// tests/golden/gen_training.py (PyTorch 1.13, float32) trains the PyTorch
// equivalent of SmallCNN for 6 steps of SGD(lr 0.1, momentum 0.9, weight decay
// 1e-3 on every parameter) with cross_entropy(label_smoothing 0.1), each step
// on its own stored batch, and stores tests/golden/training_small_cnn.safetensors:
//   init.<name>, final.<name>   the state before/after (params + BN running stats)
//   batch<i>.x, batch<i>.y      the batches (targets I32)
//   loss                        [6] every step's loss
//   eval.x, eval.logits         an eval-mode forward of the trained model
// Here the same run is repeated with qat's model, loss and optimizer from the
// stored initial state, and every loss and the final state are compared.
//
// Tolerances: both sides compute in float32, but in different operation
// orders (convolution blocking, reduction order in BN statistics and in the
// weight gradients, ...). Those rounding differences (~1e-7 relative per op)
// are fed back through every step: the parameters of step k+1 carry the error
// of steps 0..k, amplified by the momentum buffer (which sums past gradients
// with weight up to 1/(1-0.9) = 10) and by BN's division by the batch std. So
// the final state is compared with abs 1e-4 + rel 1e-3, not the single-op 1e-4
// of test_golden_ops.cpp; the losses (scalars, well conditioned) with rel 1e-4.
// A real bug (a wrong formula, a missing weight decay term, a running-stat
// update off by one step) shows up as errors of 1e-2 and more.
#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>
#include <string>

#include "core/ops.h"
#include "core/safetensors.h"
#include "models/models.h"
#include "optim/sgd.h"

using namespace qat;

namespace {

constexpr int kSteps = 6;
constexpr int64_t kBatch = 8;
constexpr int64_t kClasses = 5;
constexpr double kLr = 0.1, kMomentum = 0.9, kWeightDecay = 1e-3;
constexpr float kLabelSmoothing = 0.1f;

constexpr double kLossRel = 1e-4;
constexpr double kStateAbs = 1e-4, kStateRel = 1e-3;

const SafetensorsFile& golden() {
  static const SafetensorsFile f =
      load_safetensors(std::string(QAT_SOURCE_DIR) + "/tests/golden/training_small_cnn.safetensors");
  return f;
}

// The tensors stored under `prefix`, with the prefix removed.
TensorMap state_with_prefix(const std::string& prefix) {
  TensorMap out;
  for (const auto& [name, t] : golden().tensors)
    if (name.rfind(prefix, 0) == 0) out[name.substr(prefix.size())] = t;
  return out;
}

// Elementwise |a - b| <= atol + rtol*|b| (b: PyTorch). CHECKs (so every
// tensor is reported), naming the tensor, the count of bad elements, the
// worst one and the max abs difference.
void check_close(const Tensor& a, const Tensor& b, double atol, double rtol, const std::string& what) {
  INFO(what << ": ours " << shape_str(a.sizes()) << " vs torch " << shape_str(b.sizes()));
  REQUIRE(a.sizes() == b.sizes());
  const std::vector<float> va = a.to_vector(), vb = b.to_vector();
  double max_abs = 0, worst_excess = 0;
  int64_t worst = -1, bad = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    const double d = std::abs(static_cast<double>(va[i]) - vb[i]);
    const double excess = std::isnan(d) ? 1e30 : d - (atol + rtol * std::abs(vb[i]));
    max_abs = std::max(max_abs, std::isnan(d) ? 1e30 : d);
    if (excess > 0) {
      ++bad;
      if (worst < 0 || excess > worst_excess) worst = static_cast<int64_t>(i), worst_excess = excess;
    }
  }
  std::ostringstream os;
  os << what << ": max |diff| " << max_abs;
  if (bad) os << "; " << bad << "/" << va.size() << " out of tolerance, worst at " << worst << ": " << va[worst]
              << " vs torch " << vb[worst];
  INFO(os.str());
  CHECK(bad == 0);
}

// Builds small_cnn from the stored initial state and trains it for kSteps
// steps on the stored batches; returns the model and every step's loss.
ModulePtr train_like_torch(std::vector<float>& losses) {
  auto model = make_model("small_cnn", kClasses, 0);
  model->load_state_dict(state_with_prefix("init."));  // strict: keys must line up
  model->train();
  SGD sgd(make_param_groups(model->named_parameters(), kLr, kWeightDecay, false), SGDOptions{kMomentum});
  losses.clear();
  for (int i = 0; i < kSteps; ++i) {
    const std::string b = "batch" + std::to_string(i);
    const Tensor x = expect_tensor(golden(), "training_small_cnn", b + ".x", DType::f32, {kBatch, 3, 12, 12});
    const Tensor y = expect_tensor(golden(), "training_small_cnn", b + ".y", DType::i32, {kBatch});
    sgd.zero_grad();
    Tensor loss = cross_entropy(model->forward(x), y, kLabelSmoothing);
    loss.backward();
    sgd.step();
    losses.push_back(loss.item());
  }
  return model;
}

}  // namespace

TEST_CASE("small_cnn: 6 SGD training steps match PyTorch (losses and final state)", "[golden][training]") {
  std::vector<float> losses;
  ModulePtr model = train_like_torch(losses);

  const std::vector<float> want = expect_tensor(golden(), "training_small_cnn", "loss", DType::f32, {kSteps}).to_vector();
  for (int i = 0; i < kSteps; ++i) {
    INFO("step " << i << ": loss " << losses[i] << " vs torch " << want[i]);
    CHECK(std::abs(static_cast<double>(losses[i]) - want[i]) <= kLossRel * std::abs(want[i]));
  }

  const TensorMap ours = model->state_dict();
  const TensorMap final_state = state_with_prefix("final.");
  REQUIRE(ours.size() == final_state.size());
  for (const auto& [name, want_t] : final_state) {
    auto it = ours.find(name);
    INFO("final state tensor " << name);
    REQUIRE(it != ours.end());
    check_close(it->second, want_t, kStateAbs, kStateRel, "final." + name);
  }
}

TEST_CASE("small_cnn: eval-mode forward after training matches PyTorch", "[golden][training]") {
  std::vector<float> losses;
  ModulePtr model = train_like_torch(losses);
  model->eval();
  NoGradGuard no_grad;
  const Tensor x = expect_tensor(golden(), "training_small_cnn", "eval.x", DType::f32, {kBatch, 3, 12, 12});
  const Tensor want = expect_tensor(golden(), "training_small_cnn", "eval.logits", DType::f32, {kBatch, kClasses});
  check_close(model->forward(x), want, kStateAbs, kStateRel, "eval.logits");
}
