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

}  // namespace qat::apps
