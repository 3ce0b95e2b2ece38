#include "apps/progress.h"

#include <unistd.h>

#include <cstdio>

namespace qat::apps {

Progress::Progress(std::string label, int64_t total_steps, int64_t every)
    : label_(std::move(label)),
      total_(total_steps),
      every_(every > 0 ? every : 1),
      tty_(isatty(fileno(stdout)) != 0),
      start_(std::chrono::steady_clock::now()) {}

void Progress::update(int64_t step, double loss, double top1, int64_t images) {
  char m[64];
  std::snprintf(m, sizeof m, tty_ ? " loss %.4f top1 %5.1f%%" : " loss %.4f top1 %.1f%%", loss, 100 * top1);
  print(step, images, m);
}

void Progress::update(int64_t step, int64_t images) { print(step, images, ""); }

void Progress::print(int64_t step, int64_t images, const std::string& metrics) {
  const bool last = step == total_;
  if (!tty_ && step % every_ != 0 && !last) return;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double ips = secs > 0 ? images / secs : 0.0;
  const double eta = step > 0 ? secs / step * (total_ - step) : 0.0;
  if (tty_) {
    const int width = 24;
    const int filled = total_ > 0 ? static_cast<int>(width * step / total_) : width;
    std::string bar(filled, '#');
    bar.resize(width, '.');
    std::printf("\r%s [%s] %lld/%lld%s %6.1f img/s ETA %4.0fs  ", label_.c_str(), bar.c_str(),
                static_cast<long long>(step), static_cast<long long>(total_), metrics.c_str(), ips, eta);
  } else {
    std::printf("%s step %lld/%lld%s %.1f img/s ETA %.0fs\n", label_.c_str(), static_cast<long long>(step),
                static_cast<long long>(total_), metrics.c_str(), ips, eta);
  }
  std::fflush(stdout);
}

void Progress::finish() {
  if (tty_) std::printf("\n");
  std::fflush(stdout);
}

}  // namespace qat::apps
