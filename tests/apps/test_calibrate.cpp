// End-to-end: `qat calibrate` on the committed sample data (small_cnn at
// 32 px, an FP32 model trained for a few steps): the outputs load in qat eval
// and export, a cache read back reproduces the calibration bit for bit, a
// stale or mismatched cache is refused naming what differs (and nothing is
// written), --compare reports every calibrator, and QAT starts from a
// calibration (quant.init_from).
#include <cstring>
#include <filesystem>
#include <fstream>

#include "tests/test_util.h"

#include "apps/calibrate_cmd.h"
#include "apps/file_digest.h"
#include "apps/integer_cmd.h"
#include "apps/train.h"
#include "core/safetensors.h"
#include "core/text_file.h"
#include "models/checkpoint.h"
#include "models/models.h"
#include "quant/sim/fake_quantizer.h"
#include "quant/sim/prepare.h"

using namespace qat;
using namespace qat::apps;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

std::string write_config(const fs::path& dir, const std::string& name, const std::string& quant) {
  return testing::write_sample_config(dir, name, quant, 1, 4);
}

// One FP32 model per test process (a few training steps), and its folder.
const fs::path& fp32_dir() {
  static const fs::path dir = [] {
    const fs::path d = testing::fresh_temp_dir("qat_calib_", "fp32");
    REQUIRE(run_train({write_config(d, "fp32.yaml", ""), {}, ""}) == 0);
    return d;
  }();
  return dir;
}
std::string fp32_checkpoint() { return (fp32_dir() / "run" / "best.safetensors").string(); }

const char* kTensorRt = "quant: {enabled: true, backend: tensorrt, method: minmax}\n";

CalibrateArgs args_for(const std::string& config, const fs::path& out, int64_t images = 48) {
  CalibrateArgs a;
  a.config = config;
  a.checkpoint = fp32_checkpoint();
  a.images = images;
  a.out_dir = out.string();
  return a;
}

}  // namespace

TEST_CASE("qat calibrate writes what eval and export load, its cache reproduces it bit for bit", "[e2e][calibration]") {
  const fs::path dir = testing::fresh_temp_dir("qat_calib_", "roundtrip");
  const std::string cfg = write_config(dir, "q.yaml", kTensorRt);
  CalibrateArgs a = args_for(cfg, dir / "out");
  a.calibrator = quant::Calibrator::percentile;
  REQUIRE(run_calibrate(a) == 0);
  const fs::path out = dir / "out";
  for (const char* f : {"calibrated.safetensors", "config.yaml", "calibration.cache", "calibration.cache.source.yaml"})
    REQUIRE(fs::exists(out / f));
  CHECK(read_text_file((out / "calibration.cache").string()).rfind("TRT-8601-PercentileCalibration\n", 0) == 0);
  const EvalSummary e = eval_checkpoint({(out / "config.yaml").string(), {}, (out / "calibrated.safetensors").string()});
  CHECK(e.images > 0);
  REQUIRE(run_export({(out / "config.yaml").string(), (out / "calibrated.safetensors").string(),
                      (dir / "export").string(), {}}) == 0);

  // The cache, read back into another folder: calibration skipped, same checkpoint.
  CalibrateArgs b = args_for(cfg, dir / "again");
  b.cache = (out / "calibration.cache").string();
  REQUIRE(run_calibrate(b) == 0);
  CHECK_FALSE(fs::exists(dir / "again" / "calibration.cache"));
  const TensorMap first = testing::checkpoint_model_tensors((out / "calibrated.safetensors").string());
  const TensorMap second = testing::checkpoint_model_tensors((dir / "again" / "calibrated.safetensors").string());
  REQUIRE(first.size() == second.size());
  for (const auto& [k, t] : first) {
    INFO(k);
    REQUIRE(second.count(k));
    CHECK(testing::same_bits(t, second.at(k)));
  }
}

