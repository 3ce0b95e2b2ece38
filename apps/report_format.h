#pragma once
// Small text helpers the reports share (compare, calibrate, sensitivity).
#include <string>

namespace qat::apps {

// printf-style formatting of one number, e.g. fmt("%.2f%%", 100 * top1); never truncates.
std::string fmt(const char* format, double v);
// The opening of an SVG chart: the root element (sans-serif, 12 px) and a white background.
std::string svg_begin(double width, double height);

}  // namespace qat::apps
