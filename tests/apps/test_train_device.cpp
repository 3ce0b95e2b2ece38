// train.device / --device (apps/device_check.h, Note [training device]): the
// key is validated like every other, leaves the config hash alone, and cuda
// is refused, naming whether the build, the GPU or the ops are missing, before
// the run directory is touched. Every branch of the refusal is checked on any
// machine (made-up device facts); the machine's own branch through qat train.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "apps/config.h"
#include "apps/device_check.h"
#include "apps/train.h"
#include "core/cuda_runtime.h"
#include "tests/test_util.h"

namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using qat::Device;
using namespace qat::apps;

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("train.device: cpu by default, cuda accepted, anything else refused naming key and line", "[config]") {
  qat::testing::TempDir t;
  const std::string cfg = qat::testing::write_sample_config(t.dir, "c.yaml", "", 1, 1);
  const ExperimentConfig a = load_config(cfg);
  CHECK(a.train.device == Device::cpu);
  const ExperimentConfig b = load_config(cfg, {"train.device=cuda"});
  CHECK(b.train.device == Device::cuda);
  // Written back and read again; where a run trains is not part of its hash.
  const std::string yaml = config_to_yaml(b);
  CHECK_THAT(yaml, Contains("device: cuda"));
  std::ofstream(t.file("back.yaml")) << yaml;
  CHECK(load_config(t.file("back.yaml")).train.device == Device::cuda);
  CHECK(config_hash(a) == config_hash(b));
  CHECK(config_hash(a) != config_hash(load_config(cfg, {"train.seed=4"})));
  const std::string bad = qat::testing::write_sample_config(t.dir, "bad.yaml", "", 1, 1, "run", "  device: gpu\n");
  CHECK_THROWS_WITH(load_config(bad), Contains("train.device") && Contains("cpu, cuda") && Contains("line 16"));
}

TEST_CASE("train.device: cuda is refused naming what is missing, the build, the GPU or the ops", "[config][cuda]") {
  qat::cuda::DeviceInfo none;
  none.reason = "cudaGetDeviceCount failed: cudaErrorNoDevice: no CUDA-capable device is detected";
  qat::cuda::DeviceInfo gpu;
  gpu.usable = true;
  gpu.count = 1;
  gpu.name = "NVIDIA H200";
  CHECK(training_device_refusal(Device::cpu, none, false).empty());
  CHECK(training_device_refusal(Device::cpu, gpu, true).empty());
  CHECK_THAT(training_device_refusal(Device::cuda, gpu, false),
             Contains("train.device: cuda: this qat was built without CUDA") &&
                 Contains("use train.device: cpu"));
  CHECK(training_device_refusal(Device::cuda, none, true) ==
        "train.device: cuda: no usable CUDA device: " + none.reason + "; use train.device: cpu");
  // A GPU, but not every op of the step on it: named, never a silent CPU run.
  const std::string ops = training_device_refusal(Device::cuda, gpu, true);
  CHECK_THAT(ops, Contains("train.device: cuda: NVIDIA H200 is present, but the training step cannot run on it yet: "
                           "conv2d, linear, batch_norm, SGD / AdamW updates"));
  CHECK_THAT(ops, Contains("SGD / AdamW updates") && Contains("have no CUDA kernels"));
  CHECK_THAT(ops, Contains("(on the GPU so far: relu, max_pool2d, adaptive_avg_pool2d, dropout, cross_entropy, "
                           "autograd's gradient sums (add_), fake_quantize)"));
  // The table: each op once; the twins count only where they are built.
  std::set<std::string> names;
  int on_built = 0, on_unbuilt = 0;
  for (const DeviceOpSupport& op : training_ops(true)) {
    CHECK(names.insert(op.op).second);
    on_built += op.on_device;
  }
  for (const DeviceOpSupport& op : training_ops(false)) on_unbuilt += op.on_device;
  CHECK(on_built == 7);
  CHECK(on_unbuilt == 0);
  // This machine.
  CHECK_NOTHROW(check_training_device(Device::cpu));
  CHECK_THROWS_WITH(check_training_device(Device::cuda),
                    training_device_refusal(Device::cuda, qat::cuda::device_info(), qat::cuda::built()));
}

TEST_CASE("qat train with --device cuda or train.device cuda refuses before touching the run directory",
          "[config][cuda]") {
  qat::testing::TempDir t;
  const std::string cfg = qat::testing::write_sample_config(t.dir, "c.yaml", "", 1, 1, "run_cli", "  device: cuda\n");
  const std::string want = training_device_refusal(Device::cuda, qat::cuda::device_info(), qat::cuda::built());
  // The config's key ...
  CHECK_THROWS_WITH(run_train({cfg, {}, ""}), want);
  // ... and the flag, which overrides it either way.
  const std::string plain = qat::testing::write_sample_config(t.dir, "p.yaml", "", 1, 1, "run_flag");
  TrainArgs flagged{plain, {}, ""};
  flagged.device = "cuda";
  CHECK_THROWS_WITH(run_train(flagged), want);
  CHECK_FALSE(fs::exists(t.dir / "run_cli"));
  CHECK_FALSE(fs::exists(t.dir / "run_flag"));
  TrainArgs on_cpu{cfg, {"output.dir=" + (t.dir / "run_cpu").string()}, ""};
  on_cpu.device = "cpu";
  CHECK(run_train(on_cpu) == 0);
  CHECK(fs::exists(t.dir / "run_cpu" / "last.safetensors"));
  // The command line: the error on stderr and a failing exit status.
  const fs::path log = t.dir / "cli.log";
  const std::string cmd =
      std::string(QAT_BINARY) + " train " + plain + " --device cuda > " + log.string() + " 2>&1";
  CHECK(std::system(cmd.c_str()) != 0);
  CHECK_THAT(slurp(log), Contains("qat: error: " + want));
  const std::string bad = std::string(QAT_BINARY) + " train " + plain + " --device gpu > " + log.string() + " 2>&1";
  CHECK(std::system(bad.c_str()) != 0);
  CHECK_THAT(slurp(log), Contains("--device") && Contains("gpu"));
}
