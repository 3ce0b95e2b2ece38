// Golden tests: qat's core ops against PyTorch, forward and backward.
// The vectors come from tests/golden/gen_core.py (PyTorch 1.13, computed in
// float64 from float32 inputs and rounded once), stored in
// tests/golden/core_ops.safetensors as "<case>.<name>": inputs/parameters,
// the upstream gradient gy, the output y and the gradients d<name>.
// Each case runs our op on requires_grad leaves, calls y.backward(gy) and
// compares y and every gradient elementwise.
#include "tests/test_util.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "core/ops.h"
#include "core/safetensors.h"

namespace {

using qat::Tensor;

const qat::SafetensorsFile& golden() { return qat::testing::golden_file("core_ops.safetensors"); }

// Default float32 tolerance: |ours - torch| <= kAbs + kRel * |torch|.
constexpr double kAbs = 1e-4;
constexpr double kRel = 1e-4;

std::string index_str(int64_t flat, const qat::Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < idx.size(); ++i) os << (i ? "," : "") << idx[i];
  os << ")";
  return os.str();
}

// Compares `actual` with `expected` elementwise; on failure reports the case,
// the tensor, how many elements are out of tolerance, the worst index and
// both values there. Always attaches the max abs error (shown by `-s`).
void expect_close(const std::string& case_name, const std::string& what, const Tensor& actual, const Tensor& expected,
                  double atol = kAbs, double rtol = kRel) {
  const std::string where = case_name + "." + what;
  INFO(where);
  REQUIRE(expected.defined());
  if (!actual.defined()) {
    FAIL_CHECK(where << ": ours is undefined (no gradient computed?)");
    return;
  }
  if (actual.sizes() != expected.sizes()) {
    FAIL_CHECK(where << ": shape " << qat::shape_str(actual.sizes()) << " != torch "
                     << qat::shape_str(expected.sizes()));
    return;
  }
  const std::vector<float> a = actual.to_vector();
  const std::vector<float> e = expected.to_vector();
  int64_t bad = 0, worst = -1;
  double worst_excess = -1e300, max_abs = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double err = std::fabs(static_cast<double>(a[i]) - e[i]);
    const double tol = atol + rtol * std::fabs(static_cast<double>(e[i]));
    const bool ok = err <= tol;  // false for NaN
    if (!ok) ++bad;
    const double excess = std::isnan(err) ? 1e300 : err - tol;
    if (excess > worst_excess) worst_excess = excess, worst = static_cast<int64_t>(i);
    if (!(err <= max_abs)) max_abs = err;
  }
  std::ostringstream msg;
  msg << where << ": " << bad << "/" << a.size() << " out of tolerance (abs " << atol << " + rel " << rtol
      << "), max abs err " << max_abs;
  if (worst >= 0)
    msg << "; worst at " << index_str(worst, actual.sizes()) << ": ours " << a[worst] << ", torch " << e[worst];
  INFO(msg.str());
  CHECK(bad == 0);
}

// One case's tensors in the golden file.
struct Case : qat::testing::GoldenCase {
  explicit Case(std::string n) : GoldenCase(golden(), std::move(n)) {}
  Tensor leaf_if(const std::string& k) const { return has(k) ? leaf(k) : Tensor(); }
  std::vector<int64_t> ints(const std::string& k) const {
    Tensor t = get(k);
    REQUIRE(t.dtype() == qat::DType::i32);
    const int32_t* p = t.data<int32_t>();
    return std::vector<int64_t>(p, p + t.numel());
  }

  // Runs y.backward(gy) and checks y and the gradient of every named leaf.
  void check(const Tensor& y, const std::vector<std::pair<std::string, Tensor>>& leaves, double atol = kAbs,
             double rtol = kRel) const {
    expect_close(name, "y", y, get("y"), atol, rtol);
    y.backward(get("gy"));
    for (const auto& [k, t] : leaves) {
      if (!t.defined()) continue;
      expect_close(name, "d" + k, t.grad(), get("d" + k), atol, rtol);
    }
  }
};

}  // namespace

