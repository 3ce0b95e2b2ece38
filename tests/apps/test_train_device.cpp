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
#include "apps/metrics_log.h"
#include "apps/train.h"
#include "core/cuda_runtime.h"
#include "tests/cuda_test_util.h"
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

TEST_CASE("train.device: cuda is refused naming what is missing, the build, the GPU or the step's ops",
          "[config][cuda]") {
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
  // Each step names exactly the ops it uses that have no twin yet, and the
  // ones it uses that have one; the ops it does not use, nowhere.
  TrainingStep qat_lsq;
  qat_lsq.quantized = qat_lsq.learned_scales = true;
  TrainingStep int8 = qat_lsq;
  int8.int8 = true;
  const std::string head = "train.device: cuda: NVIDIA H200 is present, but this training step cannot run on it yet: ";
  const std::string middle = " have no CUDA kernels (on the GPU so far: ";
  for (const TrainingStep& step : {TrainingStep{}, qat_lsq, int8}) {
    const std::string msg = training_device_refusal(Device::cuda, gpu, true, step);
    std::vector<std::string> missing, present;
    for (const DeviceOpSupport& op : training_ops(true))
      if (step_uses(step, op.used_by)) (op.on_device ? present : missing).push_back(op.op);
    INFO(msg);
    if (missing.empty()) {
      CHECK(msg.empty());
      continue;
    }
    REQUIRE(msg.rfind(head, 0) == 0);
    const size_t mid = msg.find(middle);
    REQUIRE(mid != std::string::npos);
    const std::string missing_part = msg.substr(head.size(), mid - head.size());
    const std::string present_part = msg.substr(mid + middle.size());
    auto join = [](const std::vector<std::string>& v) {
      std::string out;
      for (const std::string& x : v) out += (out.empty() ? "" : ", ") + x;
      return out;
    };
    CHECK(missing_part == join(missing));
    CHECK(present_part == (present.empty() ? "none" : join(present)) + "); use train.device: cpu");
  }
  CHECK(step_uses(int8, UsedBy::int8));
  CHECK_FALSE(step_uses(qat_lsq, UsedBy::int8));
  CHECK_FALSE(step_uses(TrainingStep{}, UsedBy::quantized));
  // The table: each op once; the twins count only where they are built.
  std::set<std::string> names;
  int on_built = 0, on_unbuilt = 0;
  for (const DeviceOpSupport& op : training_ops(true)) {
    CHECK(names.insert(op.op).second);
    on_built += op.on_device;
  }
  for (const DeviceOpSupport& op : training_ops(false)) on_unbuilt += op.on_device;
  CHECK(on_built > 0);
  CHECK(on_unbuilt == 0);
  // This machine (with a GPU, the FP32 step has every op there).
  CHECK_NOTHROW(check_training_device(Device::cpu));
  const std::string here = training_device_refusal(Device::cuda, qat::cuda::device_info(), qat::cuda::built());
  if (here.empty())
    CHECK_NOTHROW(check_training_device(Device::cuda));
  else
    CHECK_THROWS_WITH(check_training_device(Device::cuda), here);
}

TEST_CASE("a config's training step: FP32, quantized, learned scales, INT8", "[config]") {
  qat::testing::TempDir t;
  const std::string cfg = qat::testing::write_sample_config(t.dir, "c.yaml", "", 1, 1);
  const TrainingStep fp32 = training_step_of(load_config(cfg));
  CHECK_FALSE((fp32.quantized || fp32.learned_scales || fp32.int8));
  const TrainingStep q = training_step_of(load_config(cfg, {"quant.enabled=true"}));
  CHECK((q.quantized && !q.learned_scales && !q.int8));
  CHECK(training_step_of(load_config(cfg, {"quant.enabled=true", "quant.method=lsq_plus"})).learned_scales);
  CHECK(training_step_of(load_config(cfg, {"quant.enabled=true", "quant.int8_training.enabled=true"})).int8);
  const TrainingStep intfwd = training_step_of(load_config(cfg, {"quant.enabled=true", "quant.integer_forward=true"}));
  CHECK((intfwd.quantized && intfwd.integer_forward && !intfwd.int8));
  CHECK_FALSE(q.integer_forward);
}

