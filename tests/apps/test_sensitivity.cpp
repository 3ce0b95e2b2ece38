// End-to-end: `qat sensitivity` on the committed sample data. One layer of a
// small trained CNN is made fragile on purpose without changing what the
// float network computes: input channel 0 of features.4 is silenced (its BN
// shift -100 before the ReLU) and features.4's weights on that channel are
// set to 20x each output channel's largest. They multiply zeros, but they set
// the per-channel grid: at 4 bits (step 20 max / 7.5) every other weight
// rounds to zero, at 8 bits (20 max / 127.5) they keep about 6 levels. The
// ranking must put the layer first, the mixed choice must keep it at 8 bits,
// and the written overrides and config must load and prepare.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "tests/test_util.h"

#include "apps/calibrate_cmd.h"
#include "apps/compare.h"
#include "apps/config.h"
#include "apps/integer_cmd.h"
#include "apps/sensitivity_cmd.h"
#include "apps/train.h"
#include "core/autograd.h"
#include "models/checkpoint.h"
#include "models/models.h"
#include "quant/sim/prepare.h"

using namespace qat;
using namespace qat::apps;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

const std::string kSample = testing::sample_data_dir();

std::string write_config(const fs::path& dir, const std::string& name, const std::string& quant, int64_t epochs) {
  return testing::write_sample_config(dir, name, quant, epochs, 0);
}

// A small CNN trained for a few epochs on the sample, then features.4 made fragile.
std::string fragile_checkpoint(const fs::path& dir) {
  REQUIRE(run_train({write_config(dir, "fp32.yaml", "", 4), {}, ""}) == 0);
  ModulePtr m = make_model("small_cnn", 10, 0);
  load_checkpoint((dir / "run" / "best.safetensors").string(), *m, nullptr);
  NoGradGuard ng;
  for (auto& [name, t] : m->named_parameters()) {
    if (name == "features.1.bias") t.data<float>()[0] = -100.f;  // channel 0 of the first block: always 0 after ReLU
    if (name != "features.4.weight") continue;
    const int64_t per = t.numel() / t.size(0), kernel = t.size(2) * t.size(3);  // (O, I, KH, KW)
    for (int64_t o = 0; o < t.size(0); ++o) {
      float* w = t.data<float>() + o * per;
      float mx = 0;
      for (int64_t i = 0; i < per; ++i) mx = std::max(mx, std::fabs(w[i]));
      for (int64_t k = 0; k < kernel; ++k) w[k] = 20 * mx;  // input channel 0
    }
  }
  const std::string out = (dir / "fragile.safetensors").string();
  save_checkpoint(out, *m, nullptr);
  return out;
}

}  // namespace

TEST_CASE("qat sensitivity ranks a fragile layer first and keeps it at 8 bits", "[e2e][sensitivity]") {
  const fs::path dir = testing::fresh_temp_dir("qat_sens_", "fragile");
  const std::string ckpt = fragile_checkpoint(dir);
  const std::string cfg = write_config(dir, "q.yaml", "quant: {enabled: true, backend: default, method: lsq, bits: 4}\n", 1);
  SensitivityArgs a;
  a.config = cfg;
  a.checkpoint = ckpt;
  a.images = 100;
  a.calib_images = 64;
  a.max_drop = 0;
  a.out_dir = (dir / "sens").string();
  SensitivityReport r;
  REQUIRE(run_sensitivity(a, &r) == 0);
  REQUIRE(r.layers.size() == 3);
  CHECK(r.layers.front().layer == "features.4");
  CHECK(r.layers.front().loss_increase > 2 * r.layers[1].loss_increase);
  CHECK(std::find(r.keep_high.begin(), r.keep_high.end(), "features.4") != r.keep_high.end());
  CHECK(r.mixed_top1 >= r.base_top1);  // max_drop 0
  CHECK(r.low_bytes < r.mixed_bytes);
  CHECK(r.mixed_bytes <= r.base_bytes);
  for (const char* f : {"sensitivity.md", "sensitivity.svg", "overrides.yaml", "mixed.yaml"})
    REQUIRE(fs::exists(dir / "sens" / f));

  // The mixed config loads, keeps the method and training settings, and prepares.
  const ExperimentConfig mixed = load_config((dir / "sens" / "mixed.yaml").string());
  CHECK(mixed.quant.bits == 4);
  CHECK(mixed.quant.method == quant::QuantMethod::lsq);
  REQUIRE(mixed.quant.overrides.count("features.4"));
  CHECK(mixed.quant.overrides.at("features.4").weight_bits == 8);
  CHECK(mixed.quant.overrides.size() == r.keep_high.size());
  ModulePtr m = build_model(mixed, false, false);
  CHECK(!quant::fake_quantizers(*m).empty());
  // The snippet is the quant: section of a config.
  std::ofstream(dir / "with_snippet.yaml") << "model: {name: small_cnn, num_classes: 10}\n"
                                           << "data: {train: " << kSample << "/train, val: " << kSample << "/val}\n"
                                           << "train: {epochs: 1}\noutput: {dir: x}\n"
                                           << "quant:\n  enabled: true\n"
                                           << [&] {
                                                std::ifstream in(dir / "sens" / "overrides.yaml");
                                                std::string s, line;
                                                while (std::getline(in, line))
                                                  if (line.rfind("  ", 0) == 0) s += line + "\n";
                                                return s;
                                              }();
  const ExperimentConfig snip = load_config((dir / "with_snippet.yaml").string());
  CHECK(snip.quant.overrides.size() == r.keep_high.size());
}

