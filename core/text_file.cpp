#include "core/text_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace qat {

std::string read_text_file(const std::string& path, size_t max_bytes) {
  std::error_code ec;
  QAT_CHECK(std::filesystem::exists(path, ec), "cannot open '", path, "': no such file");
  QAT_CHECK(!std::filesystem::is_directory(path, ec), "cannot open '", path, "': it is a directory");
  std::ifstream f(path, std::ios::binary);
  QAT_CHECK(f, "cannot open '", path, "': ", std::strerror(errno));
  // Read in pieces up to one byte past the cap: a pipe or a device has no size to check first.
  std::string text;
  char buf[1 << 16];
  while (f && text.size() <= max_bytes) {
    f.read(buf, sizeof buf);
    text.append(buf, static_cast<size_t>(f.gcount()));
  }
  QAT_CHECK(!f.bad(), "cannot read '", path, "'");
  QAT_CHECK(text.size() <= max_bytes, "'", path, "' is longer than ", max_bytes,
            " bytes, too long for a qat text file (a config, manifest or calibration cache): is it the file you meant?");
  return text;
}

void write_text_file_atomic(const std::string& path, const std::string& text) {
  // The rename below would replace whatever is there: never a device, a pipe or a folder (/dev/full, as root).
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  QAT_CHECK(!std::filesystem::exists(st) || std::filesystem::is_regular_file(st), "cannot write '", path,
            "': it exists and is not a regular file (a folder, device or pipe)");
  const std::string tmp = temporary_for(path);
  FILE* f = std::fopen(tmp.c_str(), "wb");
  QAT_CHECK(f, "cannot write '", path, "': cannot create '", tmp, "': ", std::strerror(errno));
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size() && std::fflush(f) == 0 &&
            ::fsync(::fileno(f)) == 0;
  int err = errno;
  if (std::fclose(f) != 0 && ok) ok = false, err = errno;
  if (ok && std::rename(tmp.c_str(), path.c_str()) != 0) ok = false, err = errno;
  if (ok) sync_parent_folder(path);
  if (!ok) {
    std::remove(tmp.c_str());
    QAT_FAIL("cannot write '", path, "': ", std::strerror(err));
  }
}

void sync_parent_folder(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const int fd = ::open(parent.empty() ? "." : parent.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

std::string temporary_tag() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  std::string tag = std::to_string(::getpid()) + "@";
  for (const char* c = host; *c; ++c) {
    const bool plain = std::isalnum(static_cast<unsigned char>(*c)) || *c == '-' || *c == '.';
    tag += plain ? *c : '_';
  }
  return tag;
}

std::string temporary_for(const std::string& target) {
  const std::filesystem::path t(target);
  remove_dead_temporaries(t.parent_path().empty() ? "." : t.parent_path().string(), t.filename().string() + ".tmp.");
  return target + ".tmp." + temporary_tag();
}

int remove_dead_temporaries(const std::string& folder, const std::string& prefix) {
  std::error_code ec;
  std::filesystem::directory_iterator it(folder, ec);
  if (ec) return 0;  // no folder (yet): nothing left there
  const std::string own = temporary_tag();
  const std::string here = own.substr(own.find('@'));  // "@host"
  int removed = 0;
  for (const auto& e : it) {
    const std::string name = e.path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string tag = name.substr(prefix.size());
    const size_t at = tag.find('@');
    if (at != std::string::npos && tag.substr(at) != here) continue;  // another host's
    const std::string digits = tag.substr(0, at);
    long long pid = 0;
    const auto [end, err] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
    if (err != std::errc() || end != digits.data() + digits.size() || pid <= 0 || pid > INT32_MAX ||
        pid == ::getpid())
      continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // running (or not ours to ask)
    std::error_code rec;
    if (std::filesystem::remove_all(e.path(), rec) > 0 && !rec) ++removed;
  }
  return removed;
}

}  // namespace qat
