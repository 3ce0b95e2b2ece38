#pragma once
// Per-epoch metrics appended to RUN/metrics.csv and RUN/metrics.jsonl. Each
// row is flushed as written, so an interrupted run keeps every finished epoch.
#include <cstdint>
#include <string>
#include <vector>

namespace qat::apps {

struct EpochMetrics {
  int64_t epoch = 0;  // 1-based
  double train_loss = 0, train_top1 = 0;
  double val_loss = 0, val_top1 = 0, val_top5 = 0;
  double lr = 0;
  double epoch_seconds = 0;
  double images_per_second = 0;   // training images / training time
  double data_wait_share = 0;     // share of training time spent waiting for batches
  // More JSON members for metrics.jsonl only (e.g. "int8": {...}), without
  // the surrounding braces; empty: none.
  std::string extra_json;
};

// One epoch's lines of metrics.csv and metrics.jsonl, each ending in '\n'.
struct MetricsRows {
  std::string csv, jsonl;
  bool empty() const { return csv.empty(); }
};
MetricsRows metrics_rows(const EpochMetrics& m);

void append_metrics(const std::string& run_dir, const EpochMetrics& m);
void append_metrics(const std::string& run_dir, const MetricsRows& rows);
// Keeps only the rows of epochs <= last_epoch in both files (metrics.jsonl
// rows verbatim, their extra members included) (resume: rows of
// an epoch whose checkpoint was never written are dropped; 0 clears them).
// The checkpoint is the truth: a malformed row (a row cut short by a crash)
// and every row after it are dropped too. Returns the number of rows dropped.
// Fewer readable rows than last_epoch (a row of a saved epoch malformed, the
// file gone) is an error naming the file and the row, with nothing changed;
// with neither file there the log starts afresh. Except: the rows of epoch
// last_epoch itself, when the log lacks just them, are appended from
// `last_rows` (the checkpoint's copy: Note [epoch end order] in train.cpp),
// and `restored` (if given) says so.
int64_t truncate_metrics(const std::string& run_dir, int64_t last_epoch, const MetricsRows& last_rows = {},
                         bool* restored = nullptr);
// Reads RUN/metrics.csv back (for reports); missing file -> empty; a
// malformed row is an error naming the file and the row.
std::vector<EpochMetrics> read_metrics(const std::string& run_dir);

}  // namespace qat::apps
