#include "apps/metrics_log.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace qat::apps {

namespace {
const char* kHeader =
    "epoch,train_loss,train_top1,val_loss,val_top1,val_top5,lr,epoch_time_s,images_per_s,data_wait_share";
}

void append_metrics(const std::string& run_dir, const EpochMetrics& m) {
  const std::string csv = run_dir + "/metrics.csv";
  const bool fresh = !std::filesystem::exists(csv);
  std::ofstream c(csv, std::ios::app);
  QAT_CHECK(c.good(), "metrics: cannot write ", csv);
  if (fresh) c << kHeader << "\n";
  char row[512];
  std::snprintf(row, sizeof row, "%lld,%.6f,%.6f,%.6f,%.6f,%.6f,%.8g,%.2f,%.2f,%.4f\n",
                static_cast<long long>(m.epoch), m.train_loss, m.train_top1, m.val_loss, m.val_top1, m.val_top5, m.lr,
                m.epoch_seconds, m.images_per_second, m.data_wait_share);
  c << row;
  c.flush();
  std::ofstream j(run_dir + "/metrics.jsonl", std::ios::app);
  QAT_CHECK(j.good(), "metrics: cannot write ", run_dir, "/metrics.jsonl");
  std::snprintf(row, sizeof row,
                "{\"epoch\": %lld, \"train_loss\": %.6f, \"train_top1\": %.6f, \"val_loss\": %.6f, \"val_top1\": %.6f, "
                "\"val_top5\": %.6f, \"lr\": %.8g, \"epoch_time_s\": %.2f, \"images_per_s\": %.2f, "
                "\"data_wait_share\": %.4f}\n",
                static_cast<long long>(m.epoch), m.train_loss, m.train_top1, m.val_loss, m.val_top1, m.val_top5, m.lr,
                m.epoch_seconds, m.images_per_second, m.data_wait_share);
  j << row;
  j.flush();
}

void truncate_metrics(const std::string& run_dir, int64_t last_epoch) {
  const std::vector<EpochMetrics> rows = read_metrics(run_dir);
  std::filesystem::remove(run_dir + "/metrics.csv");
  std::filesystem::remove(run_dir + "/metrics.jsonl");
  for (const auto& m : rows)
    if (m.epoch <= last_epoch) append_metrics(run_dir, m);
}

std::vector<EpochMetrics> read_metrics(const std::string& run_dir) {
  std::vector<EpochMetrics> out;
  std::ifstream in(run_dir + "/metrics.csv");
  if (!in) return out;
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    EpochMetrics m;
    char comma;
    std::istringstream s(line);
    long long epoch;
    s >> epoch >> comma >> m.train_loss >> comma >> m.train_top1 >> comma >> m.val_loss >> comma >> m.val_top1 >>
        comma >> m.val_top5 >> comma >> m.lr >> comma >> m.epoch_seconds >> comma >> m.images_per_second >> comma >>
        m.data_wait_share;
    QAT_CHECK(!s.fail(), "metrics: malformed row in ", run_dir, "/metrics.csv: ", line);
    m.epoch = epoch;
    out.push_back(m);
  }
  return out;
}

}  // namespace qat::apps
