// The integer model as a graph (Note [integer model graph]): layers that read
// earlier layers by index, the residual add among them, on the CPU and on
// the executors' generic code (the CUDA twin's), and errors naming the layer.
#include "tests/host_exec.h"
#include "tests/test_util.h"

#include "core/autograd.h"
#include "quant/convert/freeze.h"
#include "quant/integer/int_forward.h"
#include "quant/integer/integer_model.h"
#include "quant/sim/prepare.h"

using namespace qat;
using namespace qat::quant;
using Catch::Matchers::Contains;

using testing::residual_model;

TEST_CASE("an integer model with a residual add runs its graph: each layer on the outputs it names",
          "[quant][integer]") {
  const IntegerModel im = residual_model();
  Generator g(9);
  const Tensor x = Tensor::randn({3, 3, 16, 16}, g);
  const std::vector<Tensor> trace = im.forward_trace(x);
  REQUIRE(trace.size() == im.layers.size());
  // Each layer from the outputs its inputs name.
  for (size_t i = 1; i < im.layers.size(); ++i) {
    INFO("layer " << im.layers[i].name);
    const std::vector<int64_t> in = layer_inputs(im.layers, i);
    MoreInputs more;
    for (size_t k = 1; k < in.size(); ++k) more.push_back(&trace[in[k]]);
    REQUIRE(testing::same_bits(im.run_layer(im.layers[i], trace[in[0]], more), trace[i]));
  }
  // The add: element by element, its first input from the pointwise conv, its second from the depthwise one.
  const Tensor& a = trace[3];
  const Tensor& b = trace[4];
  const Tensor& y = trace[5];
  REQUIRE(y.sizes() == a.sizes());
  bool clamped = false;
  for (int64_t i = 0; i < y.numel(); ++i) {
    REQUIRE(y.data<uint8_t>()[i] == add_requant_value(a.data<uint8_t>()[i], b.data<uint8_t>()[i], im.layers[5].add));
    clamped |= y.data<uint8_t>()[i] == 0;  // (the ReLU)
  }
  REQUIRE(clamped);
  // The whole forward (outputs dropped after their last reader) gives the trace's logits.
  REQUIRE(testing::same_bits(im.forward(x), trace.back()));
  // The executors' generic code (the CUDA twin's) on the host: the same logits.
  testing::HostExec ex;
  REQUIRE(testing::same_bits(run_int_model(ex, im, model_constants(im, Device::cpu), x.contiguous()), trace.back()));
}

TEST_CASE("an integer graph that cannot run is refused naming the layer", "[quant][integer]") {
  const IntegerModel good = residual_model();
  Generator g(9);
  const Tensor x = Tensor::randn({2, 3, 16, 16}, g);
  SECTION("an add that names no inputs") {
    IntegerModel im = good;
    im.layers[5].inputs.clear();
    REQUIRE_THROWS_WITH(im.forward(x), Contains("'block.add'") && Contains("reads two inputs"));
  }
  SECTION("an input that is not an earlier layer") {
    IntegerModel im = good;
    im.layers[5].inputs = {3, 6};
    REQUIRE_THROWS_WITH(im.forward(x), Contains("'block.add'") && Contains("reads layer 6"));
  }
  SECTION("a second input on another grid than its layer writes") {
    IntegerModel im = good;
    im.layers[5].in2.scale *= 2;
    REQUIRE_THROWS_WITH(im.forward(x), Contains("'block.add'") && Contains("layer '9' writes"));
  }
  SECTION("inputs of two shapes") {
    IntegerModel im = good;
    im.layers[5].inputs = {2, 4};  // (8 x 8 x 8 against 16 x 8 x 8)
    im.layers[5].in = im.layers[2].out;
    REQUIRE_THROWS_WITH(infer_shapes(im.layers, {16, 16, 3, false}),
                        Contains("'block.add'") && Contains("8x8x8") && Contains("8x8x16"));
  }
}