TEST_CASE("qat sensitivity with a size budget keeps what fits, and refuses one nothing fits", "[e2e][sensitivity]") {
  const fs::path dir = testing::fresh_temp_dir("qat_sens_", "size");
  REQUIRE(run_train({write_config(dir, "fp32.yaml", "", 1), {}, ""}) == 0);
  SensitivityArgs a;
  a.config = write_config(dir, "q.yaml", "quant: {enabled: true, backend: default, method: minmax}\n", 1);
  a.checkpoint = (dir / "run" / "best.safetensors").string();
  a.images = 50;
  a.calib_images = 32;
  a.out_dir = (dir / "sens").string();
  SensitivityReport r;
  a.size_mb = 1e-6;
  REQUIRE_THROWS_WITH(run_sensitivity(a, &r), Contains("--size-mb") && Contains("even every layer at 4 bits"));
  // An override of a layer the model lacks is refused by prepare, naming it.
  a.overrides = {"quant.overrides={no.such.layer: {weight_bits: 8}}"};
  a.size_mb = 0;
  REQUIRE_THROWS_WITH(run_sensitivity(a, &r), Contains("quant.overrides.no.such.layer: names no quantized layer"));
  a.overrides.clear();
  // Everything fits: every layer kept at 8 bits. (1e13 MB is past int64 in
  // bytes: the cast gave 996 B and "even every layer at 4 bits needs ...".)
  a.size_mb = 1e13;
  REQUIRE(run_sensitivity(a, &r) == 0);
  CHECK(r.keep_high.size() == 3);
  CHECK(r.mixed_bytes == r.base_bytes);
  // Half way between all-4 and all-8: the most sensitive layers that fit, in rank order.
  const double budget = static_cast<double>(r.low_bytes + r.base_bytes) / 2;
  a.size_mb = budget / 1e6;
  REQUIRE(run_sensitivity(a, &r) == 0);
  CHECK(static_cast<double>(r.mixed_bytes) <= budget);
  CHECK(r.keep_high.size() < 3);
  CHECK(r.low_bytes <= r.mixed_bytes);
}

namespace {
std::vector<std::string> listing(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}
}  // namespace

// Its mixed.yaml and sensitivity.* beside another command's output would mix
// two kinds of output in one folder (an export `qat export` then refuses).
TEST_CASE("qat sensitivity --out refuses the folder of another command's output and adds nothing to it",
          "[e2e][sensitivity]") {
  const fs::path dir = testing::fresh_temp_dir("qat_sens_", "out_kind");
  REQUIRE(run_train({write_config(dir, "fp32.yaml", "", 1), {}, ""}) == 0);
  const std::string quant = "quant: {enabled: true, backend: default, method: minmax}\n";
  CalibrateArgs c;
  c.config = write_config(dir, "q.yaml", quant, 1);
  c.checkpoint = (dir / "run" / "best.safetensors").string();
  c.images = 16;
  c.out_dir = (dir / "ptq").string();
  REQUIRE(run_calibrate(c) == 0);
  REQUIRE(run_export({(dir / "ptq" / "config.yaml").string(), (dir / "ptq" / "calibrated.safetensors").string(),
                      (dir / "export").string(), {}}) == 0);
  SensitivityArgs a;
  a.config = c.config;
  a.checkpoint = c.checkpoint;
  a.images = 50;
  a.calib_images = 32;
  const std::pair<const char*, const char*> refused[] = {
      {"run", "last.safetensors of a training run"},
      {"export", "manifest.yaml of an export (qat export)"},
      {"ptq", "calibrated.safetensors of a calibration (qat calibrate)"}};
  for (const auto& [folder, holds] : refused) {
    INFO(folder);
    a.out_dir = (dir / folder).string();
    const auto before = listing(a.out_dir);
    REQUIRE_THROWS_WITH(run_sensitivity(a), Contains("sensitivity: --out " + a.out_dir + " holds " + holds +
                                                     ", not sensitivity's outputs") &&
                                                Contains("choose another folder"));
    CHECK(listing(a.out_dir) == before);
  }
}

