#pragma once
// Training progress on the console: a redrawn one-line bar when stdout is a
// terminal, plain lines every `every` steps otherwise (logs, CI).
#include <chrono>
#include <cstdint>
#include <string>

namespace qat::apps {

class Progress {
 public:
  Progress(std::string label, int64_t total_steps, int64_t every);
  // Called after each step with running averages of the epoch so far.
  void update(int64_t step, double loss, double top1, int64_t images);
  // Steps without a loss (calibration, evaluation).
  void update(int64_t step, int64_t images);
  void finish();

 private:
  void print(int64_t step, int64_t images, const std::string& metrics);
  std::string label_;
  int64_t total_, every_;
  bool tty_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace qat::apps
