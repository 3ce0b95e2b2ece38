#pragma once
// Small text helpers the reports share (compare, calibrate, sensitivity).
#include <string>

namespace qat::apps {

// printf-style formatting of one number, e.g. fmt("%.2f%%", 100 * top1); never truncates.
std::string fmt(const char* format, double v);
// Text for HTML or SVG (element content or a quoted attribute): run names
// are folder names, which may hold any of < > & " '.
std::string escape_html(const std::string& s);
// Text for one cell of a Markdown table: | < > & and \\ backslash-escaped
// (a literal character, not a cell edge or HTML: a run name is a folder
// name), control characters (a newline would end the row) as spaces.
std::string markdown_cell(const std::string& s);
// The opening of an SVG chart: the root element (sans-serif, 12 px) and a white background.
std::string svg_begin(double width, double height);

}  // namespace qat::apps
