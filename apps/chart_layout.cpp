#include "apps/chart_layout.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace qat::apps {

double text_width(const std::string& text, double font_size) {
  size_t points = 0;
  for (unsigned char c : text) points += (c & 0xC0) != 0x80;  // continuation bytes are not characters
  return 0.62 * font_size * static_cast<double>(points);
}

TextBox text_box(double x, double y, const std::string& text, const std::string& anchor, double font_size) {
  const double w = text_width(text, font_size);
  const double x0 = anchor == "end" ? x - w : anchor == "middle" ? x - w / 2 : x;
  return {x0, y - 0.8 * font_size, x0 + w, y + 0.25 * font_size};  // ascent and descent of the font
}

bool overlap(const TextBox& a, const TextBox& b) {
  return a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1;
}

std::vector<double> nice_ticks(double lo, double hi, int max_intervals) {
  if (!(hi > lo)) hi = lo + 1;
  const double raw = (hi - lo) / std::max(1, max_intervals);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * mag >= raw * (1 - 1e-9)) {
      step = m * mag;
      break;
    }
  // k * step from the integers k: no drift from adding the step up.
  const double k0 = std::floor(lo / step + 1e-9), k1 = std::ceil(hi / step - 1e-9);
  std::vector<double> ticks;
  for (double k = k0; k <= k1; ++k) ticks.push_back(k * step);
  if (ticks.size() < 2) ticks.push_back((k0 + 1) * step);
  return ticks;
}

int tick_decimals(double step) {
  for (int d = 0; d < 6; ++d) {
    const double scaled = step * std::pow(10.0, d);
    if (std::fabs(scaled - std::round(scaled)) < 1e-6) return d;
  }
  return 6;
}

std::vector<PlacedLabel> place_labels(const std::vector<double>& px, const std::vector<double>& py, double r,
                                      const std::vector<std::string>& labels, double width, double height,
                                      double top, const std::vector<TextBox>& taken) {
  std::vector<TextBox> busy = taken;
  for (size_t i = 0; i < px.size(); ++i) busy.push_back({px[i] - r, py[i] - r, px[i] + r, py[i] + r});
  std::vector<size_t> order(px.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return py[a] < py[b]; });
  std::vector<PlacedLabel> out(px.size());
  for (size_t i : order) {
    PlacedLabel best;
    int best_hits = -1;
    // Rows just above and below the point, then further out; right before left.
    for (double dy : {-6.0, 16.0, -20.0, 30.0, -34.0, 44.0, -48.0, 58.0}) {
      for (bool end : {false, true}) {
        PlacedLabel c{end ? px[i] - r - 3 : px[i] + r + 3, py[i] + dy, end, {}};
        c.box = text_box(c.x, c.y, labels[i], end ? "end" : "start");
        const bool inside = c.box.x0 >= 2 && c.box.x1 <= width - 2 && c.box.y0 >= top && c.box.y1 <= height - 2;
        if (!inside) continue;
        int hits = 0;
        for (const TextBox& b : busy) hits += overlap(c.box, b);
        if (best_hits < 0 || hits < best_hits) best = c, best_hits = hits;
        if (hits == 0) break;
      }
      if (best_hits == 0) break;
    }
    if (best_hits < 0) {  // nowhere inside: at the point, pulled in from the edges
      best = {px[i] + r + 3, py[i] - 6, false, {}};
      best.box = text_box(best.x, best.y, labels[i]);
      const double shift = std::max(0.0, best.box.x1 - (width - 2));
      best.x -= shift, best.box.x0 -= shift, best.box.x1 -= shift;
    }
    busy.push_back(best.box);
    out[i] = best;
  }
  return out;
}

}  // namespace qat::apps