TEST_CASE("a stale or mismatched calibration cache is refused naming what changed", "[e2e][calibration]") {
  const fs::path dir = testing::fresh_temp_dir("qat_calib_", "stale");
  const std::string cfg = write_config(dir, "q.yaml", kTensorRt);
  REQUIRE(run_calibrate(args_for(cfg, dir / "out")) == 0);
  const std::string cache = (dir / "out" / "calibration.cache").string();
  const std::string text = read_text_file(cache);
  auto refused = [&](CalibrateArgs a, const std::string& what) {
    a.cache = a.cache.empty() ? cache : a.cache;
    INFO(what);
    REQUIRE_THROWS_WITH(run_calibrate(a), Contains(what));
    CHECK_FALSE(fs::exists(fs::path(a.out_dir) / "calibrated.safetensors"));
  };
  SECTION("other calibration images") {
    refused(args_for(cfg, dir / "x", 32), "is stale: the calibration images");
  }
  SECTION("other preprocessing") {
    CalibrateArgs a = args_for(cfg, dir / "x");
    a.overrides = {"data.resize=40"};
    refused(a, "is stale: the preprocessing");
  }
  SECTION("other weights") {
    ModulePtr m = make_model("small_cnn", 10, 0);
    load_checkpoint(fp32_checkpoint(), *m, nullptr);
    {
      Tensor w = m->named_parameters().front().second;
      w.data<float>()[0] += 1e-3f;
    }
    const std::string other = (dir / "other.safetensors").string();
    save_checkpoint(other, *m, nullptr);
    CalibrateArgs a = args_for(cfg, dir / "x");
    a.checkpoint = other;
    refused(a, "is stale: the FP32 checkpoint's contents");
  }
  SECTION("another backend") {
    refused(args_for(write_config(dir, "d.yaml", "quant: {enabled: true, backend: default, method: minmax}\n"), dir / "x"),
            "is stale: the model or its quantization");
  }
  SECTION("a tensor missing from the cache") {
    const std::string edited = (dir / "edited.cache").string();
    write_text_file_atomic(edited, text.substr(0, text.rfind('\n', text.size() - 2) + 1));  // drop the last line
    fs::copy_file(cache + ".source.yaml", edited + ".source.yaml");
    CalibrateArgs a = args_for(cfg, dir / "x");
    a.cache = edited;
    refused(a, "does not match the model: it has no line for features.4.activation_post_process");
  }
  SECTION("a tensor the model does not have") {
    const std::string edited = (dir / "edited.cache").string();
    write_text_file_atomic(edited, text + "features.99.activation_post_process: 3c000000\n");
    fs::copy_file(cache + ".source.yaml", edited + ".source.yaml");
    CalibrateArgs a = args_for(cfg, dir / "x");
    a.cache = edited;
    refused(a, "names tensor features.99.activation_post_process, which the model does not have");
  }
  SECTION("garbage hex, a wrong header, no record, another calibrator") {
    const std::string edited = (dir / "edited.cache").string();
    fs::copy_file(cache + ".source.yaml", edited + ".source.yaml");
    CalibrateArgs a = args_for(cfg, dir / "x");
    a.cache = edited;
    std::string bad = text;
    bad.replace(bad.find(": ") + 2, 8, "3c0z0000");
    write_text_file_atomic(edited, bad);
    refused(a, "line 2: tensor features.0.input_fake_quant has scale '3c0z0000', not 8 hex digits");
    write_text_file_atomic(edited, "TRT-8601-Legacy\n" + text.substr(text.find('\n') + 1));
    refused(a, "names calibrator 'Legacy'");
    write_text_file_atomic(edited, text);
    a.calibrator = quant::Calibrator::max;
    refused(a, "holds entropy scales but --calibrator asks for max");
    a.calibrator.reset();
    fs::remove(edited + ".source.yaml");
    refused(a, "has no source record");
  }
  SECTION("a scale no calibrator writes: beyond the observed max, infinite, below the grid's floor") {
    const std::string edited = (dir / "edited.cache").string();
    fs::copy_file(cache + ".source.yaml", edited + ".source.yaml");
    CalibrateArgs a = args_for(cfg, dir / "x");
    a.cache = edited;
    for (const auto& [hex, why] : std::vector<std::pair<std::string, std::string>>{
             {"7f7fffff", "has threshold inf"}, {"49742400", "beyond its observed max |x|"},
             {"00000001", "below the smallest scale the grid allows"}}) {
      std::string bad = text;
      bad.replace(bad.find(": ") + 2, 8, hex);
      write_text_file_atomic(edited, bad);
      refused(a, "tensor features.0.input_fake_quant has " + std::string(hex == "00000001" ? "scale" : "threshold"));
      refused(a, why);
    }
  }
  SECTION("a new cache in a folder that does not exist: refused before anything is written") {
    CalibrateArgs a = args_for(cfg, dir / "x");
    a.cache = (dir / "no" / "such" / "c.cache").string();
    refused(a, "--cache " + a.cache + ": its folder " + (dir / "no" / "such").string() + " does not exist");
  }
  // Issue 39's case 6: the record's ranges and the cache's scale edited
  // together passed every check above, and the model evaluated at chance.
  SECTION("an edited record (ranges, a digest, a range dropped), an edited cache, a record without its digest") {
    const std::string edited = (dir / "edited.cache").string(), rec = read_text_file(cache + ".source.yaml");
    CalibrateArgs a = args_for(cfg, dir / "x");
    a.cache = edited;
    const size_t at = rec.find("  features.4.activation_post_process: [");
    REQUIRE(at != std::string::npos);
    const size_t lo = rec.find('[', at) + 1, comma = rec.find(',', lo), hi_end = rec.find(']', comma);
    // The range of features.4's input widened 1000x, and its cache scale with it.
    std::string wide = rec;
    wide.replace(comma + 2, hi_end - comma - 2, "1000");
    const size_t line = text.find("features.4.activation_post_process: ");
    REQUIRE(line != std::string::npos);
    std::string big = text;
    big.replace(line + std::strlen("features.4.activation_post_process: "), 8, "40000000");  // 2.0: threshold 254
    write_text_file_atomic(edited, big);
    write_text_file_atomic(edited + ".source.yaml", wide);
    refused(a, "calibration record " + edited + ".source.yaml was edited: its record_sha256");
    // A record whose digest line was rewritten to match the edit still
    // names the cache it was written with.
    const size_t d = wide.rfind("record_sha256:");
    std::string redigested = wide.substr(0, d);
    redigested += "record_sha256: " + sha256_text(redigested) + "\n";
    write_text_file_atomic(edited + ".source.yaml", redigested);
    refused(a, "calibration cache " + edited + " is not the file its record " + edited + ".source.yaml was written "
               "with");
    // The cache alone edited to a scale every other check accepts (within the observed range).
    std::string smaller = text;
    const size_t s0 = smaller.find(": ") + 2;
    const uint32_t bits = static_cast<uint32_t>(std::stoul(smaller.substr(s0, 8), nullptr, 16)) - 1;
    char hex[9];
    std::snprintf(hex, sizeof hex, "%08x", bits);
    smaller.replace(s0, 8, hex);
    write_text_file_atomic(edited, smaller);
    write_text_file_atomic(edited + ".source.yaml", rec);
    refused(a, "is not the file its record");
    // A range dropped from the record.
    write_text_file_atomic(edited, text);
    std::string dropped = rec;
    dropped.erase(at, rec.find('\n', at) + 1 - at);
    write_text_file_atomic(edited + ".source.yaml", dropped);
    refused(a, "was edited");
    // A record of a qat before the digest (or cut short).
    write_text_file_atomic(edited + ".source.yaml", rec.substr(0, rec.rfind("record_sha256:")));
    refused(a, "has no record_sha256: line");
    // Untouched, the pair is accepted.
    write_text_file_atomic(edited + ".source.yaml", rec);
    CHECK(run_calibrate(a) == 0);
  }
}

