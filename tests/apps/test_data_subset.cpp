// `qat data subset` as a user runs it: a write that fails (a full disk) is an
// error naming the file with a non-zero exit, and leaves no output behind.
#include <sys/wait.h>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/test_util.h"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

// Runs `qat <args>` under bash with its files capped at `cap_kib` KiB
// (ulimit -f; SIGXFSZ ignored, so a write past the cap fails with EFBIG the
// way one fails on a full disk). Its exit code, its output in *out.
int qat_capped(const std::string& args, int cap_kib, const fs::path& log, std::string* out) {
  const std::string cmd = "bash -c \"trap '' XFSZ; ulimit -f " + std::to_string(cap_kib) + "; exec " +
                          std::string(QAT_BINARY) + " " + args + "\" > " + log.string() + " 2>&1";
  const int status = std::system(cmd.c_str());
  std::ifstream in(log);
  std::stringstream s;
  s << in.rdbuf();
  *out = s.str();
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("qat data subset: a failed write exits non-zero naming the file, and writes nothing", "[cli]") {
  qat::testing::TempDir t;
  const std::string src = qat::testing::sample_data_dir(), out = (t.dir / "sub").string();
  const std::string args = "data subset --src " + src + " --out " + out + " --per-class 2 --val-per-class 1 --size 64";
  std::string log;
  // Each 64 px JPEG takes more than 1 KiB: the first write fails (stb_image_write used to report success).
  REQUIRE(qat_capped(args, 1, t.dir / "a.log", &log) == 1);
  CHECK_THAT(log, Contains("qat: error: write_jpeg: cannot write '" + out + "/.tmp-subset-") &&
                      Contains(".jpg': File too large"));
  CHECK_THAT(log, !Contains("wrote"));
  CHECK_FALSE(fs::exists(out));
  // With room, the same command writes the subset.
  REQUIRE(qat_capped(args, 1 << 20, t.dir / "b.log", &log) == 0);
  CHECK_THAT(log, Contains("qat data subset: wrote 20 train + 10 val images of 10 classes to " + out));
  for (const auto& e : fs::recursive_directory_iterator(out))
    if (e.is_regular_file()) CHECK(e.file_size() > 0);
}
