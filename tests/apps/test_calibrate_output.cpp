// Issue 39's hostile cases on `qat calibrate --out` (Note [output folder]):
// the cache named onto one of the command's own outputs, a calibrate killed
// at several moments over an existing calibration, two calibrates into one
// folder, a refused calibrate, and the caches an earlier calibration left.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "tests/test_util.h"

#include "apps/calibrate_cmd.h"
#include "apps/file_digest.h"
#include "apps/integer_cmd.h"
#include "apps/output_folder.h"
#include "apps/train.h"
#include "core/text_file.h"

using namespace qat;
using namespace qat::apps;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

const char* kTensorRt = "quant: {enabled: true, backend: tensorrt, method: minmax}\n";

// One FP32 model per test process (a few training steps), and its folder.
const fs::path& fp32_dir() {
  static const fs::path dir = [] {
    const fs::path d = testing::fresh_temp_dir("qat_calout_", "fp32");
    REQUIRE(run_train({testing::write_sample_config(d, "fp32.yaml", "", 1, 4), {}, ""}) == 0);
    return d;
  }();
  return dir;
}

CalibrateArgs args_for(const std::string& config, const fs::path& out) {
  CalibrateArgs a;
  a.config = config;
  a.checkpoint = (fp32_dir() / "run" / "best.safetensors").string();
  a.images = 48;
  a.out_dir = out.string();
  return a;
}

// The folder's files and their digests; its staging folders (`.NAME.tmp-*`) beside it, by name.
using Snapshot = std::map<std::string, std::string>;
Snapshot snapshot(const fs::path& dir) {
  Snapshot s;
  if (!fs::exists(dir)) return s;
  for (const auto& e : fs::directory_iterator(dir)) s[e.path().filename().string()] = sha256_file(e.path().string());
  return s;
}

// Starts the qat binary with `args`, its output into `log`, and returns its
// pid. With `max_file_bytes`, each file it writes is limited to that size:
// the kernel stops it with SIGXFSZ at the first write past the limit, a stop
// at exactly that moment (its output then goes nowhere: the log would count).
pid_t start_qat(const std::vector<std::string>& args, const fs::path& log, rlim_t max_file_bytes = 0) {
  std::vector<std::string> all = {QAT_BINARY};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string out = max_file_bytes ? "/dev/null" : log.string();
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {  // only async-signal-safe calls until exec
    const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ::dup2(fd, 1) < 0 || ::dup2(fd, 2) < 0) ::_exit(126);
    if (max_file_bytes) {
      const rlimit lim{max_file_bytes, max_file_bytes};
      if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) ::_exit(126);
    }
    ::execv(QAT_BINARY, argv.data());
    ::_exit(127);
  }
  return pid;
}

// LLVM's OpenMP runtime (the Clang build's) registers each process in
// /dev/shm/__KMP_REGISTERED_LIB_<pid>_<uid> and removes the file at exit. A
// process killed before that leaves it behind, and one killed between
// creating and sizing it leaves it empty: a later process given the same pid
// reads the empty file at start-up and dies of SIGBUS (seen in CI, in
// unrelated tests). So the file of a child that a signal ended goes with it.
void forget_registration(pid_t pid) {
  std::error_code ec;
  fs::remove("/dev/shm/__KMP_REGISTERED_LIB_" + std::to_string(pid) + "_" + std::to_string(::getuid()), ec);
}

// start_qat, then `sig` after `after` (0: none); returns the wait status.
int spawn_qat(const std::vector<std::string>& args, std::chrono::microseconds after, int sig, const fs::path& log,
              rlim_t max_file_bytes = 0) {
  const pid_t pid = start_qat(args, log, max_file_bytes);
  if (after.count() > 0) {
    std::this_thread::sleep_for(after);
    ::kill(pid, sig);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  if (WIFSIGNALED(status)) forget_registration(pid);
  return status;
}

}  // namespace

