// Data-parallel training on MPI (docs/distributed.md): `mpirun -np 2 qat
// train` against one process with the same global batch, through the real
// launcher (one thread per rank). Skipped, with the reason, where qat was
// built without MPI or mpirun is missing.
#include "tests/test_util.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>

#include "apps/mpi_run.h"
#include "core/safetensors.h"

using namespace qat;

namespace {

bool mpi_here() {
  if (!apps::mpi_built()) {
    WARN("qat built without MPI: data-parallel tests skipped");
    return false;
  }
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) {
    WARN("no mpirun on PATH: data-parallel tests skipped");
    return false;
  }
  return true;
}

std::string launcher(int ranks) {
  std::ostringstream os;
  // shared memory without CMA (containers often forbid it); the sanitizer
  // build's leak check off in the ranks (Open MPI's own allocations at exit)
  os << "mpirun -np " << ranks << " --oversubscribe" << (::geteuid() == 0 ? " --allow-run-as-root" : "")
     << " --mca btl self,vader --mca btl_vader_single_copy_mechanism none"
     << " -x ASAN_OPTIONS=detect_leaks=0:abort_on_error=1";
  return os.str();
}

// Runs a shell command, its output into `log`; the exit status.
int run(const std::string& cmd, const std::filesystem::path& log) {
  const int rc = std::system((cmd + " > " + log.string() + " 2>&1").c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string config(const std::filesystem::path& dir, const std::string& quant, int epochs,
                   const std::string& model = "{name: small_cnn, num_classes: 10}") {
  const std::string path = (dir / "cfg.yaml").string();
  std::ofstream(path) << "model: " << model << "\n"
                      << "data:\n  train: " << testing::sample_data_dir() << "/train\n  val: "
                      << testing::sample_data_dir() << "/val\n  image_size: 32\n  resize: 36\n  workers: 1\n"
                      << "train:\n  epochs: " << epochs << "\n  batch_size: 16\n  lr: 0.05\n  seed: 3\n  threads: 1\n"
                      << "  max_steps_per_epoch: 6\n  sync_bn: true\n"
                      << quant << "output: {dir: " << (dir / "unused").string() << "}\n";
  return path;
}

std::string train_cmd(const std::string& cfg, const std::filesystem::path& out, const std::string& extra = "") {
  return std::string(QAT_BINARY) + " train " + cfg + " --set output.dir=" + out.string() + extra;
}

// Every tensor of two checkpoints (weights, buffers, optimizer state):
// the largest difference relative to the tensor's largest magnitude.
double worst_relative_difference(const std::filesystem::path& a, const std::filesystem::path& b) {
  const SafetensorsFile fa = load_safetensors(a.string()), fb = load_safetensors(b.string());
  REQUIRE(fa.tensors.size() == fb.tensors.size());
  double worst = 0;
  for (const auto& [name, ta] : fa.tensors) {
    INFO(name);
    REQUIRE(fb.tensors.count(name) == 1);
    const Tensor& tb = fb.tensors.at(name);
    REQUIRE(ta.sizes() == tb.sizes());
    if (ta.dtype() != DType::f32) continue;
    const std::vector<float> va = ta.to_vector(), vb = tb.to_vector();
    double scale = 0, diff = 0;
    for (size_t i = 0; i < va.size(); ++i) {
      if (std::isinf(va[i]) && va[i] == vb[i]) continue;
      scale = std::max(scale, static_cast<double>(std::abs(va[i])));
      diff = std::max(diff, static_cast<double>(std::abs(va[i] - vb[i])));
    }
    if (scale > 0) worst = std::max(worst, diff / scale);
  }
  return worst;
}

// Reduction order differs (the batch-norm sums and the gradients of two
// halves summed across processes instead of one sum over the batch), so the
// runs part by float rounding. After one step that is all: the largest
// relative difference measured (AMD Zen 5, convolutions on oneDNN) is
// 2.7e-6 (FP32) to 3.0e-6 (QAT), on the gradient in the momentum buffer.
constexpr double kStepTolerance = 1e-5;
// Over a whole run (12 steps) a rounding difference can also flip a
// discrete choice in one run and not the other: a ReLU or ReLU6 at its
// edge, a max-pool's winner, a fake-quantized value's step. A flip moves the
// state by far more than rounding does: 1.1e-4 (QAT small_cnn) and 5.9e-3
// (the graph model's momentum) were seen in builds where it happened, where
// other builds stayed under 1e-5. The errors these tests are for move it by
// 0.06 or more (the graph model, measured: a learning rate 1% off 0.062,
// batch norm not synchronised 0.60, a gradient twice its share 1.03), and
// each breaks the one-step check by far more.
constexpr double kRunTolerance = 2e-2;

// One step of cfg on one process and on two (with `extra` options): the
// same state within kStepTolerance.
void check_one_step(const std::string& cfg, const std::filesystem::path& dir, const std::string& extra) {
  const std::string one_step = " --set train.epochs=1 --set train.max_steps_per_epoch=1";
  REQUIRE(run(train_cmd(cfg, dir / "step_one", one_step), dir / "step_one.log") == 0);
  REQUIRE(run(launcher(2) + " " + train_cmd(cfg, dir / "step_two", one_step + extra), dir / "step_two.log") == 0);
  const double worst =
      worst_relative_difference(dir / "step_one" / "last.safetensors", dir / "step_two" / "last.safetensors");
  INFO("one step: largest relative difference " << worst);
  CHECK(worst < kStepTolerance);
}

}  // namespace

TEST_CASE("mpirun -np 2: FP32 and QAT small_cnn equal one process with the same global batch", "[mpi]") {
  if (!mpi_here()) return;
  for (const std::string& quant : {std::string(""), std::string("quant: {enabled: true, method: moving_average}\n")}) {
    INFO(quant);
    const auto dir = testing::fresh_temp_dir("qat_mpi_", quant.empty() ? "fp32" : "qat");
    const std::string cfg = config(dir, quant, 2);
    REQUIRE(run(train_cmd(cfg, dir / "one"), dir / "one.log") == 0);
    // FP32 with the gradient sums on the training thread, QAT with the
    // communication thread overlapping backward (auto picks off here: 2
    // processes of 1 thread leave no core for it on a 2-core machine)
    const std::string overlap = quant.empty() ? "off" : "on";
    REQUIRE(run(launcher(2) + " " + train_cmd(cfg, dir / "two", " --set train.overlap_allreduce=" + overlap),
                dir / "two.log") == 0);
    const std::string log = slurp(dir / "two.log");
    INFO(log);
    CHECK(log.find(overlap == "on" ? "overlapping backward" : "as buckets complete, blocking") != std::string::npos);
    CHECK(log.find("2 processes hold the same model, bit for bit") != std::string::npos);
    check_one_step(cfg, dir, " --set train.overlap_allreduce=" + overlap);
    const double worst = worst_relative_difference(dir / "one" / "last.safetensors", dir / "two" / "last.safetensors");
    INFO("largest relative difference " << worst);
    CHECK(worst < kRunTolerance);
    // batch norm per process: not the single-process result, but still one
    // model on every rank (the running statistics averaged every step)
    REQUIRE(run(launcher(2) + " " + train_cmd(cfg, dir / "per_rank_bn", " --set train.sync_bn=false"),
                dir / "per_rank_bn.log") == 0);
    CHECK(slurp(dir / "per_rank_bn.log").find("2 processes hold the same model, bit for bit") != std::string::npos);
  }
}

TEST_CASE("mpirun: resume from 2 processes with 1 and from 1 with 2", "[mpi]") {
  if (!mpi_here()) return;
  const auto dir = testing::fresh_temp_dir("qat_mpi_", "resume");
  const std::string cfg = config(dir, "", 2);
  REQUIRE(run(train_cmd(cfg, dir / "whole"), dir / "whole.log") == 0);
  // 2 -> 1: 4 steps on two processes, the rest on one
  CHECK(run(launcher(2) + " " + train_cmd(cfg, dir / "a", " --stop-after-steps 4"), dir / "a1.log") == 130);
  REQUIRE(run(std::string(QAT_BINARY) + " train " + cfg + " --resume " + (dir / "a").string(), dir / "a2.log") == 0);
  // 1 -> 2
  CHECK(run(train_cmd(cfg, dir / "b", " --stop-after-steps 7"), dir / "b1.log") == 130);
  REQUIRE(run(launcher(2) + " " + std::string(QAT_BINARY) + " train " + cfg + " --resume " + (dir / "b").string(),
              dir / "b2.log") == 0);
  CHECK(worst_relative_difference(dir / "whole" / "last.safetensors", dir / "a" / "last.safetensors") < kRunTolerance);
  CHECK(worst_relative_difference(dir / "whole" / "last.safetensors", dir / "b" / "last.safetensors") < kRunTolerance);
}

TEST_CASE("mpirun: a rank killed mid-run ends the job with an error within seconds", "[mpi]") {
  if (!mpi_here()) return;
  const auto dir = testing::fresh_temp_dir("qat_mpi_", "kill");
  std::string cfg = config(dir, "", 1000);  // far longer than the test waits
  // rank 1 is killed (SIGKILL) two seconds in; the shell execs qat, so $$ is qat's pid
  const std::string cmd = launcher(2) + " sh -c 'if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then (sleep 2; kill -9 $$) & fi; "
                          "exec " + train_cmd(cfg, dir / "run") + "'";
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = run("timeout 60 " + cmd, dir / "kill.log");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(slurp(dir / "kill.log"));
  CHECK(rc != 0);
  CHECK(rc != 124);  // not the timeout: the job ended by itself
  CHECK(secs < 30);
}

TEST_CASE("mpirun: validation failing on rank 1 only keeps the epoch rank 0 trained, for --resume", "[mpi]") {
  if (!mpi_here()) return;
  const auto dir = testing::fresh_temp_dir("qat_mpi_", "valfail");
  const std::string cfg = config(dir, "", 2);
  // rank 1 alone reads a copy of the validation set whose every image is cut short
  std::filesystem::copy(testing::sample_data_dir() + "/val", dir / "bad_val", std::filesystem::copy_options::recursive);
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir / "bad_val"))
    if (e.is_regular_file()) std::filesystem::resize_file(e.path(), e.file_size() / 3);
  const std::string run_dir = (dir / "run").string();
  const std::string cmd = launcher(2) + " sh -c 'if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then v=" +
                          (dir / "bad_val").string() + "; else v=" + testing::sample_data_dir() + "/val; fi; exec " +
                          train_cmd(cfg, dir / "run", " --set data.cache=false --set data.val=$v") + "'";
  const int rc = run("timeout 120 " + cmd, dir / "fail.log");
  const std::string log = slurp(dir / "fail.log");
  INFO(log);
  CHECK(rc != 0);
  CHECK(rc != 124);
  CHECK(log.find("error on rank 1 of 2") != std::string::npos);
  CHECK(log.find("truncated or corrupt") != std::string::npos);
  CHECK(log.find("validation failed on 1 of 2 processes (the first: rank 1") != std::string::npos);
  CHECK(log.find("saved it in " + run_dir) != std::string::npos);
  const Metadata m = load_safetensors_metadata(run_dir + "/last.safetensors");
  CHECK(m.at("epoch") == "0");
  CHECK(m.at("step") == "6");
  // fixed data: the saved epoch is validated, not trained again, and the run goes on
  REQUIRE(run(launcher(2) + " " + std::string(QAT_BINARY) + " train " + cfg + " --resume " + run_dir, dir / "resume.log") ==
          0);
  const std::string resumed = slurp(dir / "resume.log");
  INFO(resumed);
  CHECK(resumed.find("resuming " + run_dir + " at epoch 1 step 6") != std::string::npos);
  REQUIRE(std::filesystem::exists(dir / "run" / "metrics.csv"));
  const std::string metrics = slurp(dir / "run" / "metrics.csv");
  CHECK(std::count(metrics.begin(), metrics.end(), '\n') == 3);  // the header and both epochs
}

