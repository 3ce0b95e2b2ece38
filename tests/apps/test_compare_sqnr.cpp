// The per-layer SQNR panel of qat compare: the dB formula on known signals,
// and on the sample data an 8-bit fine-tune closer to FP32 than a 4-bit one
// at every layer.
#include <cmath>
#include <filesystem>
#include <fstream>

#include "tests/test_util.h"

#include "apps/compare.h"
#include "apps/compare_sqnr.h"
#include "apps/train.h"

using namespace qat;
using namespace qat::apps;
namespace fs = std::filesystem;

TEST_CASE("SQNR in dB on known signals", "[compare][sqnr]") {
  CHECK(sqnr_db(100.0, 1.0) == Approx(20.0));
  CHECK(sqnr_db(4.0, 4 * 0.01) == Approx(20.0));  // ref all 1, q all 1.1
  CHECK(sqnr_db(1.0, 1.0) == 0.0);
  CHECK(std::isinf(sqnr_db(5.0, 0.0)));
  // A full-scale sine against its b-bit rounding: the rule of thumb 6.02 b + 1.76 dB
  // (uniform noise, an approximation of this signal's: hence the margin).
  for (int bits : {4, 8}) {
    const double step = 2.0 / std::pow(2.0, bits);
    double signal = 0, noise = 0;
    for (int i = 0; i < 200000; ++i) {
      const double v = std::sin(0.001 * i * 3.14159265 + 0.1), q = step * std::round(v / step);
      signal += v * v;
      noise += (v - q) * (v - q);
    }
    CHECK(sqnr_db(signal, noise) == Approx(6.02 * bits + 1.76).margin(0.5));
  }
}

TEST_CASE("qat compare --sqnr-images: 8-bit layers closer to FP32 than 4-bit ones", "[e2e][compare][sqnr]") {
  const fs::path dir = testing::fresh_temp_dir("qat_sqnr_", "runs");
  // The fine-tunes barely move (lr 1e-9, BN statistics frozen): their SQNR is the quantization's.
  auto config = [&](const std::string& name, const std::string& quant, const std::string& lr = "0.05") {
    return testing::write_sample_config(dir, name + ".yaml", quant, 1, 4, name, "  lr: " + lr + "\n");
  };
  REQUIRE(run_train({config("fp32", ""), {}, ""}) == 0);
  const std::string init =
      "  freeze_bn_epoch: 1\n  init_from: " + (dir / "fp32" / "best.safetensors").string() + "\n";
  REQUIRE(run_train({config("w8", "quant:\n  enabled: true\n  bits: 8\n" + init, "1e-9"), {}, ""}) == 0);
  REQUIRE(run_train({config("w4", "quant:\n  enabled: true\n  bits: 4\n" + init, "1e-9"), {}, ""}) == 0);
  const std::vector<std::string> dirs = {(dir / "fp32").string(), (dir / "w8").string(), (dir / "w4").string()};
  std::vector<RunSummary> runs;
  for (const auto& d : dirs) runs.push_back(summarize_run(d));
  CHECK(layer_sqnr(runs, dirs, 40).empty());  // not aligned: nothing known to descend from fp32
  align_runs(runs, dirs);
  const auto s = layer_sqnr(runs, dirs, 40);
  REQUIRE(s.size() == 2);
  REQUIRE(s[0].layers.size() == 3);
  REQUIRE(s[1].layers.size() == 3);
  for (size_t k = 0; k < 3; ++k) {
    INFO(s[0].layers[k].layer);
    CHECK(s[0].layers[k].layer == s[1].layers[k].layer);
    CHECK(s[0].layers[k].db > s[1].layers[k].db + 6);  // W8A8 vs W4A4: several bits apart
    CHECK(s[1].layers[k].db > 0);
  }
  // More images asked than the set has: the count measured is the one reported.
  const auto all = layer_sqnr(runs, dirs, 1000);
  REQUIRE(all.size() == 2);
  CHECK(all[0].images == 100);
  CHECK_THAT(sqnr_table(all), Catch::Matchers::Contains("(dB, 100 validation images"));
  CompareArgs a{dirs, (dir / "report").string(), 40};
  REQUIRE(run_compare(a) == 0);
  CHECK(fs::exists(dir / "report" / "sqnr.md"));
  CHECK(fs::exists(dir / "report" / "sqnr.svg"));
}