// Issue 39's case 2: the cache was written over the command's own output
// (a 228 MB checkpoint became a 388-byte text file, exit 0).
TEST_CASE("qat calibrate refuses a --cache that is one of its own outputs, before writing anything", "[e2e][calibration]") {
  const fs::path dir = testing::fresh_temp_dir("qat_calout_", "cache_onto");
  const std::string cfg = testing::write_sample_config(dir, "q.yaml", kTensorRt, 1, 4);
  REQUIRE(run_calibrate(args_for(cfg, dir / "out")) == 0);
  const Snapshot before = snapshot(dir / "out");
  for (const char* name : {"calibrated.safetensors", "config.yaml", "calibrators.md", "calibrators.svg", "notes.txt"}) {
    INFO(name);
    CalibrateArgs a = args_for(cfg, dir / "out");
    a.cache = (dir / "out" / name).string();
    REQUIRE_THROWS_WITH(run_calibrate(a), Contains("calibrate: --cache " + a.cache + " lies in --out") &&
                                              Contains("a cache there must be a *.cache file directly in it"));
    CHECK(snapshot(dir / "out") == before);
  }
  // Into a folder that does not exist yet: refused, and no folder is left.
  CalibrateArgs a = args_for(cfg, dir / "new");
  a.cache = (dir / "new" / "config.yaml").string();
  REQUIRE_THROWS_WITH(run_calibrate(a), Contains("lies in --out"));
  CHECK_FALSE(fs::exists(dir / "new"));
  // The config or the checkpoint named inside --out would be replaced with it.
  fs::copy_file(cfg, dir / "mine.yaml");
  CalibrateArgs b = args_for(cfg, dir / "out");
  b.checkpoint = (dir / "out" / "calibrated.safetensors").string();
  REQUIRE_THROWS_WITH(run_calibrate(b), Contains("lies in --out"));
  CHECK(snapshot(dir / "out") == before);
}

// Issue 39's case 3: SIGTERM during calibrate over an existing calibration
// left the new config.yaml beside the old checkpoint (another image size),
// and qat eval of the pair exited 0 with a wrong loss.
TEST_CASE("a calibrate killed at any moment leaves the old calibration whole or the new one whole", "[e2e][calibration]") {
  const fs::path dir = testing::fresh_temp_dir("qat_calout_", "killed");
  const std::string cfg = testing::write_sample_config(dir, "q.yaml", kTensorRt, 1, 4);
  REQUIRE(run_calibrate(args_for(cfg, dir / "out")) == 0);
  const Snapshot old_out = snapshot(dir / "out");
  // The new calibration: other preprocessing, --compare (its report too).
  const std::vector<std::string> args = {"calibrate",   cfg,
                                         "--checkpoint", (fp32_dir() / "run" / "best.safetensors").string(),
                                         "--images",     "48",
                                         "--compare",    "--out",
                                         (dir / "out").string(), "--set", "data.resize=40"};
  // How long a whole run takes here, into another folder.
  std::vector<std::string> timed = args;
  timed[8] = (dir / "timing").string();
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(spawn_qat(timed, {}, 0, dir / "timing.log") == 0);
  const auto whole = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0);
  std::vector<Snapshot> seen;
  auto look = [&] {
    const Snapshot now = snapshot(dir / "out");
    if (now != old_out) seen.push_back(now);
    // Whichever it holds, qat eval reads it.
    CHECK(eval_checkpoint({(dir / "out" / "config.yaml").string(), {},
                           (dir / "out" / "calibrated.safetensors").string()})
              .images > 0);
  };
  // At moments through the run: SIGTERM and SIGKILL.
  for (int k = 0; k < 12; ++k) {
    const int sig = k % 2 ? SIGKILL : SIGTERM;
    const int status = spawn_qat(args, whole * (k + 1) / 12, sig, dir / "killed.log");
    INFO("stopped after " << (k + 1) << "/12 of a whole run by signal " << sig << ", wait status " << status);
    look();
  }
  // In the middle of each file it writes (the report, the config, the
  // checkpoint, the cache, its record): stopped by the file size limit.
  int stopped = 0;
  // (From 1 kB: LLVM's OpenMP runtime, which the Clang build links, sizes a
  // 1 kB registration file at start-up; a lower limit kills the process
  // there, before qat runs; see forget_registration.)
  for (rlim_t limit = 1024; limit <= 32768; limit += 512) {
    const int status = spawn_qat(args, {}, 0, dir / "limited.log", limit);
    INFO("files limited to " << limit << " bytes, wait status " << status);
    stopped += WIFSIGNALED(status) && WTERMSIG(status) == SIGXFSZ;
    look();
  }
  CHECK(stopped >= 8);  // (the checkpoint alone is ~13 kB: each 512 bytes below it stops the run)
  // Any folder not the old one is exactly the new calibration's (its report
  // too, whose calibration times differ from run to run: by name).
  REQUIRE(spawn_qat(args, {}, 0, dir / "last.log") == 0);
  const Snapshot new_out = snapshot(dir / "out");
  REQUIRE(new_out != old_out);
  REQUIRE(new_out.count("calibrators.md") == 1);
  auto timeless = [](Snapshot s) {
    for (const char* report : {"calibrators.md", "calibrators.svg", ".qat-output"})  // (the record has their digests)
      if (s.count(report)) s[report] = "present";
    return s;
  };
  for (const Snapshot& s : seen) CHECK(timeless(s) == timeless(new_out));
  // The killed runs' staging folders are gone after the run that followed them.
  for (const auto& e : fs::directory_iterator(dir)) CHECK(e.path().filename().string().find(".tmp-") == std::string::npos);
}

