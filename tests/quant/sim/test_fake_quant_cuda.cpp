// fake_quantize's CUDA twin (quant/sim/fake_quant.cu): refusals checked on
// every machine; with a GPU, outputs and STE gradients equal to the CPU op
// bit for bit on random shapes, specs and awkward values, and equal to
// PyTorch's golden values (tests/golden/quant_ops.safetensors).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/generator.h"
#include "quant/sim/fake_quant.h"
#include "tests/cuda_test_util.h"
#include "tests/test_util.h"

namespace {

using Catch::Matchers::Contains;
using qat::Device;
using qat::DType;
using qat::Shape;
using qat::Tensor;
using qat::testing::cuda_device_or_skip;
using qat::testing::CudaOrLabelled;
using namespace qat::quant;

// Normals of scale `spread` with exact ties of the grid (k + 0.5 steps),
// their neighbours, NaN, +-inf, +-0 and far-out values mixed in.
Tensor awkward_input(const Shape& shape, float step, float spread, uint64_t seed) {
  qat::Generator gen(seed);
  Tensor t = Tensor::randn(shape, gen, 0.f, spread);
  float* p = t.data<float>();
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < t.numel(); i += 7) {
    const float k = static_cast<float>(static_cast<int>(i % 301) - 150);
    switch ((i / 7) % 8) {
      case 0: p[i] = (k + 0.5f) * step; break;
      case 1: p[i] = std::nextafter((k + 0.5f) * step, inf); break;
      case 2: p[i] = std::numeric_limits<float>::quiet_NaN(); break;
      case 3: p[i] = (i & 8) ? inf : -inf; break;
      case 4: p[i] = (i & 8) ? 0.f : -0.f; break;
      case 5: p[i] = k * 1e6f; break;
      default: break;
    }
  }
  return t;
}

struct Case {
  Shape shape;
  bool per_channel;
  int64_t axis;
  int bits;
  bool is_signed, narrow;
};

// One case on both devices: forward, both STEs' gradients, and the
// no-gradient path (no mask).
void check_parity(const Case& k, uint64_t seed) {
  QuantSpec spec;
  spec.bits = k.bits;
  spec.is_signed = k.is_signed;
  spec.narrow_range = k.narrow;
  spec.per_channel = k.per_channel;
  spec.axis = k.axis;
  const int64_t C = k.per_channel ? k.shape[k.axis] : 1;
  std::vector<float> sv(C);
  std::vector<int32_t> zv(C);
  for (int64_t c = 0; c < C; ++c) {
    sv[c] = 0.01f + 0.007f * static_cast<float>(c % 17);
    zv[c] = k.is_signed ? static_cast<int32_t>(c % 5) - 2 : static_cast<int32_t>(c % 9);
  }
  const Tensor s = Tensor::from_vector(sv, {C}), z = Tensor::from_vector_i32(zv, {C});
  const Tensor x = awkward_input(k.shape, sv[0], 0.3f * static_cast<float>(1 << (k.bits - 1)) * sv[0], seed);
  const Tensor gy = awkward_input(k.shape, 1.f, 1.f, seed + 1);
  const Tensor sd = s.to(Device::cuda), zd = z.to(Device::cuda), gyd = gy.to(Device::cuda);
  for (const SteKind ste : {SteKind::clipped, SteKind::plain}) {
    const std::string what = std::string(ste == SteKind::clipped ? "clipped" : "plain") + " STE";
    Tensor xc = x.clone().set_requires_grad(true);
    Tensor yc = fake_quantize(xc, s, z, spec, ste);
    yc.backward(gy);
    Tensor xd = x.to(Device::cuda).set_requires_grad(true);
    Tensor yd = fake_quantize(xd, sd, zd, spec, ste);
    REQUIRE(yd.device() == Device::cuda);
    yd.backward(gyd);
    CHECK(xd.grad().device() == Device::cuda);
    qat::testing::check_same_bits(yd.to(Device::cpu), yc.detach(), "forward, " + what);
    qat::testing::check_same_bits(xd.grad().to(Device::cpu), xc.grad(), "dx, " + what);
  }
  qat::NoGradGuard no_grad;
  qat::testing::check_same_bits(fake_quantize(x.to(Device::cuda), sd, zd, spec).to(Device::cpu),
                                fake_quantize(x, s, z, spec), "forward without autograd");
  // qparams kept on the host (a quantizer's buffers) for an input on cuda.
  qat::testing::check_same_bits(fake_quantize(x.to(Device::cuda), s, z, spec).to(Device::cpu),
                                fake_quantize(x, s, z, spec), "qparams on the CPU");
}

}  // namespace