TEST_CASE("qat train with --device cuda or train.device cuda refuses before touching the run directory",
          "[config][cuda]") {
  qat::testing::TempDir t;
  const std::string cfg = qat::testing::write_sample_config(t.dir, "c.yaml", "", 1, 1, "run_cli", "  device: cuda\n");
  const std::string want = training_device_refusal(Device::cuda, qat::cuda::device_info(), qat::cuda::built());
  const std::string bad = std::string(QAT_BINARY) + " train " + cfg + " --device gpu > " + (t.dir / "bad.log").string() +
                          " 2>&1";
  CHECK(std::system(bad.c_str()) != 0);
  CHECK_THAT(slurp(t.dir / "bad.log"), Contains("--device") && Contains("gpu"));
  if (want.empty()) {  // a GPU that runs this step: the sample runs there (the tests below)
    WARN("cuda runs this step here; its refusal is checked on machines without a GPU");
    return;
  }
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
  // eval runs where the config says too (it ran on the CPU whatever train.device said)
  const std::string ckpt = (t.dir / "run_cpu" / "last.safetensors").string();
  CHECK_THROWS_WITH(eval_checkpoint({cfg, {}, ckpt}), want);
  CHECK(eval_checkpoint({cfg, {"train.device=cpu"}, ckpt}).images > 0);
  // The command line: the error on stderr and a failing exit status.
  const fs::path log = t.dir / "cli.log";
  const std::string cmd =
      std::string(QAT_BINARY) + " train " + plain + " --device cuda > " + log.string() + " 2>&1";
  CHECK(std::system(cmd.c_str()) != 0);
  CHECK_THAT(slurp(log), Contains("qat: error: " + want));
}

// On a GPU: the sample trained on cuda follows the CPU run (the sums run in
// another order: cuDNN, cuBLAS; 8 steps keep that within 1e-4), the
// checkpoints are host files that evaluate on the CPU to the val figures the
// cuda run logged, and a run stopped on cuda resumes there.
TEST_CASE("qat train on cuda trains the sample as on the CPU, and its checkpoints evaluate on the CPU",
          "[cuda][e2e]") {
  if (!qat::testing::cuda_device_or_skip()) return;
  qat::testing::TempDir t;
  const std::string cfg = qat::testing::write_sample_config(t.dir, "c.yaml", "", 2, 4, "run_cpu");
  REQUIRE(run_train({cfg, {}, ""}) == 0);
  TrainArgs on_gpu{cfg, {"output.dir=" + (t.dir / "run_cuda").string()}, ""};
  on_gpu.device = "cuda";
  REQUIRE(run_train(on_gpu) == 0);
  const auto cpu = read_metrics((t.dir / "run_cpu").string()), gpu = read_metrics((t.dir / "run_cuda").string());
  REQUIRE(cpu.size() == 2);
  REQUIRE(gpu.size() == 2);
  for (size_t e = 0; e < 2; ++e) {
    INFO("epoch " << e + 1);
    CHECK(gpu[e].train_loss == Approx(cpu[e].train_loss).epsilon(1e-4));
    CHECK(gpu[e].val_loss == Approx(cpu[e].val_loss).epsilon(1e-4));
    CHECK(gpu[e].val_top1 == Approx(cpu[e].val_top1).margin(0.011));  // one image of 100 near a tie
  }
  const EvalSummary on_host = eval_checkpoint({cfg, {}, (t.dir / "run_cuda" / "last.safetensors").string()});
  CHECK(on_host.loss == Approx(gpu[1].val_loss).epsilon(1e-5));
  CHECK(on_host.top1 == Approx(gpu[1].val_top1).margin(0.011));
  const EvalSummary on_gpu_eval =
      eval_checkpoint({cfg, {"train.device=cuda"}, (t.dir / "run_cuda" / "last.safetensors").string()});
  CHECK(on_gpu_eval.loss == Approx(gpu[1].val_loss).epsilon(1e-5));  // the cuda run's own validation
  // Stopped after 6 steps (mid epoch 2) and resumed on cuda.
  TrainArgs stop{cfg, {"output.dir=" + (t.dir / "run_stop").string()}, ""};
  stop.device = "cuda";
  stop.stop_after_steps = 6;
  REQUIRE(run_train(stop) == 130);
  TrainArgs resume{cfg, {}, (t.dir / "run_stop").string()};
  resume.device = "cuda";
  REQUIRE(run_train(resume) == 0);
  const auto resumed = read_metrics((t.dir / "run_stop").string());
  REQUIRE(resumed.size() == 2);
  CHECK(resumed[1].val_loss == Approx(gpu[1].val_loss).epsilon(1e-4));
}

