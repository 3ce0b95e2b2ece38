// A measurement, not a test (hidden: ctest does not list it; it needs
// PyTorch's exports): torchvision models exported by torch.onnx.export,
// imported by qat and run in eval mode, against ONNX Runtime's logits on the
// same input. bench/onnx_import_torchvision.sh makes the files and runs it:
//   QAT_TORCHVISION_ONNX_DIR=DIR build/qat_tests "[.onnx_torchvision]"
// For each DIR/*.onnx with DIR/*.ort.f32 beside it: the largest logit
// difference, relative to the largest logit, and the state dict's size.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tests/test_util.h"

#include "apps/onnx_import.h"
#include "core/autograd.h"

using namespace qat;
namespace fs = std::filesystem;

namespace {

Tensor read_f32(const fs::path& p, const Shape& shape) {
  Tensor t = Tensor::empty(shape);
  std::ifstream f(p, std::ios::binary);
  f.read(reinterpret_cast<char*>(t.data<float>()), static_cast<std::streamsize>(t.numel() * 4));
  REQUIRE(f.gcount() == static_cast<std::streamsize>(t.numel() * 4));
  return t;
}

}  // namespace

TEST_CASE("measure: torchvision ONNX exports imported by qat against ONNX Runtime", "[.onnx_torchvision]") {
  const char* dir = std::getenv("QAT_TORCHVISION_ONNX_DIR");
  REQUIRE(dir != nullptr);
  const Tensor x = read_f32(fs::path(dir) / "input.f32", {2, 3, 64, 64});
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".onnx") continue;
    fs::path ort = e.path();
    ort.replace_extension(".ort.f32");
    if (!fs::exists(ort)) continue;
    std::shared_ptr<Graph> g = apps::import_onnx(e.path().string());
    g->eval();
    NoGradGuard no_grad;
    const Tensor y = g->forward(x), want = read_f32(ort, {2, 10});
    double scale = 0, worst = 0;
    for (int64_t i = 0; i < y.numel(); ++i) {
      scale = std::max(scale, std::fabs(static_cast<double>(want.data<float>()[i])));
      worst = std::max(worst, std::fabs(static_cast<double>(y.data<float>()[i]) - want.data<float>()[i]));
    }
    const TensorMap s = g->state_dict();
    std::printf("%-24s %4zu state-dict tensors (first %s), %3zu graph nodes; largest logit difference %.3g of %.3g "
                "(%.2g relative)\n",
                e.path().filename().c_str(), s.size(), s.begin()->first.c_str(), g->nodes().size(), worst, scale,
                worst / scale);
    CHECK(worst <= 1e-5 * scale);
  }
}
