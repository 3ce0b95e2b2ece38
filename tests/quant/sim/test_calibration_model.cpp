// Post-training calibration of a prepared model (quant/sim/calibration.h) on
// the tensorrt backend: the calibration passes compute the float network,
// the max calibrator gives TensorRT's scales (amax / 127) to the bit, and the
// calibrated model's forward and freeze() use exactly the applied qparams.
#include <catch2/catch.hpp>

#include "tests/test_util.h"

#include <algorithm>
#include <cmath>

#include "core/autograd.h"
#include "core/generator.h"
#include "models/models.h"
#include "quant/convert/freeze.h"
#include "quant/sim/calibration.h"
#include "quant/sim/prepare.h"

namespace {

using namespace qat;
using namespace qat::quant;

Tensor random_images(int64_t n, uint64_t seed) {
  Generator g(seed);
  Tensor x = Tensor::empty({n, 3, 16, 16});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 1.5f * g.normal();
  return x;
}

// A float SmallCNN with non-trivial BN running statistics, and the same
// network prepared for calibration on the tensorrt backend.
struct Pair {
  ModulePtr float_model, calib_model;
};

Pair make_pair() {
  Pair p{make_model("small_cnn", 4, 1), make_model("small_cnn", 4, 1)};
  {
    NoGradGuard ng;
    for (int k = 0; k < 3; ++k) p.float_model->forward(random_images(8, 100 + k));
  }
  p.float_model->eval();
  p.calib_model->load_state_dict(p.float_model->state_dict());
  prepare(*p.calib_model, testing::test_backend("tensorrt"), calibration_qconfig(QConfig{}));
  p.calib_model->eval();
  return p;
}

}  // namespace

TEST_CASE("calibration forwards compute the float network, ranging first, then filling histograms over the range",
          "[quant][calibration]") {
  Pair p = make_pair();
  begin_calibration(*p.calib_model);
  NoGradGuard ng;
  for (int pass = 0; pass < 2; ++pass) {
    for (int k = 0; k < 3; ++k) {
      const Tensor x = random_images(4, 7 + k);
      // BN folded into the conv weights (eval): equal up to float rounding.
      testing::require_close(p.calib_model->forward(x), p.float_model->forward(x), 1e-5, 1e-4, "calibrating forward");
    }
    const auto tensors = calibrated_tensors(*p.calib_model);
    REQUIRE(tensors.size() == 3);  // the input, and the outputs of the two conv blocks
    for (const auto& t : tensors) {
      INFO(t.name << ", pass " << pass);
      REQUIRE(t.observer);
      CHECK(t.observer->ranging() == (pass == 0));
      CHECK(t.observer->histogram().empty() == (pass == 0));
      if (pass == 1) {
        CHECK(t.observer->histogram().range() == std::max(-t.observed_min(), t.observed_max()));
      }
    }
    if (pass == 0) {
      REQUIRE_THROWS_WITH(choose_scales(tensors, Calibrator::entropy, {}),
                          Catch::Contains("has its range but no histogram yet"));
      begin_histograms(*p.calib_model);
    }
  }
}

TEST_CASE("max calibration gives TensorRT's scales and the model uses them", "[quant][calibration]") {
  Pair p = make_pair();
  begin_calibration(*p.calib_model);
  {
    NoGradGuard ng;
    for (int pass = 0; pass < 2; ++pass) {
      for (int k = 0; k < 2; ++k) p.calib_model->forward(random_images(4, 20 + k));
      if (pass == 0) begin_histograms(*p.calib_model);
    }
  }
  const auto tensors = calibrated_tensors(*p.calib_model);
  const auto scales = choose_scales(tensors, Calibrator::max, {});
  std::map<std::string, float> amax;
  for (const auto& t : tensors) amax[t.name] = std::max(-t.observed_min(), t.observed_max());
  apply_calibration(*p.calib_model, scales);
  for (const auto& t : tensors) {
    INFO(t.name);
    CHECK(t.quantizer->qparams().scale.data<float>()[0] == amax[t.name] / 127.0f);
    CHECK(t.quantizer->qparams().zero_point.data<int32_t>()[0] == 0);
    CHECK_FALSE(t.quantizer->observer_enabled());
    CHECK(t.quantizer->fake_quant_enabled());
  }
  // Weights: max |w| per output channel / 127 (narrow int8), BN folded.
  for (FakeQuantizer* f : fake_quantizers(*p.calib_model)) {
    if (!f->config().is_weight) continue;
    CHECK_FALSE(f->observer_enabled());
    const Tensor s = f->qparams().scale;
    for (int64_t c = 0; c < s.numel(); ++c) CHECK(s.data<float>()[c] > 0);
  }
  // Later forwards (even in training mode) leave the calibrated qparams alone,
  // and freeze() takes them.
  const float s_in = tensors[0].quantizer->qparams().scale.data<float>()[0];
  {
    NoGradGuard ng;
    p.calib_model->train();
    p.calib_model->forward(random_images(4, 99));
    p.calib_model->eval();
  }
  CHECK(tensors[0].quantizer->qparams().scale.data<float>()[0] == s_in);
  const IntegerModel im = freeze(*p.calib_model);
  const auto first = std::find_if(im.layers.begin(), im.layers.end(), [](const IntLayer& l) { return l.name == "features.0"; });
  REQUIRE(first != im.layers.end());
  CHECK(first->in.scale == s_in);
}

TEST_CASE("applying calibration scales that do not match the model's tensors is an error naming the first",
          "[quant][calibration]") {
  Pair p = make_pair();
  begin_calibration(*p.calib_model);
  {
    NoGradGuard ng;
    p.calib_model->forward(random_images(2, 5));
    begin_histograms(*p.calib_model);
    p.calib_model->forward(random_images(2, 5));
  }
  const auto tensors = calibrated_tensors(*p.calib_model);
  auto scales = choose_scales(tensors, Calibrator::entropy, {});
  auto missing = scales;
  missing.erase(tensors[1].name);
  REQUIRE_THROWS_WITH(apply_calibration(*p.calib_model, missing), Catch::Contains("no scale for tensor " + tensors[1].name));
  auto extra = scales;
  extra["features.9.activation_post_process"] = 0.5f;
  REQUIRE_THROWS_WITH(apply_calibration(*p.calib_model, extra),
                      Catch::Contains("features.9.activation_post_process") && Catch::Contains("not a calibrated tensor"));
}