// Issue 39's case 4: the last of two concurrent calibrates won silently.
TEST_CASE("a calibrate into a folder another command is writing is refused, naming it", "[e2e][calibration]") {
  const fs::path dir = testing::fresh_temp_dir("qat_calout_", "concurrent");
  const std::string cfg = testing::write_sample_config(dir, "q.yaml", kTensorRt, 1, 4);
  REQUIRE(run_calibrate(args_for(cfg, dir / "out")) == 0);
  const Snapshot before = snapshot(dir / "out");
  {
    // What a calibrate holds while it runs (another process holds it the same way: flock).
    OutputFolder other({"calibrate", "--out", {"config.yaml", "calibrated.safetensors", "*.cache",
                                               "*.cache.source.yaml"}},
                       (dir / "out").string());
    REQUIRE_THROWS_WITH(run_calibrate(args_for(cfg, dir / "out")),
                        Contains("calibrate: --out " + (dir / "out").string() +
                                 " is being written by another qat command"));
    CHECK(snapshot(dir / "out") == before);
  }
  CHECK(run_calibrate(args_for(cfg, dir / "out")) == 0);
  // Two processes at once into a folder neither finds: each finishes or is
  // refused by the lock (the one refused must not remove the folder it made
  // while the other writes there), and the folder is whole.
  const std::vector<std::string> args = {"calibrate", cfg, "--checkpoint",
                                         (fp32_dir() / "run" / "best.safetensors").string(), "--images", "48", "--out",
                                         (dir / "race").string()};
  for (int round = 0; round < 5; ++round) {
    fs::remove_all(dir / "race");
    const pid_t a = start_qat(args, dir / "a.log"), b = start_qat(args, dir / "b.log");
    int sa = 0, sb = 0;
    REQUIRE(::waitpid(a, &sa, 0) == a);
    REQUIRE(::waitpid(b, &sb, 0) == b);
    INFO("round " << round << ": " << read_text_file((dir / "a.log").string()) << "\n---\n"
                  << read_text_file((dir / "b.log").string()));
    for (const auto& [status, log] : {std::pair{sa, dir / "a.log"}, {sb, dir / "b.log"}})
      CHECK((status == 0 || read_text_file(log.string()).find("is being written by another qat command") !=
                                std::string::npos));
    CHECK((sa == 0 || sb == 0));
    CHECK(eval_checkpoint({(dir / "race" / "config.yaml").string(), {},
                           (dir / "race" / "calibrated.safetensors").string()})
              .images > 0);
  }
}

TEST_CASE("a refused calibrate leaves no --out behind", "[e2e][calibration]") {
  const fs::path dir = testing::fresh_temp_dir("qat_calout_", "refused");
  const std::string cfg = testing::write_sample_config(dir, "q.yaml", kTensorRt, 1, 4);
  CalibrateArgs a = args_for(cfg, dir / "out");
  a.cache = (dir / "no" / "such" / "c.cache").string();
  REQUIRE_THROWS_WITH(run_calibrate(a), Contains("does not exist"));
  CHECK_FALSE(fs::exists(dir / "out"));
}

TEST_CASE("caches an earlier calibration left in --out are kept when the folder is replaced", "[e2e][calibration]") {
  const fs::path dir = testing::fresh_temp_dir("qat_calout_", "keep");
  const std::string cfg = testing::write_sample_config(dir, "q.yaml", kTensorRt, 1, 4);
  CalibrateArgs a = args_for(cfg, dir / "out");
  a.calibrator = quant::Calibrator::max;
  a.cache = (dir / "out" / "max.cache").string();
  REQUIRE(run_calibrate(a) == 0);
  const std::string max_cache = sha256_file(a.cache);
  CalibrateArgs b = args_for(cfg, dir / "out");  // entropy, the default cache
  REQUIRE(run_calibrate(b) == 0);
  const Snapshot s = snapshot(dir / "out");
  REQUIRE(s.count("max.cache") == 1);
  CHECK(s.at("max.cache") == max_cache);
  CHECK(s.count("max.cache.source.yaml") == 1);
  CHECK(s.count("calibration.cache") == 1);
  // Read back from the kept cache: calibration skipped, the same checkpoint as the max calibration.
  REQUIRE(run_calibrate(a) == 0);
  CHECK(snapshot(dir / "out").at("max.cache") == max_cache);
}
