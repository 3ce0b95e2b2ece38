#include "core/profiler.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>

namespace qat {

namespace {
std::atomic<bool> g_enabled{false};
std::mutex g_mu;
std::map<std::string, std::pair<double, long>>& table() {
  static std::map<std::string, std::pair<double, long>> t;
  return t;
}
}  // namespace

void Profiler::set_enabled(bool on) { g_enabled = on; }
bool Profiler::enabled() { return g_enabled.load(std::memory_order_relaxed); }

void Profiler::add(const char* key, double seconds) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto& e = table()[key];
  e.first += seconds;
  e.second += 1;
}

void Profiler::reset() {
  std::lock_guard<std::mutex> lock(g_mu);
  table().clear();
}

std::vector<Profiler::Row> Profiler::rows() {
  std::lock_guard<std::mutex> lock(g_mu);
  std::vector<Row> out;
  for (auto& [k, v] : table()) out.push_back({k, v.first, v.second});
  std::sort(out.begin(), out.end(), [](const Row& a, const Row& b) { return a.seconds > b.seconds; });
  return out;
}

}  // namespace qat
