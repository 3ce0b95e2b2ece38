// End-to-end learning on a tiny synthetic problem, and checkpoint round trips.
#include <filesystem>
#include <fstream>

#include "tests/test_util.h"

#include "models/checkpoint.h"
#include "models/models.h"
#include "optim/sgd.h"

using namespace qat;
using Catch::Matchers::Contains;

namespace {

// 4 classes of 8x8 images: a bright square in one of four quadrants, plus noise.
void make_batch(Generator& g, int64_t n, Tensor& x, Tensor& y) {
  x = Tensor::randn({n, 3, 8, 8}, g, 0.f, 0.3f);
  std::vector<int32_t> labels(n);
  float* px = x.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    const int32_t c = static_cast<int32_t>(g.below(4));
    labels[i] = c;
    const int64_t oy = (c / 2) * 4, ox = (c % 2) * 4;
    for (int64_t ch = 0; ch < 3; ++ch)
      for (int64_t yy = 0; yy < 4; ++yy)
        for (int64_t xx = 0; xx < 4; ++xx) px[((i * 3 + ch) * 8 + oy + yy) * 8 + ox + xx] += 1.f;
  }
  y = Tensor::from_vector_i32(labels, {n});
}

float train_steps(Module& model, SGD& sgd, Generator& data, int steps) {
  float loss_v = 0;
  for (int s = 0; s < steps; ++s) {
    Tensor x, y;
    make_batch(data, 16, x, y);
    sgd.zero_grad();
    Tensor loss = cross_entropy(model.forward(x), y);
    loss.backward();
    sgd.step();
    loss_v = loss.item();
  }
  return loss_v;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("qat_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

}  // namespace

TEST_CASE("small CNN learns a synthetic 4-class problem", "[training]") {
  auto model = make_model("small_cnn", 4, 0);
  SGD sgd(make_param_groups(model->named_parameters(), 0.05, 1e-4, true), SGDOptions{0.9});
  Generator data(123);
  train_steps(*model, sgd, data, 300);
  // Mean loss over fresh batches: chance is ln(4) = 1.386.
  double total = 0;
  for (int i = 0; i < 5; ++i) {
    Tensor x, y;
    make_batch(data, 16, x, y);
    model->eval();
    NoGradGuard ng;
    total += cross_entropy(model->forward(x), y).item();
  }
  REQUIRE(total / 5 < 0.1);
}

TEST_CASE("checkpoint round trip resumes training bit-identically", "[training][checkpoint]") {
  const std::string path = temp_path("ckpt.safetensors");
  auto a = make_model("small_cnn", 4, 0);
  SGD sa(make_param_groups(a->named_parameters(), 0.05, 1e-4, true), SGDOptions{0.9});
  Generator data(7);
  train_steps(*a, sa, data, 5);
  save_checkpoint(path, *a, &sa, {{"epoch", "3"}});
  const Generator::State data_state = data.state();
  train_steps(*a, sa, data, 5);

  auto b = make_model("small_cnn", 4, 99);  // different init: everything comes from the file
  SGD sb(make_param_groups(b->named_parameters(), 0.05, 1e-4, true), SGDOptions{0.9});
  Metadata meta = load_checkpoint(path, *b, &sb);
  REQUIRE(meta.at("epoch") == "3");
  Generator data_b(0);
  data_b.set_state(data_state);
  train_steps(*b, sb, data_b, 5);
  for (auto& [name, t] : a->state_dict()) {
    INFO(name);
    REQUIRE(b->state_dict().at(name).to_vector() == t.to_vector());
  }
  std::filesystem::remove(path);
}

TEST_CASE("bad checkpoints give errors naming the file and the tensor", "[training][checkpoint]") {
  const std::string path = temp_path("bad.safetensors");
  auto a = make_model("small_cnn", 4, 0);
  save_checkpoint(path, *a, nullptr);
  SECTION("model of another shape") {
    auto b = make_model("small_cnn", 5, 0);
    REQUIRE_THROWS_WITH(load_checkpoint(path, *b, nullptr), Contains(path) && Contains("fc.weight"));
  }
  SECTION("truncated file") {
    const auto size = std::filesystem::file_size(path);
    std::filesystem::resize_file(path, size - 100);
    REQUIRE_THROWS_WITH(load_checkpoint(path, *a, nullptr), Contains(path));
  }
  SECTION("wrong dtype") {
    TensorMap sd;
    for (auto& [n, t] : a->state_dict()) sd["model." + n] = t;
    sd["model.fc.bias"] = Tensor::zeros({4}, DType::i32);
    save_safetensors(path, sd);
    REQUIRE_THROWS_WITH(load_checkpoint(path, *a, nullptr), Contains("fc.bias") && Contains("int32"));
  }
  SECTION("missing file") {
    REQUIRE_THROWS_WITH(load_checkpoint(path + ".nope", *a, nullptr), Contains(path + ".nope"));
  }
  std::filesystem::remove(path);
}