TEST_CASE("qat sensitivity --finetune-steps trains each variant exactly the steps asked for, over epochs if needed",
          "[e2e][sensitivity]") {
  const fs::path dir = testing::fresh_temp_dir("qat_sens_", "finetune");
  REQUIRE(run_train({write_config(dir, "fp32.yaml", "", 1), {}, ""}) == 0);
  SensitivityArgs a;
  a.config = write_config(dir, "q.yaml", "quant: {enabled: true, backend: default, method: lsq}\n", 2);
  a.overrides = {"train.max_steps_per_epoch=3"};  // one epoch: 3 steps; the config's training: 2 epochs
  a.checkpoint = (dir / "run" / "best.safetensors").string();
  a.images = 40;
  a.calib_images = 32;
  a.finetune_steps = 4;  // more than one epoch: 2 epochs of 2
  a.out_dir = (dir / "sens").string();
  SensitivityReport r;
  REQUIRE(run_sensitivity(a, &r) == 0);
  REQUIRE(r.layers.size() == 3);
  for (const auto& l : r.layers) CHECK(std::isfinite(l.loss));
  CHECK(r.plan.epochs == 2);
  CHECK(r.plan.epoch_steps == 2);
  // Every fine-tune (the baseline, each layer, the mixed candidates) trained 4 steps, read back from its checkpoint.
  REQUIRE(r.finetune_steps_done.size() >= 4);
  for (int64_t done : r.finetune_steps_done) CHECK(done == 4);
  // ... from its calibration.
  CHECK(fs::path(r.finetune_config.quant.init_from).filename() == "calibrated.safetensors");
  CHECK(fs::path(r.finetune_config.quant.init_from).parent_path().filename() == "finetune");
  std::ifstream in(dir / "sens" / "sensitivity.md");
  const std::string md((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK_THAT(md, Contains("4 QAT steps (2 epochs of 2) after"));
  // The fine-tunes were scratch: --out holds the report and nothing else, and nothing is left beside it.
  CHECK(listing((dir / "sens").string()) ==
        std::vector<std::string>{".qat-output", "mixed.yaml", "overrides.yaml", "sensitivity.md", "sensitivity.svg"});
  for (const auto& e : fs::directory_iterator(dir)) CHECK(e.path().filename().string().find(".tmp") == std::string::npos);

  // Issue 39's case 5: 99999999999 steps trained one epoch and the report said 99999999999.
  SECTION("more steps than the config's whole training, or steps that only split into many short epochs") {
    a.finetune_steps = 99999999999;
    REQUIRE_THROWS_WITH(run_sensitivity(a), Contains("--finetune-steps 99999999999 is more than the config's whole "
                                                     "training (2 epochs of 3 steps: 6 steps") &&
                                                Contains("ask for at most 6"));
    a.finetune_steps = 5;  // 5 epochs of 1
    REQUIRE_THROWS_WITH(run_sensitivity(a), Contains("--finetune-steps 5 does not split into whole epochs of at most 3 "
                                                     "steps") &&
                                                Contains("ask for a multiple of 3 (3 or 6) or at most 3"));
  }
}

// Issue 39's case 1: --finetune-steps removed U/finetune recursively,
// whatever it held.
TEST_CASE("qat sensitivity refuses an --out holding the user's files or folders, and leaves it as it was",
          "[e2e][sensitivity]") {
  const fs::path dir = testing::fresh_temp_dir("qat_sens_", "user_out");
  REQUIRE(run_train({write_config(dir, "fp32.yaml", "", 1), {}, ""}) == 0);
  SensitivityArgs a;
  a.config = write_config(dir, "q.yaml", "quant: {enabled: true, backend: default, method: minmax}\n", 1);
  a.checkpoint = (dir / "run" / "best.safetensors").string();
  a.images = 40;
  a.calib_images = 32;
  a.finetune_steps = 1;
  a.out_dir = (dir / "U").string();
  fs::create_directories(dir / "U" / "finetune");
  std::ofstream(dir / "U" / "finetune" / "thesis.tex") << "years of work\n";
  const auto before = listing(a.out_dir);
  REQUIRE_THROWS_WITH(run_sensitivity(a), Contains("--out " + a.out_dir + " holds finetune (not a file), which "
                                                   "sensitivity does not write"));
  CHECK(listing(a.out_dir) == before);
  CHECK(fs::exists(dir / "U" / "finetune" / "thesis.tex"));
  fs::remove_all(dir / "U" / "finetune");
  std::ofstream(dir / "U" / "notes.txt") << "mine\n";
  REQUIRE_THROWS_WITH(run_sensitivity(a), Contains("holds notes.txt, which sensitivity does not write"));
  CHECK(fs::exists(dir / "U" / "notes.txt"));
  // The config or checkpoint inside --out would be replaced with it.
  fs::remove(dir / "U" / "notes.txt");
  fs::copy_file(a.checkpoint, dir / "U" / "fp32.safetensors");
  a.checkpoint = (dir / "U" / "fp32.safetensors").string();
  REQUIRE_THROWS_WITH(run_sensitivity(a), Contains("--checkpoint " + a.checkpoint + " lies in --out " + a.out_dir));
  CHECK(fs::exists(a.checkpoint));
}

// The usual W4A4 config keeps the first and last layer at 8 bits
// (quant.overrides): sensitivity was refused for it.
TEST_CASE("qat sensitivity keeps the config's own overrides, leaves them out of the ranking and says so",
          "[e2e][sensitivity]") {
  const fs::path dir = testing::fresh_temp_dir("qat_sens_", "overrides");
  REQUIRE(run_train({write_config(dir, "fp32.yaml", "", 1), {}, ""}) == 0);
  SensitivityArgs a;
  a.config = write_config(dir, "q.yaml",
                          "quant:\n  enabled: true\n  backend: default\n  method: minmax\n  bits: 4\n"
                          "  overrides: {fc: {weight_bits: 8, activation_bits: 8}, features.0: {weight_bits: 6}}\n",
                          1);
  a.checkpoint = (dir / "run" / "best.safetensors").string();
  a.images = 50;
  a.calib_images = 32;
  a.size_mb = 1e13;  // everything fits: every ranked layer kept high
  a.out_dir = (dir / "sens").string();
  SensitivityReport r;
  REQUIRE(run_sensitivity(a, &r) == 0);
  // Only features.4 is ranked; fc and features.0 keep the config's bits
  // (features.0's activation: the config's global 4).
  REQUIRE(r.layers.size() == 1);
  CHECK(r.layers[0].layer == "features.4");
  REQUIRE(r.fixed.size() == 2);
  CHECK(r.fixed.at("fc").weight_bits == 8);
  CHECK(r.fixed.at("fc").activation_bits == 8);
  CHECK(r.fixed.at("features.0").weight_bits == 6);
  CHECK(r.fixed.at("features.0").activation_bits == 4);
  CHECK(r.keep_high == std::vector<std::string>{"features.4"});
  // Storage counts the fixed layers at their bits: all-low is not all at 4.
  CHECK(r.low_bytes == weight_storage_bytes(ModelConfig{"small_cnn", 10}, 4, {{"fc", 8}, {"features.0", 6}}));
  std::ifstream in(dir / "sens" / "sensitivity.md");
  const std::string md((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK_THAT(md, Contains("Kept as the config's quant.overrides set them, in every variant, and not ranked: "
                          "fc (W8A8), features.0 (W6A4)."));
  // The mixed config keeps them, with the chosen layer at 8 bits.
  const ExperimentConfig mixed = load_config((dir / "sens" / "mixed.yaml").string());
  REQUIRE(mixed.quant.overrides.size() == 3);
  CHECK(mixed.quant.overrides.at("fc").weight_bits == 8);
  CHECK(mixed.quant.overrides.at("features.0").weight_bits == 6);
  CHECK(mixed.quant.overrides.at("features.4").weight_bits == 8);
}