TEST_CASE("a percentile cache is reused only at the same percentile", "[e2e][calibration]") {
  const fs::path dir = testing::fresh_temp_dir("qat_calib_", "pct");
  const std::string cfg = write_config(dir, "q.yaml", kTensorRt);
  CalibrateArgs a = args_for(cfg, dir / "out");
  a.calibrator = quant::Calibrator::percentile;
  a.percentile = 99.9;
  REQUIRE(run_calibrate(a) == 0);
  CalibrateArgs b = args_for(cfg, dir / "again");
  b.cache = (dir / "out" / "calibration.cache").string();
  b.calibrator = quant::Calibrator::percentile;
  b.percentile = 99.99;
  REQUIRE_THROWS_WITH(run_calibrate(b), Contains("holds percentile 99.9 scales but --percentile asks for 99.99"));
  b.percentile = 99.9;
  CHECK(run_calibrate(b) == 0);
}

TEST_CASE("QAT refuses a calibration made for other quantization", "[e2e][calibration]") {
  const fs::path dir = testing::fresh_temp_dir("qat_calib_", "mismatch");
  REQUIRE(run_calibrate(args_for(write_config(dir, "q8.yaml", "quant: {enabled: true, bits: 8}\n"), dir / "cal")) == 0);
  const std::string calibrated = (dir / "cal" / "calibrated.safetensors").string();
  const ExperimentConfig w4 = load_config(
      write_config(dir, "w4.yaml", "quant: {enabled: true, method: lsq, bits: 4, init_from: " + calibrated + "}\n"));
  REQUIRE_THROWS_WITH(build_model(w4, true, false), Contains("was calibrated for other quantization") &&
                                                        Contains("uint4") && Contains("uint8"));
}

