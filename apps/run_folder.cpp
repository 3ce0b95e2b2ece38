#include "apps/run_folder.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "apps/config.h"
#include "apps/metrics_log.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "core/text_file.h"

namespace qat::apps {

namespace fs = std::filesystem;

namespace {

// Whether a file holds nothing but white space.
bool blank_file(const std::string& path) {
  std::ifstream in(path);
  char c;
  while (in.get(c))
    if (!std::isspace(static_cast<unsigned char>(c))) return false;
  return true;
}

// Whether run_dir's metrics logs hold no epoch (a run that stopped before
// its first one left metrics.csv with its header only, metrics.jsonl empty).
bool no_metrics_rows(const std::string& run_dir) {
  try {
    if (!read_metrics(run_dir).empty()) return false;
  } catch (const Error&) {
    return false;  // malformed: not ours to overwrite
  }
  return blank_file(run_dir + "/metrics.jsonl");
}

}  // namespace

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  QAT_CHECK(f.good(), "cannot write ", path);
  f << text;
  f.flush();
  QAT_CHECK(f.good(), "writing ", path, " failed (disk full?)");
}

bool make_run_dir(const std::string& run_dir) {
  std::error_code ec;
  const bool made = !fs::exists(run_dir, ec);
  fs::create_directories(run_dir, ec);
  QAT_CHECK(!ec && fs::is_directory(run_dir), "train: output.dir '", run_dir, "' cannot be made a folder",
            ec ? ": " + ec.message() : std::string(" (a file of that name exists)"));
  return made;
}

namespace {
// What a folder that is no training run holds, for --resume's refusal.
std::string not_a_run(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(fs::path(dir) / "manifest.yaml", ec)) return "it is an export folder (qat export)";
  if (fs::exists(fs::path(dir) / "calibrated.safetensors", ec)) return "it is a calibration folder (qat calibrate)";
  return "no training run wrote an epoch there (a run stopped before its first epoch ended is trained afresh)";
}
}  // namespace

void check_resumable(const std::string& run_dir) {
  std::error_code ec;
  QAT_CHECK(fs::is_directory(run_dir, ec), "train: --resume ", run_dir, ": no such run directory");
  const std::string last = run_dir + "/last.safetensors", best = run_dir + "/best.safetensors";
  QAT_CHECK(fs::is_regular_file(last, ec), "train: --resume ", run_dir, " holds no last.safetensors: ",
            not_a_run(run_dir), "; --resume takes the folder of a training run");
  if (!fs::exists(best, ec)) return;
  // (config_hash_data_apart: the config, data folders aside; "" in checkpoints saved before it was recorded)
  auto config_of = [](const Metadata& m) {
    const auto it = m.find("config_hash_data_apart");
    return it == m.end() ? std::string() : it->second;
  };
  std::string of_best;
  try {
    of_best = config_of(load_safetensors_metadata(best));
  } catch (const Error&) {
    return;  // cut short by a stop during its save: restored from last (Note [epoch end order])
  }
  const std::string of_last = config_of(load_safetensors_metadata(last));
  QAT_CHECK(of_best.empty() || of_last.empty() || of_best == of_last, "train: --resume ", run_dir, ": ", best,
            " is not this run's (config_hash_data_apart ", of_best.substr(0, 16), "..., last.safetensors' ",
            of_last.substr(0, 16), "...: another run's checkpoint copied in?); move it away, or resume the run it "
            "belongs to");
}

void check_fresh_run_dir(const std::string& run_dir) {
  QAT_CHECK(!fs::exists(run_dir + "/last.safetensors"), "train: ", run_dir,
            " already holds a run (last.safetensors); resume it with --resume ", run_dir,
            " or choose another output.dir");
  const bool empty_log = no_metrics_rows(run_dir);
  std::vector<std::string> held;
  for (const auto& e : fs::directory_iterator(run_dir)) {
    const std::string name = e.path().filename().string();
    if (name == ".lock" || name.find(".safetensors.tmp.") != std::string::npos) continue;
    if (name == "config.yaml" && is_resolved_config(e.path().string())) continue;
    if (empty_log && (name == "metrics.csv" || name == "metrics.jsonl" || name == "metrics.csv.tmp" ||
                      name == "metrics.jsonl.tmp"))
      continue;
    held.push_back(name);
  }
  std::sort(held.begin(), held.end());
  std::string list;
  for (size_t i = 0; i < held.size() && i < 4; ++i) list += (i ? ", " : "") + held[i];
  if (held.size() > 4) list += ", ...";
  QAT_CHECK(held.empty(), "train: output.dir ", run_dir, " already holds ", held.size(), " file(s) a new run could ",
            "overwrite or mix with (", list, "); choose an empty or new output.dir, or remove them");
}

// (<name>.tmp.<tag>, core/safetensors.cpp)
void remove_stale_temporaries(const std::string& run_dir) {
  for (const auto& e : fs::directory_iterator(run_dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && name.find(".safetensors.tmp.") != std::string::npos) fs::remove(e.path());
  }
}

// Note [epoch end order]. At the end of an epoch the lead process writes
// last.safetensors, then best.safetensors (when the epoch is the best so
// far), then the epoch's rows of metrics.csv and metrics.jsonl, so that a
// row in the log means both checkpoints hold its epoch (qat sweep skips a
// combination whose log is complete). A process stopped in between leaves a
// last.safetensors ahead of the others; it carries its epoch's rows and the
// epoch of the best, so a resume appends the missing rows and, when that
// epoch was the best and best.safetensors is missing or older, copies
// last.safetensors (the same model and metadata) to it. Before this order
// the rows came first: a sweep skipped a run whose last epoch no checkpoint
// held, and a stop during the first save left a folder that could be neither
// resumed nor trained afresh.
namespace {

// The epoch a checkpoint's metadata records; -1 when it cannot be read.
int64_t recorded_epoch(const std::string& path) {
  try {
    const Metadata m = load_safetensors_metadata(path);
    const auto e = m.find("epoch");
    return e == m.end() ? -1 : std::stoll(e->second);
  } catch (const std::exception&) {  // unreadable (cut short, another file): stale either way
    return -1;
  }
}

}  // namespace

void restore_best_checkpoint(const std::string& run_dir, const RunState& state) {
  if (state.best_epoch == 0 || state.best_epoch != state.epoch || state.step != 0) return;
  const std::string best = run_dir + "/best.safetensors";
  std::error_code ec;
  if (fs::exists(best, ec) && recorded_epoch(best) >= state.best_epoch) return;  // current (or newer: left alone)
  const std::string tmp = best + ".tmp." + temporary_tag();
  fs::copy_file(run_dir + "/last.safetensors", tmp, fs::copy_options::overwrite_existing, ec);
  const int fd = ec ? -1 : ::open(tmp.c_str(), O_RDONLY);
  const bool synced = fd >= 0 && ::fsync(fd) == 0;
  if (fd >= 0) ::close(fd);
  if (!ec && !synced) ec = std::error_code(errno, std::generic_category());
  if (!ec) fs::rename(tmp, best, ec);
  if (!ec) sync_parent_folder(best);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    QAT_FAIL("train --resume: cannot copy ", run_dir, "/last.safetensors to ", best, ": ", ec.message());
  }
  std::printf("best.safetensors: copied from last.safetensors (epoch %lld, the best, top-1 %.2f%%; the run stopped "
              "before saving it)\n", static_cast<long long>(state.epoch), 100 * state.best_top1);
}

}  // namespace qat::apps
