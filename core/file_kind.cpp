#include "core/file_kind.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace qat {

namespace {

// Length of the UTF-8 sequence starting at s[i], 0 when it is not one.
size_t utf8_length(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return 0;
  return n;
}

bool is_text(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 && c != '\n' && c != '\r' && c != '\t') return false;
    const size_t n = utf8_length(s, i);
    if (n == 0) return i + 4 > s.size();  // (a sequence cut by the read's end)
    i += n;
  }
  return true;
}

}  // namespace

std::string printable(std::string_view s, size_t max) {
  std::string out;
  size_t shown = 0;
  for (size_t i = 0; i < s.size(); ++shown) {
    if (shown == max) return out + "...";
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = utf8_length(s, i);
    if (n == 1 && c >= 0x20 && c != 0x7f && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else if (n > 1) {
      out.append(s.substr(i, n));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    }
    i += n > 0 ? n : 1;
  }
  return out;
}

std::string describe_file_start(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return "a folder";
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::string head(256, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  if (head.empty()) return "empty";
  // ONNX's ModelProto opens with ir_version (field 1, varint: 0x08) and then,
  // as every exporter writes it, a string field (producer name, opset: 0x12 or 0x42).
  if (head.size() > 3 && head[0] == 0x08 && (head[2] == 0x12 || head[2] == 0x3a || head[2] == 0x42))
    return "an ONNX model (protobuf)";
  if (is_text(head)) return "text beginning \"" + printable(head.substr(0, head.find('\n')), 60) + "\"";
  std::string hex = "binary data beginning";
  for (size_t i = 0; i < std::min<size_t>(head.size(), 8); ++i) {
    char buf[4];
    std::snprintf(buf, sizeof buf, " %02x", static_cast<unsigned char>(head[i]));
    hex += buf;
  }
  return hex;
}

}  // namespace qat
