// The graph models' blocks against torchvision's own modules
// (tests/golden/gen_blocks.py: PyTorch 1.13, torchvision 0.14, float64 from
// float32 values): ResNet's BasicBlock with its downsample and MobileNetV2's
// InvertedResidual with and without the residual add and the expansion, in
// training mode. Same parameters loaded by torchvision's names under the
// block's prefix; outputs, every gradient and the BN running statistics
// compared. Tolerance: float32 accumulation through two or three batch norms
// (measured: at most 2.5e-6 of each tensor's largest magnitude, on the
// expansion BN's gradients; bound 1e-5).
#include "tests/test_util.h"

#include "core/ops.h"
#include "layers/graph.h"
#include "models/mobilenet.h"
#include "models/resnet.h"

using namespace qat;

namespace {

// Every element within 1e-5 of the tensor's largest magnitude.
void require_golden(const Tensor& ours, const Tensor& golden, const std::string& what) {
  float scale = 0;
  for (const float v : golden.to_vector()) scale = std::max(scale, std::abs(v));
  testing::require_close(ours, golden, 1e-5 * std::max(scale, 1.f), 0, what);
}

void check_block(const std::string& name, const std::function<std::string(Graph&, Generator&)>& build) {
  testing::GoldenCase c(testing::golden_file("blocks.safetensors"), name);
  Graph g;
  Generator gen(1);
  g.set_output(build(g, gen));
  // The block's parameters and buffers by torchvision's names under "block.".
  TensorMap state;
  for (const auto& [key, t] : g.state_dict()) state[key] = c.get(key.substr(6)).clone();
  g.load_state_dict(state);
  g.train();
  Tensor x = c.leaf("x");
  Tensor y = g.forward(x);
  require_golden(y, c.get("y"), name + ": y");
  y.backward(c.get("gy"));
  require_golden(x.grad(), c.get("dx"), name + ": dx");
  for (const auto& [key, p] : g.named_parameters()) require_golden(p.grad(), c.get("d" + key.substr(6)), name + ": d" + key);
  for (const auto& [key, b] : g.named_buffers()) require_golden(b, c.get("after." + key.substr(6)), name + ": " + key);
}

}  // namespace

TEST_CASE("a basic block with its downsample equals torchvision's BasicBlock, forward and backward",
          "[golden][graph]") {
  check_block("basic_block", [](Graph& g, Generator& gen) { return basic_block(g, "block", Graph::kInput, 4, 8, 2, gen); });
}

TEST_CASE("inverted residuals equal torchvision's InvertedResidual, forward and backward", "[golden][graph]") {
  check_block("inverted_residual",
              [](Graph& g, Generator& gen) { return inverted_residual(g, "block", Graph::kInput, 8, 8, 1, 6, gen); });
  check_block("inverted_residual_s2",
              [](Graph& g, Generator& gen) { return inverted_residual(g, "block", Graph::kInput, 8, 16, 2, 6, gen); });
  check_block("inverted_residual_t1",
              [](Graph& g, Generator& gen) { return inverted_residual(g, "block", Graph::kInput, 16, 8, 1, 1, gen); });
}
