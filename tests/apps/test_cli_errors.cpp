// The qat binary's own refusals of bad command-line values: plain words, a
// non-zero exit, nothing done.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/test_util.h"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

// Runs `qat <args>`: its exit status, its output (stdout and stderr) in *out.
int qat_run(const std::string& args, const fs::path& log, std::string* out) {
  const int rc = std::system((std::string(QAT_BINARY) + " " + args + " > " + log.string() + " 2>&1").c_str());
  std::ifstream in(log);
  std::stringstream s;
  s << in.rdbuf();
  *out = s.str();
  return rc;
}

}  // namespace

TEST_CASE("qat refuses a non-positive count with the value, in plain words", "[cli]") {
  qat::testing::TempDir t;
  std::string out;
  REQUIRE(qat_run("bench --classes 0", t.dir / "a.log", &out) != 0);
  CHECK_THAT(out, Contains("--classes: expected a number > 0, got '0'"));
  CHECK(out.size() < 300);  // no 300-digit bound
  REQUIRE(qat_run("bench --threads -1", t.dir / "b.log", &out) != 0);
  CHECK_THAT(out, Contains("--threads: expected a whole number from 0 to 1024, got '-1'"));
  // the cap train.threads has (bench ran 64 threads for 5000; infer took 100000)
  REQUIRE(qat_run("bench --threads 5000", t.dir / "b.log", &out) != 0);
  CHECK_THAT(out, Contains("--threads: expected a whole number from 0 to 1024, got '5000'"));
  REQUIRE(qat_run("infer " + t.dir.string() + " " + t.dir.string() + " --threads 100000", t.dir / "b.log", &out) != 0);
  CHECK_THAT(out, Contains("--threads: expected a whole number from 0 to 1024, got '100000'"));
}

TEST_CASE("qat compare refuses an --out that is a file before reading any run (here a folder that is not one)", "[cli]") {
  qat::testing::TempDir t;
  std::ofstream(t.dir / "afile") << "keep";
  std::string out;
  REQUIRE(qat_run("compare " + t.dir.string() + " --out " + (t.dir / "afile").string(),
                  t.dir / "c.log", &out) != 0);
  CHECK_THAT(out, Contains("compare: --out " + (t.dir / "afile").string() + " is a file, not a folder"));
  std::ifstream in(t.dir / "afile");
  std::string kept;
  in >> kept;
  CHECK(kept == "keep");
}

// The sweep's own scope holds a Ctrl-C that comes while a run sets up or
// validates (most of a tiny run's time); before, the next run cleared it and
// the sweep went on.
TEST_CASE("qat sweep stops on SIGTERM (as on Ctrl-C) within seconds, wherever the signal lands", "[cli][sweep]") {
  qat::testing::TempDir t;
  const std::string cfg = qat::testing::write_sample_config(t.dir, "cfg.yaml", "", 1, 1, "sw");
  std::string seeds;
  for (int i = 1; i <= 300; ++i) seeds += (i > 1 ? ", " : "") + std::to_string(i);
  std::ofstream(cfg, std::ios::app) << "sweep: {train.seed: [" << seeds << "]}\n";
  const std::string root = (t.dir / "sw").string();
  for (int trial = 0; trial < 3; ++trial) {
    fs::remove_all(root);
    // The sweep gets SIGTERM (a background job of sh ignores SIGINT) once its
    // first run has made its folder (the sweep's handler is in place from
    // then on; before, it is still checking its 300 configs, which can take
    // seconds on a loaded machine or under a sanitizer), then 0.3 s later per
    // trial, to land elsewhere. timeout's 60 s would be 124.
    const std::string cmd = "timeout 60 sh -c '" + std::string(QAT_BINARY) + " sweep " + cfg +
                            " & p=$!; while [ -z \"$(ls -A " + root + " 2>/dev/null)\" ]; do sleep 0.05; done; sleep " +
                            std::to_string(0.3 * trial) + "; kill -TERM $p; wait $p'";
    const int rc = std::system((cmd + " > " + (t.dir / "sw.log").string() + " 2>&1").c_str());
    INFO("trial " << trial);
    CHECK(WEXITSTATUS(rc) == 130);
  }
}

TEST_CASE("qat refuses counts past their range and NaN, before any work", "[cli]") {
  qat::testing::TempDir t;
  std::ofstream(t.dir / "c.yaml") << "x: 1\n";
  std::ofstream(t.dir / "w.safetensors") << "x";
  std::string out;
  // compare: 2^32 + 1 was read as batch 1
  REQUIRE(qat_run("compare " + t.dir.string() + " --speed-batch 4294967297", t.dir / "a.log", &out) != 0);
  CHECK_THAT(out, Contains("--speed-batch: expected a whole number from 0 to 4096, got '4294967297'"));
  // calibrate: CLI11's Range lets NaN through
  REQUIRE(qat_run("calibrate " + (t.dir / "c.yaml").string() + " --checkpoint " + (t.dir / "w.safetensors").string() +
                      " --percentile nan",
                  t.dir / "b.log", &out) != 0);
  CHECK_THAT(out, Contains("--percentile: expected a number from 1e-09 to 100, got 'nan'"));
  // data subset: -1 and 2^64 were taken as 2^64 - 1
  for (const std::string seed : {"-1", "18446744073709551616"}) {
    REQUIRE(qat_run("data subset --src " + t.dir.string() + " --out " + (t.dir / "o").string() + " --seed " + seed,
                    t.dir / "c.log", &out) != 0);
    CHECK_THAT(out, Contains("--seed: expected a whole number from 0 to 18446744073709551615, got '" + seed + "'"));
  }
  CHECK_FALSE(fs::exists(t.dir / "o"));
  // sensitivity: a --finetune-steps past int64 was clamped to 2^63 - 1
  REQUIRE(qat_run("sensitivity " + (t.dir / "c.yaml").string() + " --checkpoint " + (t.dir / "w.safetensors").string() +
                      " --finetune-steps 99999999999999999999999",
                  t.dir / "e.log", &out) != 0);
  CHECK_THAT(out, Contains("--finetune-steps: expected a whole number from 0 to 9223372036854775807, got "
                           "'99999999999999999999999'"));
  // bench: --checkpoint without --infer and --config was ignored
  REQUIRE(qat_run("bench --steps 1 --checkpoint " + (t.dir / "w.safetensors").string(), t.dir / "d.log", &out) != 0);
  CHECK_THAT(out, Contains("bench: --checkpoint goes with --infer and --config"));
}

TEST_CASE("qat bench --stem: refused for a model without a stem choice, and outside imagenet | small", "[cli]") {
  qat::testing::TempDir t;
  std::string out;
  REQUIRE(qat_run("bench --model alexnet_bn --stem small --steps 1 --warmup 0", t.dir / "a.log", &out) != 0);
  CHECK_THAT(out, Contains("--stem small does not apply to --model alexnet_bn"));
  REQUIRE(qat_run("bench --model resnet18 --stem tiny", t.dir / "b.log", &out) != 0);
  CHECK_THAT(out, Contains("--stem"));
}