namespace {
// The sample trained one epoch of 4 steps with `quant` on the CPU and on
// cuda: the losses agree to 1e-3 (the QAT tolerance).
void require_cuda_run_follows_cpu(const std::string& quant) {
  INFO(quant);
  qat::testing::TempDir t;
  const std::string cfg = qat::testing::write_sample_config(t.dir, "c.yaml", quant, 1, 4, "run_cpu");
  REQUIRE(run_train({cfg, {}, ""}) == 0);
  TrainArgs on_gpu{cfg, {"output.dir=" + (t.dir / "run_cuda").string()}, ""};
  on_gpu.device = "cuda";
  REQUIRE(run_train(on_gpu) == 0);
  const auto cpu = read_metrics((t.dir / "run_cpu").string()), gpu = read_metrics((t.dir / "run_cuda").string());
  REQUIRE(cpu.size() == 1);
  REQUIRE(gpu.size() == 1);
  CHECK(gpu[0].train_loss == Approx(cpu[0].train_loss).epsilon(1e-3));
  CHECK(gpu[0].val_loss == Approx(cpu[0].val_loss).epsilon(1e-3));
}
}  // namespace

// On a GPU: INT8 training (integer GEMMs forward and backward, quantized
// gradients with direction-sensitive clipping and LR scaling) trains the
// sample on cuda as on the CPU: with observers on every layer, and with
// LSQ+ activations (a fractional zero point, read from a device parameter)
// on the unpadded classifier. The INT8 layers give the CPU's results bit for
// bit from the same inputs (tests/quant/int8_training/test_int8_device.cpp); the float
// ops around them (cuDNN batch norm, the fake quantizers' sums) run in
// another order, so the runs agree to the QAT tolerance.
TEST_CASE("INT8 training on cuda trains the sample as on the CPU", "[cuda][e2e]") {
  if (!qat::testing::cuda_device_or_skip()) return;
  const std::vector<std::string> sections = {
      "quant:\n  enabled: true\n  bits: 8\n  int8_training:\n    enabled: true\n    period: 2\n",
      "quant:\n  enabled: true\n  bits: 8\n  method: lsq_plus\n  int8_training:\n    enabled: true\n    period: 2\n"
      "    keep_float: [features.0, features.4]\n",
  };
  for (const std::string& quant : sections) require_cuda_run_follows_cpu(quant);
}

// On a GPU: QAT (8-bit observers with Conv+BN folding; 4-bit LSQ+) trains
// the sample on cuda as on the CPU, to the same tolerance as FP32 (the fake
// quantization is bit-exact; the sums around it run in another order, which
// can move a value across a rounding boundary of the grid: then the runs
// part by one grid step there, still far inside 1e-3 of the loss).
TEST_CASE("QAT on cuda trains the sample as on the CPU", "[cuda][e2e]") {
  if (!qat::testing::cuda_device_or_skip()) return;
  const std::vector<std::string> sections = {
      "quant:\n  enabled: true\n  bits: 8\n",
      "quant:\n  enabled: true\n  bits: 4\n  method: lsq_plus\n",
  };
  for (const std::string& quant : sections) require_cuda_run_follows_cpu(quant);
}

// On a GPU: QAT with the integer forward (the DP4A twin; its forward equals
// the CPU's bit for bit, tests/quant/sim/test_integer_forward_qat.cpp)
// trains the sample on cuda as on the CPU, to the QAT tolerance.
TEST_CASE("QAT with the integer forward on cuda trains the sample as on the CPU", "[cuda][e2e][intforward]") {
  if (!qat::testing::cuda_device_or_skip()) return;
  require_cuda_run_follows_cpu("quant:\n  enabled: true\n  bits: 8\n  integer_forward: true\n");
}