TEST_CASE("mpirun -np 2: INT8 training keeps one model on both processes", "[mpi]") {
  if (!mpi_here()) return;
  const auto dir = testing::fresh_temp_dir("qat_mpi_", "int8");
  // Each process quantizes its own part of the gradients, with its own clip
  // values; their statistics are averaged after every backward, so both take
  // the same step (without that the learning-rate scales differ and the
  // digest check after each epoch stops the run).
  const std::string cfg = config(
      dir, "quant:\n  enabled: true\n  int8_training: {enabled: true, period: 3, keep_float: [fc]}\n", 2);
  REQUIRE(run(launcher(2) + " " + train_cmd(cfg, dir / "two", " --set train.overlap_allreduce=on"), dir / "two.log") ==
          0);
  const std::string log = slurp(dir / "two.log");
  INFO(log);
  CHECK(log.find("INT8 training") != std::string::npos);
  CHECK(log.find("2 processes hold the same model, bit for bit") != std::string::npos);
  const SafetensorsFile f = load_safetensors((dir / "two" / "last.safetensors").string());
  for (const auto& [name, t] : f.tensors)
    if (name.find(".int8.steps") != std::string::npos) CHECK(t.data<int32_t>()[0] == 12);  // 2 epochs x 6 steps
}

TEST_CASE("Ctrl-C on mpirun saves the run like a single process, given the time to", "[mpi]") {
  if (!mpi_here()) return;
  const auto dir = testing::fresh_temp_dir("qat_mpi_", "ctrl_c");
  const std::string cfg = config(dir, "", 1000);  // far longer than the test waits
  // On SIGINT, mpirun sends the ranks SIGTERM after odls_base_sigkill_timeout
  // seconds and SIGKILL as long again after that: 4 s is ample to end the
  // step and save small_cnn (docs/distributed.md).
  const std::string job = launcher(2) + " --mca odls_base_sigkill_timeout 4 " + train_cmd(cfg, dir / "run");
  const std::string cmd = "setsid sh -c '" + job + " & pid=$!; while [ ! -s " + (dir / "run" / "metrics.jsonl").string() +
                          " ]; do sleep 0.2; done; kill -INT $pid; wait $pid'";
  run("timeout 120 " + cmd, dir / "job.log");
  const std::string log = slurp(dir / "job.log");
  INFO(log);
  CHECK(log.find("qat: interrupted at epoch") != std::string::npos);
  REQUIRE(std::filesystem::exists(dir / "run" / "last.safetensors"));
  // the saved run resumes (for two steps) on two processes
  CHECK(run(launcher(2) + " " + std::string(QAT_BINARY) + " train " + cfg + " --resume " + (dir / "run").string() +
                " --stop-after-steps 2",
            dir / "resume.log") == 130);
  CHECK(slurp(dir / "resume.log").find("resuming") != std::string::npos);
}