TEST_CASE("fake_quantize cuda: mixed devices are refused naming the op and both devices", "[cuda][quant]") {
  QuantSpec spec;
  const Tensor x = Tensor::ones({2, 3}), s = Tensor::from_vector({0.1f}, {1}), z = Tensor::from_vector_i32({0}, {1});
  {  // qparams on the CPU serve an input on cuda; one on cuda and one on the CPU do not
    CudaOrLabelled xd(x), sd(s);
    CHECK_THROWS_WITH(fake_quantize(xd.t, sd.t, z, spec),
                      Contains("fake_quantize: expected all tensors on one device, but input is on cuda and "
                               "zero_point is on cpu"));
  }
  {
    CudaOrLabelled sd(s);
    CHECK_THROWS_WITH(fake_quantize(x, sd.t, z, spec),
                      Contains("fake_quantize: expected all tensors on one device, but input is on cpu and scale is "
                               "on cuda"));
  }
  {
    CudaOrLabelled zd(z);
    CHECK_THROWS_WITH(fake_quantize(x, s, zd.t, spec), Contains("input is on cpu and zero_point is on cuda"));
  }
  {  // the argument checks come first on either device
    CudaOrLabelled xd(x);
    CHECK_THROWS_WITH(fake_quantize(xd.t, s, Tensor::from_vector_i32({0, 0}, {2}), spec),
                      Contains("per-tensor needs scale and zero_point of shape (1)"));
  }
}

TEST_CASE("fake_quantize cuda: outputs and STE gradients equal the CPU op bit for bit", "[cuda][quant]") {
  if (!cuda_device_or_skip()) return;
  const Case cases[] = {
      {{100003}, false, 0, 8, true, false},       // per-tensor, grid-stride
      {{3, 5}, false, 0, 4, false, false},        // tiny, unsigned affine
      {{64, 3, 5, 5}, true, 0, 8, true, true},    // conv weight, narrow range
      {{8, 32, 9, 7}, true, 1, 4, false, false},  // activation channels
      {{2000, 10}, true, 1, 2, true, false},      // channels innermost
      {{6, 7, 300}, true, 2, 8, false, false},    // last axis
      {{0, 4}, true, 1, 8, true, false},          // empty
  };
  uint64_t seed = 21;
  for (const Case& k : cases) {
    INFO("shape " << qat::shape_str(k.shape) << (k.per_channel ? " per-channel axis " : " per-tensor ") << k.axis
                  << ", " << k.bits << " bits");
    check_parity(k, seed += 10);
  }
}

TEST_CASE("fake_quantize cuda: PyTorch's golden outputs and gradients hold on the device", "[cuda][quant]") {
  if (!cuda_device_or_skip()) return;
  const qat::SafetensorsFile& file = qat::testing::golden_file("quant_ops.safetensors");
  auto get = [&](const std::string& n) { return qat::testing::golden_tensor(file, n); };
  std::vector<std::string> names = qat::testing::golden_case_names(file, "fq_pt_", ".params");
  for (const auto& n : qat::testing::golden_case_names(file, "fq_pc_", ".params")) names.push_back(n);
  REQUIRE(names.size() >= 23);
  for (const std::string& c : names) {
    INFO("case " << c);
    const std::vector<int32_t> p = qat::testing::int_values(get(c + ".params"));
    REQUIRE(p.size() == 7);  // [bits, is_signed, narrow_range, per_channel, axis, qmin, qmax]
    QuantSpec spec;
    spec.bits = p[0];
    spec.is_signed = p[1] != 0;
    spec.symmetric = false;
    spec.narrow_range = p[2] != 0;
    spec.per_channel = p[3] != 0;
    spec.axis = p[4];
    REQUIRE((spec.qmin() == p[5] && spec.qmax() == p[6]));
    Tensor x = get(c + ".x").to(Device::cuda).set_requires_grad(true);
    Tensor y = fake_quantize(x, get(c + ".scale").to(Device::cuda), get(c + ".zero_point").to(Device::cuda), spec);
    y.backward(get(c + ".gy").to(Device::cuda));
    qat::testing::check_same_bits(y.to(Device::cpu), get(c + ".y"), c + ".y");
    qat::testing::check_same_bits(x.grad().to(Device::cpu), get(c + ".dx"), c + ".dx");
  }
}
