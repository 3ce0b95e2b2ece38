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

// Note [dead temporaries]: what a killed writer left is removed by the next
// write to the same target; a running writer's temporary is not.
TEST_CASE("text_file: temporaries of writers that are gone are removed, those of running ones kept",
          "[text_file]") {
  qat::testing::TempDir d("qat_text_file_");
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  REQUIRE(child > 0);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);  // `child` is a pid no process has now
  const std::string dead = std::to_string(child), parent = std::to_string(::getppid());
  for (const std::string& name : std::vector<std::string>{"t.txt.tmp." + dead, "t.txt.tmp.1", "t.txt.tmp." + parent, "t.txt.tmp.x1",
                                 "u.txt.tmp." + dead, "w.safetensors.tmp." + dead})
    std::ofstream(d.file(name)) << "half a file";
  std::filesystem::create_directories(d.dir / (".exp.tmp-" + dead) / "inside");
  qat::write_text_file_atomic(d.file("t.txt"), "new");
  CHECK_FALSE(std::filesystem::exists(d.file("t.txt.tmp." + dead)));
  CHECK(std::filesystem::exists(d.file("t.txt.tmp.1")));        // pid 1 runs
  CHECK(std::filesystem::exists(d.file("t.txt.tmp." + parent)));  // a running writer's
  CHECK(std::filesystem::exists(d.file("t.txt.tmp.x1")));       // not a pid
  CHECK(std::filesystem::exists(d.file("u.txt.tmp." + dead)));  // another target's
  qat::save_safetensors(d.file("w.safetensors"), {});
  CHECK_FALSE(std::filesystem::exists(d.file("w.safetensors.tmp." + dead)));
  CHECK(qat::remove_dead_temporaries(d.dir.string(), ".exp.tmp-") == 1);
  CHECK_FALSE(std::filesystem::exists(d.dir / (".exp.tmp-" + dead)));
  CHECK(qat::remove_dead_temporaries((d.dir / "none").string(), "x") == 0);
}
