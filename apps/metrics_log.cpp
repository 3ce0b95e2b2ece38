#include "apps/metrics_log.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

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

// One row of metrics.csv; what is wrong with it, or "" (values qat cannot
// have written, as a top-1 of 7.5 or a negative time, are wrong too).
std::string parse_row(const std::string& line, EpochMetrics& m) {
  std::vector<std::string> cells, names;
  for (std::stringstream row(line + ","), head(std::string(kHeader) + ","); ;) {
    std::string c, n;
    const bool more_cells = static_cast<bool>(std::getline(row, c, ',')), more_names = static_cast<bool>(std::getline(head, n, ','));
    if (more_cells) cells.push_back(c);
    if (more_names) names.push_back(n);
    if (!more_cells && !more_names) break;
  }
  if (!cells.empty() && !cells.back().empty() && cells.back().back() == '\r') cells.back().pop_back();
  if (cells.size() != names.size())
    return "expected " + std::to_string(names.size()) + " comma-separated numbers, got " + std::to_string(cells.size());
  std::vector<double> v(cells.size());
  for (size_t i = 0; i < cells.size(); ++i) {
    char* end = nullptr;
    v[i] = std::strtod(cells[i].c_str(), &end);
    if (cells[i].empty() || end != cells[i].c_str() + cells[i].size())
      return "column " + names[i] + " is '" + cells[i].substr(0, 40) + "', not a number";
    if (!std::isfinite(v[i])) return "column " + names[i] + " is " + cells[i] + ", not a finite number";
  }
  if (v[0] != std::floor(v[0]) || v[0] < 1 || v[0] > 1e15) return "column epoch is " + cells[0] + ", not an epoch number";
  m.epoch = static_cast<int64_t>(v[0]);
  m.train_loss = v[1], m.train_top1 = v[2], m.val_loss = v[3], m.val_top1 = v[4], m.val_top5 = v[5], m.lr = v[6];
  m.epoch_seconds = v[7], m.images_per_second = v[8], m.data_wait_share = v[9];
  for (const double x : {m.train_loss, m.val_loss, m.lr, m.epoch_seconds, m.images_per_second, m.data_wait_share})
    if (!(x >= 0)) return "a loss, lr, time, speed or wait share that is negative";
  for (const double x : {m.train_top1, m.val_top1, m.val_top5})
    if (!(x >= 0 && x <= 1)) return "an accuracy outside [0, 1]";
  // (each finite, their sum over epochs was not: two times of 1e308 made an "inf min" training time)
  if (m.epoch_seconds > 1e9 || m.images_per_second > 1e12 || m.data_wait_share > 1)
    return "an epoch time over 1e9 s, a speed over 1e12 images/s or a wait share over 1";
  return "";
}

// The rows of metrics.csv in order, epochs 1, 2, ...; `malformed` receives
// the first row that is not one ("row N: why: text"; rows after it are not
// read), empty when none. A file without qat's header is malformed at once.
std::vector<EpochMetrics> read_rows(const std::string& csv, std::string& malformed) {
  std::vector<EpochMetrics> out;
  std::ifstream in(csv);
  if (!in) return out;
  std::string line;
  std::getline(in, line);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (line != kHeader) {
    malformed = "line 1: expected the header " + std::string(kHeader) + ", got: " + line.substr(0, 200);
    return out;
  }
  while (std::getline(in, line)) {
    if (line.empty() || line == "\r") continue;
    EpochMetrics m;
    std::string why = parse_row(line, m);
    if (why.empty() && m.epoch != static_cast<int64_t>(out.size()) + 1)
      why = "epoch " + std::to_string(m.epoch) + " where epoch " + std::to_string(out.size() + 1) + " comes";
    if (!why.empty()) {
      malformed = "row " + std::to_string(out.size() + 1) + ": " + why + ": " + line.substr(0, 200);
      break;
    }
    out.push_back(m);
  }
  return out;
}

}  // namespace

MetricsRows metrics_rows(const EpochMetrics& m) { return {csv_row(m), json_row(m)}; }

void append_metrics(const std::string& run_dir, const EpochMetrics& m) { append_metrics(run_dir, metrics_rows(m)); }

void append_metrics(const std::string& run_dir, const MetricsRows& rows) {
  const std::string csv = run_dir + "/metrics.csv";
  const bool fresh = !std::filesystem::exists(csv);
  write_checked(csv, (fresh ? std::string(kHeader) + "\n" : std::string()) + rows.csv, std::ios::app);
  write_checked(run_dir + "/metrics.jsonl", rows.jsonl, std::ios::app);
}

int64_t truncate_metrics(const std::string& run_dir, int64_t last_epoch, const MetricsRows& last_rows,
                         bool* restored) {
  std::string malformed;
  std::vector<EpochMetrics> rows = read_rows(run_dir + "/metrics.csv", malformed);
  std::map<int64_t, std::string> old_json = json_lines(run_dir + "/metrics.jsonl");
  if (restored) *restored = false;
  // The checkpoint's own epoch saved, its rows not yet appended: they come from the checkpoint.
  EpochMetrics last;
  const bool have_last = last_epoch > 0 && !last_rows.empty() &&
                         parse_row(last_rows.csv.substr(0, last_rows.csv.find('\n')), last).empty() &&
                         last.epoch == last_epoch;
  if (have_last && static_cast<int64_t>(rows.size()) == last_epoch - 1) {
    rows.push_back(last);
    old_json[last_epoch] = last_rows.jsonl;
    if (restored) *restored = true;
  } else if (have_last && static_cast<int64_t>(rows.size()) >= last_epoch && !old_json.count(last_epoch)) {
    old_json[last_epoch] = last_rows.jsonl;  // stopped between the two appends: the exact line, extra members too
    if (restored) *restored = true;
  }
  // Rows the checkpoint's epochs need that cannot be read: rewriting the log
  // would delete them (and their metrics.jsonl rows); nothing is changed.
  const bool no_log = !std::filesystem::exists(run_dir + "/metrics.csv") &&
                      !std::filesystem::exists(run_dir + "/metrics.jsonl");  // removed: start afresh
  QAT_CHECK(no_log || static_cast<int64_t>(rows.size()) >= last_epoch, "metrics: ", run_dir, "/metrics.csv holds ",
            rows.size(), " readable row(s), but the checkpoint has ", last_epoch, " epoch(s) done",
            malformed.empty() ? std::string() : " (" + malformed + ")",
            ": resuming would delete the log of the epochs after them; restore the file (metrics.jsonl has a copy "
            "of each row) or remove both metrics files to start the log afresh");
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
  QAT_CHECK(malformed.empty(), "metrics: ", run_dir, "/metrics.csv, ", malformed);
  return rows;
}

}  // namespace qat::apps
