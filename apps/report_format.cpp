#include "apps/report_format.h"

#include <cstdio>

namespace qat::apps {

std::string fmt(const char* format, double v) {
  const int n = std::snprintf(nullptr, 0, format, v);
  std::string s(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::snprintf(s.data(), s.size() + 1, format, v);
  return s;
}

std::string svg_begin(double width, double height) {
  return fmt("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\"", width) + fmt(" height=\"%.0f\"", height) +
         " font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
}

std::string escape_html(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (c == '"') o += "&quot;";
    else if (c == '\'') o += "&#39;";
    else o += c;
  }
  return o;
}

std::string markdown_cell(const std::string& s) {
  std::string o;
  for (const char c : s) {
    if (c == '|' || c == '<' || c == '>' || c == '&' || c == '\\') o += '\\';  // literal, not a cell edge or HTML
    o += static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? ' ' : c;  // a newline would end the row
  }
  return o;
}

}  // namespace qat::apps
