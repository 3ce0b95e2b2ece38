// core/text_file: whole small text files, read with a size cap.
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
