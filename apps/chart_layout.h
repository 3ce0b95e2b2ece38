#pragma once
// Geometry the report charts share (compare, sensitivity, calibrate): how
// much room a text takes, round axis ticks, and where a point's label goes so
// that it stays inside the drawing and off every other label and point.
#include <string>
#include <vector>

namespace qat::apps {

// A text's box in SVG units: x0..x1 across, y0 (top) .. y1 (bottom).
struct TextBox {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

// The width of `text` in the charts' sans-serif at `font_size` px: 0.62 em a
// character (UTF-8 code points). An estimate on the wide side of DejaVu
// Sans's (most of its glyphs are 0.3 to 0.62 em), so what fits by it fits.
double text_width(const std::string& text, double font_size = 12);
// The box of `text` drawn at (x, y), y its baseline, anchored "start",
// "middle" or "end".
TextBox text_box(double x, double y, const std::string& text, const std::string& anchor = "start",
                 double font_size = 12);
bool overlap(const TextBox& a, const TextBox& b);

// Axis ticks: the multiples of a round step (1, 2, 2.5 or 5 times a power of
// ten) from the last one at or below lo to the first at or above hi, at most
// max_intervals steps apart.
std::vector<double> nice_ticks(double lo, double hi, int max_intervals);
// Decimals that print every multiple of `step` exactly (0.5 -> 1, 0.25 -> 2).
int tick_decimals(double step);

// A point's label: drawn at (x, y), anchored at its start or its end.
struct PlacedLabel {
  double x = 0, y = 0;
  bool end_anchor = false;
  TextBox box;
};
// Places labels[i] next to its point (px[i], py[i]) of radius r: right of it
// or left, above or below, further out where that is taken; inside
// [0, width] x [top, height] and off the `taken` boxes (title, tick labels),
// the points and the labels placed before it (points taken from the most
// accurate down, that is, from the top). Where no place is free, the one
// with the fewest overlaps.
std::vector<PlacedLabel> place_labels(const std::vector<double>& px, const std::vector<double>& py, double r,
                                      const std::vector<std::string>& labels, double width, double height,
                                      double top, const std::vector<TextBox>& taken);

}  // namespace qat::apps
