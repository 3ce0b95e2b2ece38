// core/text_file: whole small text files, read with a size cap.
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/test_util.h"

#include "core/error.h"
#include "core/safetensors.h"
#include "core/text_file.h"

using Catch::Matchers::Contains;

TEST_CASE("text_file: a file up to the cap is read whole, one byte more is refused naming it", "[text_file]") {
  qat::testing::TempDir d("qat_text_file_");
  const std::string path = d.file("t.txt");
  std::ofstream(path) << "0123456789";
  CHECK(qat::read_text_file(path, 10) == "0123456789");
  REQUIRE_THROWS_WITH(qat::read_text_file(path, 9),
                      Contains("'" + path + "' is longer than 9 bytes, too long for a qat text file"));
  REQUIRE_THROWS_WITH(qat::read_text_file(d.file("none.txt")), Contains("none.txt': no such file"));
  REQUIRE_THROWS_WITH(qat::read_text_file(d.dir.string()), Contains("it is a directory"));
}

TEST_CASE("text_file: an atomic write never replaces a device, a pipe or a folder", "[text_file]") {
  qat::testing::TempDir d("qat_text_file_");
  const std::string path = d.file("t.txt");
  qat::write_text_file_atomic(path, "a");
  qat::write_text_file_atomic(path, "bc");  // a regular file is replaced whole
  CHECK(qat::read_text_file(path) == "bc");
  // (The rename would have put a regular file in place of /dev/null when run as root.)
  REQUIRE_THROWS_WITH(qat::write_text_file_atomic("/dev/null", "x"),
                      Contains("cannot write '/dev/null': it exists and is not a regular file"));
  CHECK(std::filesystem::is_character_file("/dev/null"));
  REQUIRE_THROWS_WITH(qat::write_text_file_atomic(d.dir.string(), "x"), Contains("is not a regular file"));
}

// Note [dead temporaries]: what a killed writer on this host left is removed
// by the next write to the same target; a running writer's temporary is not,
// nor another host's (whose processes this host cannot see).
TEST_CASE("text_file: temporaries of writers that are gone are removed, those of running ones and other hosts kept",
          "[text_file]") {
  qat::testing::TempDir d("qat_text_file_");
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  REQUIRE(child > 0);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);  // `child` is a pid no process has now
  const std::string own = qat::temporary_tag();
  REQUIRE(own.rfind(std::to_string(::getpid()) + "@", 0) == 0);
  const std::string host = own.substr(own.find('@'));
  const std::string dead = std::to_string(child), parent = std::to_string(::getppid());
  const std::vector<std::string> removed = {"t.txt.tmp." + dead + host, "t.txt.tmp." + dead,  // (no host: an older qat)
                                            "w.safetensors.tmp." + dead + host};
  const std::vector<std::string> kept = {"t.txt.tmp.1" + host, "t.txt.tmp." + parent + host,  // running
                                         "t.txt.tmp." + dead + "@elsewhere",                    // another host's
                                         "t.txt.tmp.x1", "t.txt.tmp.99999999999" + host,        // not pids
                                         "u.txt.tmp." + dead + host};                           // another target's
  for (const auto& names : {removed, kept})
    for (const std::string& name : names) std::ofstream(d.file(name)) << "half a file";
  std::filesystem::create_directories(d.dir / (".exp.tmp-" + dead + host) / "inside");
  qat::write_text_file_atomic(d.file("t.txt"), "new");
  qat::save_safetensors(d.file("w.safetensors"), {});
  for (const std::string& name : removed) {
    INFO(name);
    CHECK_FALSE(std::filesystem::exists(d.file(name)));
  }
  for (const std::string& name : kept) {
    INFO(name);
    CHECK(std::filesystem::exists(d.file(name)));
  }
  CHECK(qat::remove_dead_temporaries(d.dir.string(), ".exp.tmp-") == 1);
  CHECK_FALSE(std::filesystem::exists(d.dir / (".exp.tmp-" + dead + host)));
  CHECK(qat::remove_dead_temporaries((d.dir / "none").string(), "x") == 0);
}