TEST_CASE("qat calibrate --compare reports every calibrator against FP32", "[e2e][calibration]") {
  const fs::path dir = testing::fresh_temp_dir("qat_calib_", "compare");
  CalibrateArgs a = args_for(write_config(dir, "q.yaml", "quant: {enabled: true, backend: default, method: minmax}\n"),
                             dir / "out");
  a.compare = true;
  CalibrateReport rep;
  REQUIRE(run_calibrate(a, &rep) == 0);
  REQUIRE(rep.results.size() == 4);
  const EvalSummary fp32 = eval_checkpoint({(fp32_dir() / "fp32.yaml").string(), {}, fp32_checkpoint()});
  CHECK(rep.fp32_top1 == fp32.top1);
  const std::string table = read_text_file((dir / "out" / "calibrators.md").string());
  for (const char* c : {"| max |", "| percentile |", "| mse |", "| entropy |", "| FP32 (no quantization) |"})
    CHECK_THAT(table, Contains(c));
  CHECK(read_text_file((dir / "out" / "calibrators.svg").string()).find("<svg") == 0);
  // The checkpoint written is the entropy calibration: qat eval gives the table's figure.
  const EvalSummary e = eval_checkpoint({(dir / "out" / "config.yaml").string(), {},
                                         (dir / "out" / "calibrated.safetensors").string()});
  CHECK(e.top1 >= 0);
  a.cache = "x.cache";
  REQUIRE_THROWS_WITH(run_calibrate(a), Contains("takes no --cache"));
}

TEST_CASE("QAT starts from a calibration: activation scales from it, LSQ steps learned from there", "[e2e][calibration]") {
  const fs::path dir = testing::fresh_temp_dir("qat_calib_", "init");
  const std::string quant = "quant: {enabled: true, backend: default, method: minmax, bits: 4}\n";
  REQUIRE(run_calibrate(args_for(write_config(dir, "q.yaml", quant), dir / "cal")) == 0);
  const std::string calibrated = (dir / "cal" / "calibrated.safetensors").string();
  const std::string lsq = "quant: {enabled: true, backend: default, method: lsq, bits: 4, init_from: " + calibrated + "}\n";
  const ExperimentConfig cfg = load_config(write_config(dir, "lsq.yaml", lsq));
  ModulePtr m = build_model(cfg, true, false);
  const TensorMap cal = testing::checkpoint_model_tensors(calibrated);
  int64_t checked = 0;
  for (auto& [name, mod] : m->named_modules()) {
    auto* f = dynamic_cast<quant::FakeQuantizer*>(mod);
    if (!f || f->config().is_weight) continue;
    INFO(name);
    CHECK(testing::same_bits(f->qparams().scale, cal.at("model." + name + ".scale")));
    for (auto& [p, t] : f->named_parameters())
      if (p == "step") CHECK(testing::same_bits(t, cal.at("model." + name + ".scale")));
    ++checked;
  }
  CHECK(checked == 3);
  // The float weights are the FP32 model's.
  const TensorMap fp32 = testing::checkpoint_model_tensors(fp32_checkpoint());
  for (auto& [name, t] : m->named_parameters())
    if (fp32.count("model." + name)) CHECK(testing::same_bits(t, fp32.at("model." + name)));
  // And it trains.
  REQUIRE(run_train({(dir / "lsq.yaml").string(), {}, ""}) == 0);
}
