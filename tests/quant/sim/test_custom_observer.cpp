// A new observer is a subclass: the test-only FixedRangeObserver reaches every
// observed quantizer of a prepared model through QConfig::observer, the QAT
// modules use its qparams (weights and activations alike), and the model
// freezes with them.
#include "core/generator.h"
#include "models/models.h"
#include "quant/convert/freeze.h"
#include "quant/sim/prepare.h"
#include "quant/sim/qat_modules.h"
#include "tests/quant/observe/fixed_range_observer.h"
#include "tests/test_util.h"

using namespace qat;
using namespace qat::quant;

namespace {

constexpr float kLo = -2.f, kHi = 6.f;

QConfig fixed_range_qconfig() {
  QConfig q;
  q.method = QuantMethod::minmax;
  q.observer = [](const QuantSpec& spec, int64_t channels) -> std::unique_ptr<Observer> {
    return std::make_unique<testing::FixedRangeObserver>(spec, channels, kLo, kHi);
  };
  return q;
}

// The (scale, zero point) the fixed range gives under `spec`.
void expected_qparams(const QuantSpec& spec, float& scale, int32_t& zero_point) {
  qparams_from_range(spec, kLo, kHi, scale, zero_point);
}

}  // namespace

TEST_CASE("a test-only observer plugs into prepare and the QAT modules", "[quant][observer]") {
  ModulePtr m = make_model("small_cnn", 4, 0);
  prepare(*m, testing::test_backend("default"), fixed_range_qconfig());
  Generator g(5);
  m->train();
  m->forward(Tensor::randn({2, 3, 16, 16}, g));

  int64_t quantizers = 0;
  for (auto& [name, mod] : m->named_modules()) {
    auto* fq = dynamic_cast<ObserverFakeQuantizer*>(mod);
    if (!fq) continue;
    INFO("quantizer " << name);
    ++quantizers;
    const auto* obs = dynamic_cast<const testing::FixedRangeObserver*>(&fq->observer());
    REQUIRE(obs != nullptr);
    CHECK(obs->seen == 1);  // the weight path observes through observe() too
    CHECK(fq->describe().find("FixedRange[-2, 6]") != std::string::npos);
    float s;
    int32_t z;
    expected_qparams(fq->config().spec, s, z);
    const QParams q = fq->qparams();
    for (int64_t c = 0; c < q.scale.numel(); ++c) {
      CHECK(q.scale.data<float>()[c] == s);
      CHECK(q.zero_point.data<int32_t>()[c] == z);
    }
  }
  CHECK(quantizers >= 5);  // input, weights and outputs of the conv/linear blocks

  // The QAT conv applies exactly those qparams to its (folded) weight.
  QatConv2d* conv = nullptr;
  for (auto& [name, mod] : m->named_modules())
    if (!conv) conv = dynamic_cast<QatConv2d*>(mod);
  REQUIRE(conv != nullptr);
  conv->eval();
  const Tensor w = conv->folded_weight();
  const QParams wq = conv->weight_fake_quant->qparams();
  const Tensor expected = fake_quantize(w, wq, conv->weight_fake_quant->config().spec);
  CHECK(conv->weight_fake_quant->forward(w).to_vector() == expected.to_vector());

  // Freeze reads the same qparams into the integer model.
  const IntegerModel im = freeze(*m);
  bool saw_conv = false;
  for (const IntLayer& l : im.layers) {
    if (l.op != IntOp::conv) continue;
    saw_conv = true;
    float s, sx;
    int32_t z, zx;
    expected_qparams(conv->weight_fake_quant->config().spec, s, z);
    for (int64_t c = 0; c < l.out_channels; ++c) CHECK(l.weight_scale.data<float>()[c] == s);
    QuantSpec act;  // the input grid: uint8 affine under the default backend
    act.is_signed = false;
    act.symmetric = false;
    expected_qparams(act, sx, zx);
    CHECK(l.in.scale == sx);
    CHECK(l.in.zero_point == zx);
  }
  CHECK(saw_conv);
}
