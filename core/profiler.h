#pragma once
// Per-op wall-clock totals for `qat bench`: off by default (then a scope costs
// one branch). Ops mark themselves with QAT_PROFILE("conv2d.forward").
#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace qat {

class Profiler {
 public:
  static void set_enabled(bool on);
  static bool enabled();
  static void add(const char* key, double seconds);
  static void reset();
  // (key, seconds, calls), largest first
  struct Row {
    std::string key;
    double seconds;
    long calls;
  };
  static std::vector<Row> rows();
};

class ProfileScope {
 public:
  explicit ProfileScope(const char* key) : key_(Profiler::enabled() ? key : nullptr) {
    if (key_) t0_ = std::chrono::steady_clock::now();
  }
  ~ProfileScope() {
    if (key_) Profiler::add(key_, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count());
  }
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  const char* key_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace qat

#define QAT_PROFILE_CAT2(a, b) a##b
#define QAT_PROFILE_CAT(a, b) QAT_PROFILE_CAT2(a, b)
#define QAT_PROFILE(key) ::qat::ProfileScope QAT_PROFILE_CAT(qat_profile_, __LINE__)(key)