TEST_CASE("mpirun refuses what data-parallel training cannot do yet, naming it", "[mpi]") {
  if (!mpi_here()) return;
  const auto dir = testing::fresh_temp_dir("qat_mpi_", "refuse");
  const std::string cfg = config(dir, "", 1);
  CHECK(run(launcher(2) + " " + train_cmd(cfg, dir / "r", " --set train.batch_size=1"), dir / "r.log") != 0);
  CHECK(slurp(dir / "r.log").find("smaller than the 2 processes") != std::string::npos);
  CHECK(run(launcher(2) + " " + std::string(QAT_BINARY) + " bench --steps 1", dir / "b.log") != 0);
  CHECK(slurp(dir / "b.log").find("only `qat train` runs as several MPI processes") != std::string::npos);
}

// Note [same run everywhere]: a process given another config, another copy of
// the training data or a stale checkpoint stops the job before it trains,
// every process naming what it has (they trained out of step: MPI then
// failed in its own words, or validation mixed two sets silently).
TEST_CASE("mpirun: processes with another config, other images or a stale checkpoint are refused before training",
          "[mpi]") {
  if (!mpi_here()) return;
  const auto dir = testing::fresh_temp_dir("qat_mpi_", "same_run");
  const std::string cfg = config(dir, "", 1);
  // rank 1 alone reads a copy of the training set without one image (its shard then has fewer steps)
  std::filesystem::copy(testing::sample_data_dir() + "/train", dir / "train_less",
                        std::filesystem::copy_options::recursive);
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir / "train_less"))
    if (e.is_regular_file()) {
      std::filesystem::remove(e.path());
      break;
    }
  const auto on_rank1 = [&](const std::string& rank1, const std::string& others, const std::filesystem::path& out) {
    return launcher(2) + " sh -c 'if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then s=\"" + rank1 + "\"; else s=\"" + others +
           "\"; fi; exec " + train_cmd(cfg, out, " $s") + "'";
  };
  struct Case {
    std::string name, rank1, others, what;
  };
  const std::vector<Case> cases = {
      {"config", "--set train.lr=0.01", "", "disagree on the config's train: section"},
      {"images", "--set data.train=" + (dir / "train_less").string(), "", "disagree on the training set ("}};
  // How a node reads its data is its own: another data.workers and data.cache on rank 1 trains.
  REQUIRE(run("timeout 120 " + on_rank1("--set data.workers=0 --set data.cache=true", "", dir / "run_reading"),
              dir / "reading.log") == 0);
  for (const Case& c : cases) {
    INFO(c.name);
    const auto out = dir / ("run_" + c.name);
    const int rc = run("timeout 120 " + on_rank1(c.rank1, c.others, out), dir / (c.name + ".log"));
    const std::string log = slurp(dir / (c.name + ".log"));
    INFO(log);
    CHECK(rc != 0);
    CHECK(rc != 124);
    CHECK(log.find("error on rank 0 of 2: data-parallel: the processes " + c.what) != std::string::npos);
    CHECK(log.find("error on rank 1 of 2: data-parallel: the processes " + c.what) != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(out / "last.safetensors"));
  }
  // A stale copy of the run on rank 1's node: stopped after 2 steps, copied, then 4 steps on.
  const auto run_dir = dir / "run", stale = dir / "run_stale";
  REQUIRE(run(launcher(2) + " " + train_cmd(cfg, run_dir) + " --stop-after-steps 2", dir / "stop1.log") != 0);
  std::filesystem::copy(run_dir, stale, std::filesystem::copy_options::recursive);
  std::filesystem::remove(stale / ".lock");
  REQUIRE(run(launcher(2) + " " + train_cmd(cfg, run_dir) + " --resume " + run_dir.string() +
                  " --stop-after-steps 2",
              dir / "stop2.log") != 0);
  const int rc = run("timeout 120 " + on_rank1("--resume " + stale.string(), "--resume " + run_dir.string(), run_dir),
                     dir / "stale.log");
  const std::string log = slurp(dir / "stale.log");
  INFO(log);
  CHECK(rc != 0);
  CHECK(rc != 124);
  CHECK(log.find("disagree on the checkpoint resumed from") != std::string::npos);
  CHECK(log.find("has epoch 0 step 2, model SHA-256") != std::string::npos);
  CHECK(log.find("has epoch 0 step 4, model SHA-256") != std::string::npos);
}

