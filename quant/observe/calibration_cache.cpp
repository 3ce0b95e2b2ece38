#include "quant/observe/calibration_cache.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "core/file_kind.h"
#include "core/text_file.h"

namespace qat::quant {

namespace {

std::string hex_of(float scale) {
  uint32_t bits;
  std::memcpy(&bits, &scale, 4);
  char b[9];
  std::snprintf(b, sizeof b, "%08x", bits);
  return b;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A line as an error shows it: at most 80 bytes, anything unprintable as
// \xNN (a binary file given as the cache must not spill into the terminal).
std::string shown(const std::string& line) {
  return printable(line, 80) + (line.size() > 80 ? " (" + std::to_string(line.size()) + " bytes)" : "");
}

std::string trim_cr(std::string s) {
  if (!s.empty() && s.back() == '\r') s.pop_back();
  return s;
}

void parse_header(const std::string& line, const std::string& where, CalibrationCache& out) {
  auto bad = [&](const std::string& why) {
    QAT_FAIL("calibration cache ", where, " line 1: header '", shown(line), "' ", why,
             " (expected TRT-<version digits>-<calibrator>, e.g. ", cache_header(Calibrator::entropy), ")");
  };
  if (line.rfind("TRT-", 0) != 0) bad("does not start with TRT-");
  const size_t dash = line.find('-', 4);
  if (dash == std::string::npos || dash == 4) bad("has no version");
  const std::string version = line.substr(4, dash - 4);
  for (char c : version)
    if (c < '0' || c > '9') bad("has a version that is not a number");
  if (version.size() > 9) bad("has a version that is too long");
  out.version = std::stoi(version);
  const std::string name = line.substr(dash + 1);
  for (const CalibratorRow& c : kCalibrators)
    if (name == c.cache_name) {
      out.calibrator = c.id;
      return;
    }
  bad("names calibrator '" + shown(name) + "', which qat does not know");
}

}  // namespace

std::string cache_header(Calibrator c, int version) {
  return "TRT-" + std::to_string(version) + "-" + calibrator_row(c).cache_name;
}

std::string format_cache(const CalibrationCache& cache) {
  std::string s = cache_header(cache.calibrator, cache.version) + "\n";
  for (const auto& [name, scale] : cache.scales) s += name + ": " + hex_of(scale) + "\n";
  return s;
}

CalibrationCache parse_cache(const std::string& text, const std::string& where) {
  CalibrationCache out;
  size_t pos = 0;
  int64_t line_no = 0;
  std::set<std::string> seen;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = trim_cr(text.substr(pos, end - pos));
    pos = end + 1;
    ++line_no;
    if (line_no == 1) {
      parse_header(line, where, out);
      continue;
    }
    if (line.empty()) continue;
    const size_t colon = line.rfind(": ");
    QAT_CHECK(colon != std::string::npos && colon > 0, "calibration cache ", where, " line ", line_no, ": '", shown(line),
              "' is not 'tensor_name: <8 hex digits>'");
    const std::string name = line.substr(0, colon), hex = line.substr(colon + 2);
    uint32_t bits = 0;
    bool ok = hex.size() == 8;
    for (char c : hex) {
      const int d = hex_digit(c);
      ok = ok && d >= 0;
      bits = (bits << 4) | static_cast<uint32_t>(d < 0 ? 0 : d);
    }
    QAT_CHECK(ok, "calibration cache ", where, " line ", line_no, ": tensor ", shown(name), " has scale '", shown(hex),
              "', not 8 hex digits");
    float scale;
    std::memcpy(&scale, &bits, 4);
    QAT_CHECK(std::isfinite(scale) && scale > 0, "calibration cache ", where, " line ", line_no, ": tensor ", shown(name),
              " has scale ", scale, " (", hex, "); a scale must be finite and > 0");
    QAT_CHECK(seen.insert(name).second, "calibration cache ", where, " line ", line_no, ": tensor ", shown(name),
              " appears twice");
    out.scales.emplace_back(name, scale);
  }
  QAT_CHECK(line_no >= 1, "calibration cache ", where, " is empty (no header)");
  return out;
}

void write_cache(const std::string& path, const CalibrationCache& cache) {
  write_text_file_atomic(path, format_cache(cache));
}

CalibrationCache read_cache(const std::string& path) {
  std::error_code ec;
  QAT_CHECK(!std::filesystem::is_directory(path, ec), "calibration cache ", path, " is a folder, not a file");
  return parse_cache(read_text_file(path), path);
}

}  // namespace qat::quant
