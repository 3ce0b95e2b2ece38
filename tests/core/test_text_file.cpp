// core/text_file: whole small text files, read with a size cap.
#include <filesystem>
#include <fstream>

#include "tests/test_util.h"

#include "core/error.h"
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