// A graph model from a model file: residual adds, a depthwise conv, a
// concat, batch norm in blocks (synchronised across ranks).
TEST_CASE("mpirun -np 2: a graph model (model.file) equals one process, and resumes on one", "[mpi][model_file]") {
  if (!mpi_here()) return;
  const auto dir = testing::fresh_temp_dir("qat_mpi_", "graph");
  std::ofstream(dir / "net.yaml") << R"(name: tiny_graph
blocks:
  res:
    params: [c]
    nodes:
      - {name: dw, op: conv2d, in: $c, out: $c, kernel: 3, padding: 1, groups: $c, bias: false}
      - {name: bn, op: batch_norm, channels: $c}
      - {name: relu, op: relu6}
      - {name: pw, op: conv2d, in: $c, out: $c, kernel: 1, bias: false}
      - {name: bn2, op: batch_norm, channels: $c}
      - {name: add, op: add, inputs: [bn2, input]}
nodes:
  - {name: stem, op: conv2d, in: 3, out: 8, kernel: 3, stride: 2, padding: 1, bias: false}
  - {name: bn, op: batch_norm, channels: 8}
  - {name: relu, op: relu}
  - {name: "layer.{i}", block: res, repeat: 2, args: {c: 8}}
  - {name: cat, op: concat, inputs: [relu, layer.1]}
  - {name: pool, op: adaptive_avg_pool}
  - {name: flat, op: flatten}
  - {name: fc, op: linear, in: 16, out: $num_classes}
)";
  const std::string cfg = config(dir, "", 2, "{file: net.yaml, num_classes: 10}");
  REQUIRE(run(train_cmd(cfg, dir / "one"), dir / "one.log") == 0);
  REQUIRE(run(launcher(2) + " " + train_cmd(cfg, dir / "two"), dir / "two.log") == 0);
  INFO(slurp(dir / "two.log"));
  CHECK(slurp(dir / "two.log").find("2 processes hold the same model, bit for bit") != std::string::npos);
  check_one_step(cfg, dir, "");
  CHECK(worst_relative_difference(dir / "one" / "last.safetensors", dir / "two" / "last.safetensors") < kRunTolerance);
  CHECK(run(launcher(2) + " " + train_cmd(cfg, dir / "a", " --stop-after-steps 4"), dir / "a1.log") == 130);
  REQUIRE(run(std::string(QAT_BINARY) + " train " + cfg + " --resume " + (dir / "a").string(), dir / "a2.log") == 0);
  CHECK(worst_relative_difference(dir / "one" / "last.safetensors", dir / "a" / "last.safetensors") < kRunTolerance);
  // eval of the best checkpoint through the same config: the run's best val top-1
  CHECK(run(std::string(QAT_BINARY) + " eval " + cfg + " --checkpoint " + (dir / "one" / "best.safetensors").string(),
            dir / "eval.log") == 0);
  const std::string one = slurp(dir / "one.log"), key = "best val top-1 ";
  const size_t at = one.find(key);
  REQUIRE(at != std::string::npos);
  const std::string best = one.substr(at + key.size(), one.find('%', at) - at - key.size());
  INFO(slurp(dir / "eval.log"));
  CHECK(slurp(dir / "eval.log").find("100 images, loss") != std::string::npos);
  CHECK(slurp(dir / "eval.log").find("top-1 " + best + "%") != std::string::npos);
  // compare of the two runs: the table (738 float weights: 3.0 kB) and a timed inference of each
  REQUIRE(run(std::string(QAT_BINARY) + " compare " + (dir / "one").string() + " " + (dir / "two").string() +
                  " --speed-batch 2 --out " + (dir / "cmp").string(),
              dir / "cmp.log") == 0);
  const std::string table = slurp(dir / "cmp" / "compare.md");
  INFO(table);
  CHECK(table.find("| one | 32/32 | fp32 | " + best + "%") != std::string::npos);
  CHECK(table.find("| 3.0 kB |") != std::string::npos);
  CHECK(table.find("img/s |") != std::string::npos);
}
