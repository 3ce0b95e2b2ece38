#include "core/text_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace qat {

std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  QAT_CHECK(f, "cannot open '", path, "': ", std::strerror(errno));
  std::ostringstream s;
  s << f.rdbuf();
  QAT_CHECK(!f.bad(), "cannot read '", path, "'");
  return s.str();
}

void write_text_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  QAT_CHECK(f, "cannot create '", tmp, "': ", std::strerror(errno));
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size() && std::fflush(f) == 0 &&
            ::fsync(::fileno(f)) == 0;
  int err = errno;
  if (std::fclose(f) != 0 && ok) ok = false, err = errno;
  if (ok && std::rename(tmp.c_str(), path.c_str()) != 0) ok = false, err = errno;
  if (!ok) {
    std::remove(tmp.c_str());
    QAT_FAIL("cannot write '", path, "': ", std::strerror(err));
  }
}

}  // namespace qat