TEST_CASE("golden: conv2d forward and backward match PyTorch", "[golden]") {
  for (const char* name : {"conv_plain", "conv_s2p1", "conv_alex1", "conv_dil2", "conv_g2", "conv_dw", "conv_1x1_bias",
                           "conv_1x1_nobias", "conv_rect", "conv_nobias_s2"}) {
    const Case c{name};
    const auto v = c.ints("params");  // stride h,w; pad h,w; dilation h,w; groups
    REQUIRE(v.size() == 7);
    qat::Conv2dParams p;
    p.stride_h = v[0], p.stride_w = v[1], p.pad_h = v[2], p.pad_w = v[3], p.dil_h = v[4], p.dil_w = v[5];
    p.groups = v[6];
    Tensor x = c.leaf("x"), w = c.leaf("w"), b = c.leaf_if("b");
    CHECK(b.defined() == (std::string(name).find("nobias") == std::string::npos));
    c.check(qat::conv2d(x, w, b, p), {{"x", x}, {"w", w}, {"b", b}});
  }
}

TEST_CASE("golden: linear forward and backward match PyTorch", "[golden]") {
  for (const char* name : {"linear_bias", "linear_nobias"}) {
    const Case c{name};
    Tensor x = c.leaf("x"), w = c.leaf("w"), b = c.leaf_if("b");
    c.check(qat::linear(x, w, b), {{"x", x}, {"w", w}, {"b", b}});
  }
}

TEST_CASE("golden: batch_norm train/eval forward, backward and running stats match PyTorch", "[golden]") {
  struct BnCase {
    const char* name;
    bool training;
  };
  for (const BnCase bc : {BnCase{"bn4d_train", true}, BnCase{"bn2d_train", true}, BnCase{"bn4d_eval", false},
                          BnCase{"bn2d_eval", false}, BnCase{"bn4d_train_noaffine", true}}) {
    const Case c{bc.name};
    Tensor x = c.leaf("x"), w = c.leaf_if("w"), b = c.leaf_if("b");
    Tensor rm = c.get("running_mean").clone(), rv = c.get("running_var").clone();
    Tensor y = qat::batch_norm(x, w, b, rm, rv, bc.training, 0.1f, 1e-5f);
    // Running stats: updated in place with momentum 0.1 and the unbiased
    // variance in training; untouched in eval.
    expect_close(c.name, "running_mean (after)", rm, bc.training ? c.get("running_mean_new") : c.get("running_mean"));
    expect_close(c.name, "running_var (after)", rv, bc.training ? c.get("running_var_new") : c.get("running_var"));
    c.check(y, {{"x", x}, {"w", w}, {"b", b}});
  }
}

TEST_CASE("golden: max_pool2d and avg_pool2d forward and backward match PyTorch", "[golden]") {
  auto params = [](const Case& c) {
    const auto v = c.ints("params");  // kernel h,w; stride h,w; pad h,w
    REQUIRE(v.size() == 6);
    return qat::Pool2dParams{v[0], v[1], v[2], v[3], v[4], v[5]};
  };
  for (const char* name : {"maxpool_k3s2", "maxpool_k3s2p1", "maxpool_k2s2", "maxpool_rect"}) {
    const Case c{name};
    Tensor x = c.leaf("x");
    c.check(qat::max_pool2d(x, params(c)), {{"x", x}});
  }
  for (const char* name : {"avgpool_k3s2p1", "avgpool_k2s2", "avgpool_rect"}) {
    const Case c{name};
    Tensor x = c.leaf("x");
    c.check(qat::avg_pool2d(x, params(c)), {{"x", x}});  // count_include_pad = true, PyTorch's default
  }
}

TEST_CASE("golden: adaptive_avg_pool2d (down, non-divisible, up) matches PyTorch", "[golden]") {
  for (const char* name : {"adaptive_7to3", "adaptive_5to3", "adaptive_3to6", "adaptive_rect"}) {
    const Case c{name};
    const auto o = c.ints("params");
    REQUIRE(o.size() == 2);
    Tensor x = c.leaf("x");
    c.check(qat::adaptive_avg_pool2d(x, o[0], o[1]), {{"x", x}});
  }
}

TEST_CASE("golden: cross_entropy, log_softmax and nll_loss match PyTorch", "[golden]") {
  for (const char* name : {"ce", "ce_ls01"}) {
    const Case c{name};
    Tensor x = c.leaf("x");
    const float ls = c.get("label_smoothing").to_vector().at(0);
    c.check(qat::cross_entropy(x, c.get("target"), ls), {{"x", x}});
  }
  {
    const Case c{"log_softmax"};
    Tensor x = c.leaf("x");
    c.check(qat::log_softmax(x), {{"x", x}});
  }
  {
    const Case c{"nll"};
    Tensor x = c.leaf("x");
    c.check(qat::nll_loss(x, c.get("target")), {{"x", x}});
  }
}
