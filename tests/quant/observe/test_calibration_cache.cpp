// TensorRT's calibration cache format (quant/observe/calibration_cache.h):
// byte for byte on a hand-made example, a write -> read round trip, and every
// malformed input an error naming the file, the line and what is wrong.
#include <catch2/catch.hpp>

#include "tests/test_util.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include "core/text_file.h"
#include "quant/observe/calibration_cache.h"

namespace {

using namespace qat;
using namespace qat::quant;

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

}  // namespace

TEST_CASE("calibration cache: header and hex byte for byte", "[quant][calibration][cache]") {
  CalibrationCache c;
  c.calibrator = Calibrator::entropy;
  c.scales = {{"features.0.input_fake_quant", 0.0078125f},  // 2^-7: 0x3c000000
              {"classifier.1.activation_post_process", 0.1f},  // 0x3dcccccd
              {"x", 1.0f}};
  CHECK(format_cache(c) ==
        "TRT-8601-EntropyCalibration2\n"
        "features.0.input_fake_quant: 3c000000\n"
        "classifier.1.activation_post_process: 3dcccccd\n"
        "x: 3f800000\n");
  c.calibrator = Calibrator::max;
  c.version = 10003;
  CHECK(format_cache(c).rfind("TRT-10003-MinMaxCalibration\n", 0) == 0);
  CHECK(cache_header(Calibrator::percentile) == "TRT-8601-PercentileCalibration");
  CHECK(cache_header(Calibrator::mse) == "TRT-8601-MSECalibration");
}

TEST_CASE("calibration cache: write then read gives the same bits", "[quant][calibration][cache]") {
  testing::TempDir dir;
  CalibrationCache c;
  c.calibrator = Calibrator::percentile;
  for (uint32_t b : {0x3c8954bau, 0x00000001u, 0x7f7fffffu, 0x3f800001u})
    c.scales.emplace_back(std::string("t").append(std::to_string(b)), from_bits(b));  // (GCC 12: false -Wrestrict on "t" + s)
  const std::string path = dir.file("calib.cache");
  write_cache(path, c);
  const CalibrationCache r = read_cache(path);
  CHECK(r.calibrator == Calibrator::percentile);
  CHECK(r.version == kTensorRtVersion);
  REQUIRE(r.scales.size() == c.scales.size());
  for (size_t i = 0; i < c.scales.size(); ++i) {
    CHECK(r.scales[i].first == c.scales[i].first);
    CHECK(std::memcmp(&r.scales[i].second, &c.scales[i].second, 4) == 0);
  }
  // Upper-case hex and CRLF line ends (a file edited on Windows) read the same.
  const CalibrationCache u = parse_cache("TRT-8601-EntropyCalibration2\r\nconv1: 3C8954BA\r\n", "u");
  REQUIRE(u.scales.size() == 1);
  CHECK(u.scales[0].second == from_bits(0x3c8954ba));
}

TEST_CASE("calibration cache: malformed files are errors naming the line", "[quant][calibration][cache]") {
  auto fails = [](const std::string& text, const std::string& what) {
    INFO(text);
    REQUIRE_THROWS_WITH(parse_cache(text, "bad.cache"), Catch::Contains("bad.cache") && Catch::Contains(what));
  };
  fails("", "empty");
  fails("TensorRT cache\nconv1: 3c8954ba\n", "does not start with TRT-");
  fails("TRT-86a1-EntropyCalibration2\n", "version that is not a number");
  fails("TRT-8601-FancyCalibration\n", "FancyCalibration");
  fails("TRT-8601-EntropyCalibration2\nconv1 3c8954ba\n", "line 2");
  fails("TRT-8601-EntropyCalibration2\nconv1: 3c8954bg\n", "not 8 hex digits");
  fails("TRT-8601-EntropyCalibration2\nconv1: 3c8954b\n", "not 8 hex digits");
  fails("TRT-8601-EntropyCalibration2\nconv1: 3c8954ba0\n", "not 8 hex digits");
  fails("TRT-8601-EntropyCalibration2\nconv1: 00000000\n", "finite and > 0");
  fails("TRT-8601-EntropyCalibration2\nconv1: bf800000\n", "finite and > 0");
  fails("TRT-8601-EntropyCalibration2\nconv1: 7f800000\n", "finite and > 0");
  fails("TRT-8601-EntropyCalibration2\nconv1: 7fc00000\n", "finite and > 0");
  fails("TRT-8601-EntropyCalibration2\nconv1: 3c8954ba\nconv1: 3c8954ba\n", "appears twice");
  REQUIRE_THROWS_WITH(read_cache("/nonexistent/dir/x.cache"), Catch::Contains("/nonexistent/dir/x.cache"));
  // A binary file given as the cache: its bytes are shown escaped and cut, never raw.
  std::string binary = "\x7F" "ELF\x02\x01";
  binary += std::string(200, '\x01');
  fails(binary, "header '\\x7FELF\\x02\\x01\\x01");
  REQUIRE_THROWS_WITH(parse_cache(binary, "b"), Catch::Contains("... (206 bytes)") && !Catch::Contains("\x01"));
  REQUIRE_THROWS_WITH(read_cache("/tmp"), Catch::Contains("calibration cache /tmp is a folder, not a file"));
}
