#include "apps/metrics_log.h"

#include <filesystem>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>

#include "core/error.h"

namespace qat::apps {

namespace {

const char* kHeader =
    "epoch,train_loss,train_top1,val_loss,val_top1,val_top5,lr,epoch_time_s,images_per_s,data_wait_share";

std::string csv_row(const EpochMetrics& m) {
  char row[512];
  std::snprintf(row, sizeof row, "%lld,%.6f,%.6f,%.6f,%.6f,%.6f,%.8g,%.2f,%.2f,%.4f\n",
                static_cast<long long>(m.epoch), m.train_loss, m.train_top1, m.val_loss, m.val_top1, m.val_top5, m.lr,
                m.epoch_seconds, m.images_per_second, m.data_wait_share);
  return row;
}

std::string json_row(const EpochMetrics& m) {
  char row[512];
  std::snprintf(row, sizeof row,
                "{\"epoch\": %lld, \"train_loss\": %.6f, \"train_top1\": %.6f, \"val_loss\": %.6f, \"val_top1\": %.6f, "
                "\"val_top5\": %.6f, \"lr\": %.8g, \"epoch_time_s\": %.2f, \"images_per_s\": %.2f, "
                "\"data_wait_share\": %.4f",
                static_cast<long long>(m.epoch), m.train_loss, m.train_top1, m.val_loss, m.val_top1, m.val_top5, m.lr,
                m.epoch_seconds, m.images_per_second, m.data_wait_share);
  std::string r = row;
  if (!m.extra_json.empty()) {
    r += ", ";
    r += m.extra_json;
  }
  r += "}\n";
  return r;
}

// The lines of metrics.jsonl by epoch (each starts {"epoch": N,).
std::map<int64_t, std::string> json_lines(const std::string& path) {
  std::map<int64_t, std::string> out;
  std::ifstream in(path);
  std::string line;
  const std::string head = "{\"epoch\": ";
  while (std::getline(in, line)) {
    if (line.rfind(head, 0) != 0) continue;
    long long e = 0;
    if (std::sscanf(line.c_str() + head.size(), "%lld", &e) == 1) out[e] = line + "\n";
  }
  return out;
}

// Appends (or, truncating, replaces) a file and checks that every byte got
// to the file system: a full disk is reported at this write.
void write_checked(const std::string& path, const std::string& text, std::ios::openmode mode) {
  std::ofstream f(path, mode);
  QAT_CHECK(f.good(), "metrics: cannot open ", path, " for writing");
  f << text;
  f.flush();
  QAT_CHECK(f.good(), "metrics: writing ", path, " failed (disk full?)");
}

bool parse_row(const std::string& line, EpochMetrics& m) {
  char comma;
  std::istringstream s(line);
  long long epoch;
  s >> epoch >> comma >> m.train_loss >> comma >> m.train_top1 >> comma >> m.val_loss >> comma >> m.val_top1 >>
      comma >> m.val_top5 >> comma >> m.lr >> comma >> m.epoch_seconds >> comma >> m.images_per_second >> comma >>
      m.data_wait_share;
  m.epoch = epoch;
  return !s.fail() && (s >> std::ws).eof();
}

// The rows of metrics.csv in order; `malformed` receives the first row that
// does not parse (rows after it are not read), empty when none.
std::vector<EpochMetrics> read_rows(const std::string& csv, std::string& malformed) {
  std::vector<EpochMetrics> out;
  std::ifstream in(csv);
  if (!in) return out;
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    EpochMetrics m;
    if (!parse_row(line, m)) {
      malformed = line;
      break;
    }
    out.push_back(m);
  }
  return out;
}

}  // namespace

void append_metrics(const std::string& run_dir, const EpochMetrics& m) {
  const std::string csv = run_dir + "/metrics.csv";
  const bool fresh = !std::filesystem::exists(csv);
  write_checked(csv, (fresh ? std::string(kHeader) + "\n" : std::string()) + csv_row(m), std::ios::app);
  write_checked(run_dir + "/metrics.jsonl", json_row(m), std::ios::app);
}

int64_t truncate_metrics(const std::string& run_dir, int64_t last_epoch) {
  std::string malformed;
  const std::vector<EpochMetrics> rows = read_rows(run_dir + "/metrics.csv", malformed);
  const std::map<int64_t, std::string> old_json = json_lines(run_dir + "/metrics.jsonl");
  std::string csv = std::string(kHeader) + "\n", jsonl;
  int64_t dropped = malformed.empty() ? 0 : 1;
  for (const auto& m : rows) {
    if (m.epoch > last_epoch) {
      ++dropped;
      continue;
    }
    csv += csv_row(m);
    const auto it = old_json.find(m.epoch);
    jsonl += it != old_json.end() ? it->second : json_row(m);
  }
  // Both files are rewritten whole through temporary files: an interruption
  // here leaves the old log or the new one.
  for (const auto& [name, text] : {std::pair<std::string, std::string>{"metrics.csv", csv}, {"metrics.jsonl", jsonl}}) {
    const std::string path = run_dir + "/" + name, tmp = path + ".tmp";
    write_checked(tmp, text, std::ios::trunc);
    std::filesystem::rename(tmp, path);
  }
  return dropped;
}

std::vector<EpochMetrics> read_metrics(const std::string& run_dir) {
  std::string malformed;
  std::vector<EpochMetrics> rows = read_rows(run_dir + "/metrics.csv", malformed);
  QAT_CHECK(malformed.empty(), "metrics: malformed row in ", run_dir, "/metrics.csv: ", malformed);
  return rows;
}

}  // namespace qat::apps
