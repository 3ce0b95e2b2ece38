#include "data/memory_limit.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace fs = std::filesystem;

namespace qat::data {

uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

namespace {

// Cgroup v1 writes "no limit" as the largest page-aligned int64; anything at
// or above 2^62 is taken as no limit. "max" is v2's word for none.
uint64_t read_limit(const fs::path& file) {
  std::ifstream in(file);
  std::string word;
  if (!(in >> word) || word == "max") return 0;
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), v);
  if (ec != std::errc() || end != word.data() + word.size()) return 0;
  return v >= (uint64_t{1} << 62) ? 0 : v;
}

bool names_memory(const std::string& controllers) {
  std::stringstream list(controllers);
  for (std::string c; std::getline(list, c, ',');)
    if (c == "memory") return true;
  return false;
}

// The lowest limit among `files` that exist (0: none).
uint64_t lowest_limit(const std::vector<fs::path>& files) {
  uint64_t lowest = 0;
  for (const fs::path& f : files) {
    const uint64_t v = read_limit(f);
    if (v > 0 && (lowest == 0 || v < lowest)) lowest = v;
  }
  return lowest;
}

}  // namespace

uint64_t cgroup_memory_limit_bytes(const std::string& proc_self_cgroup, const std::string& cgroup_root) {
  const fs::path root(cgroup_root);
  std::vector<fs::path> files;
  std::stringstream lines(proc_self_cgroup);
  for (std::string line; std::getline(lines, line);) {
    // "id:controllers:path"; v2's single line is "0::path".
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const fs::path path = fs::path(line.substr(b + 1)).relative_path();
    const bool v2 = controllers.empty() && line.compare(0, a, "0") == 0;
    if (!v2 && !names_memory(controllers)) continue;
    // The process's cgroup and every one above it (a limit on a parent, as a
    // systemd slice or a batch job's cgroup, holds for all below it), up to the mount.
    const fs::path mount = v2 ? root : root / "memory";
    const char* file = v2 ? "memory.max" : "memory.limit_in_bytes";
    for (fs::path p = path;; p = p.parent_path()) {
      files.push_back(mount / p / file);
      if (p.empty() || p == p.parent_path()) break;
    }
  }
  return lowest_limit(files);
}

uint64_t memory_limit_bytes() {
  std::ifstream in("/proc/self/cgroup");
  std::stringstream text;
  text << in.rdbuf();
  const uint64_t physical = physical_memory_bytes();
  const uint64_t limit = cgroup_memory_limit_bytes(text.str(), "/sys/fs/cgroup");
  if (limit == 0) return physical;
  return physical == 0 ? limit : std::min(physical, limit);
}

}  // namespace qat::data
