#include "apps/compare_report.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "apps/chart_layout.h"
#include "apps/report_format.h"

namespace qat::apps {

namespace {

// A Markdown table row's cells; a backslash-escaped character inside a cell
// is that character (markdown_cell), '|' included.
std::vector<std::string> cells_of(const std::string& row) {
  std::vector<std::string> cells;
  size_t p = row.find('|');
  while (p != std::string::npos) {
    std::string c;
    size_t q = p + 1;
    for (; q < row.size() && row[q] != '|'; ++q) {
      if (row[q] == '\\' && q + 1 < row.size() && std::ispunct(static_cast<unsigned char>(row[q + 1]))) ++q;
      c += row[q];
    }
    if (q >= row.size()) break;
    const size_t a = c.find_first_not_of(' '), b = c.find_last_not_of(' ');
    cells.push_back(a == std::string::npos ? "" : c.substr(a, b - a + 1));
    p = q;
  }
  return cells;
}

}  // namespace

std::vector<size_t> pareto_front(const std::vector<std::pair<double, double>>& pts) {
  auto size_of = [&](size_t i) { return pts[i].first; };
  std::vector<size_t> order(pts.size());
  for (size_t i = 0; i < pts.size(); ++i) order[i] = i;
  // By size ascending, then accuracy descending: a point is on the front
  // when it is more accurate than everything smaller before it.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (size_of(a) != size_of(b)) return size_of(a) < size_of(b);
    return pts[a].second > pts[b].second;
  });
  std::vector<size_t> front;
  double best = -INFINITY;
  for (size_t i : order)
    if (pts[i].second > best) front.push_back(i), best = pts[i].second;
  return front;
}

namespace {

// Accuracy against x, one labelled point per run, the Pareto front dashed;
// larger_x_better: throughput (else size). x as the table prints it (equal
// there, equal on the front). The axes tick at round steps; every label
// stays inside the drawing and off the others.
std::string accuracy_chart(const std::vector<std::string>& names, const std::vector<double>& x,
                           const std::vector<double>& acc, const std::string& title, const std::string& x_label,
                           bool larger_x_better) {
  const double W = 640, H = 420, left = 70, right = 30, top = 40, bottom = 50;
  const double pw = W - left - right, ph = H - top - bottom;
  std::vector<std::pair<double, double>> pts;
  double xmax = 0, lo = 100, hi = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    pts.emplace_back(larger_x_better ? -x[i] : x[i], acc[i]);
    xmax = std::max(xmax, x[i]);
    lo = std::min(lo, 100 * acc[i]), hi = std::max(hi, 100 * acc[i]);
  }
  const std::vector<double> xt = nice_ticks(0, xmax > 0 ? xmax * 1.05 : 1, 5);
  const std::vector<double> yt = nice_ticks(std::max(0.0, lo - 0.5), std::min(100.0, hi + 0.5), 5);  // in %
  const double x_end = xt.back(), y_lo = yt.front(), y_hi = yt.back();
  auto X = [&](double v) { return left + pw * v / x_end; };
  auto Y = [&](double v) { return top + ph * (1 - (100 * v - y_lo) / (y_hi - y_lo)); };
  const int ydec = tick_decimals(yt[1] - yt[0]), xdec = tick_decimals(xt[1] - xt[0]);
  std::string s = svg_begin(W, H);
  const std::string heading = title + " (ringed: Pareto front)";
  std::vector<TextBox> taken = {text_box(10, 18, heading, "start", 14)};
  s += "<text x=\"10\" y=\"18\" font-size=\"14\">" + escape_html(heading) + "</text>\n";
  for (double v : yt) {
    const double y = top + ph * (1 - (v - y_lo) / (y_hi - y_lo));
    const std::string t = fmt(("%." + std::to_string(ydec) + "f%%").c_str(), v);
    s += fmt("<line x1=\"%.1f\"", left) + fmt(" x2=\"%.1f\"", left + pw) + fmt(" y1=\"%.1f\"", y) +
         fmt(" y2=\"%.1f\" stroke=\"#ddd\"/>\n", y);
    s += fmt("<text x=\"%.1f\"", left - 8) + fmt(" y=\"%.1f\" text-anchor=\"end\">", y + 4) + t + "</text>\n";
    taken.push_back(text_box(left - 8, y + 4, t, "end"));
  }
  for (double v : xt) {
    const std::string t = fmt(("%." + std::to_string(xdec) + "f").c_str(), v);
    s += fmt("<text x=\"%.1f\"", X(v)) + fmt(" y=\"%.1f\" text-anchor=\"middle\">", top + ph + 18) + t + "</text>\n";
    taken.push_back(text_box(X(v), top + ph + 18, t, "middle"));
  }
  s += fmt("<text x=\"%.1f\"", left + pw / 2) + fmt(" y=\"%.1f\" text-anchor=\"middle\">", H - 10) +
       escape_html(x_label) + "</text>\n";
  std::string line;
  for (size_t i : pareto_front(pts)) {
    line += fmt("%.1f,", X(x[i])) + fmt("%.1f ", Y(acc[i]));
    // a ring on each point of the front (a front of one point draws no line)
    s += fmt("<circle cx=\"%.1f\"", X(x[i])) + fmt(" cy=\"%.1f\" r=\"8\" fill=\"none\" stroke=\"#d62728\" "
                                                  "stroke-width=\"1.5\"/>\n", Y(acc[i]));
  }
  s += "<polyline fill=\"none\" stroke=\"#d62728\" stroke-width=\"1.5\" stroke-dasharray=\"5 3\" points=\"" + line +
       "\"/>\n";
  std::vector<double> px, py;
  std::vector<std::string> labels;
  for (size_t i = 0; i < x.size(); ++i) {
    px.push_back(X(x[i])), py.push_back(Y(acc[i]));
    labels.push_back(names[i] + fmt(" (%.2f%%)", 100 * acc[i]));
    s += fmt("<circle cx=\"%.1f\"", px.back()) + fmt(" cy=\"%.1f\" r=\"5\" fill=\"#1f77b4\"/>\n", py.back());
  }
  const std::vector<PlacedLabel> placed = place_labels(px, py, 8, labels, W, H, top - 10, taken);
  for (size_t i = 0; i < placed.size(); ++i) {
    const PlacedLabel& l = placed[i];
    if (std::fabs(l.y - py[i]) > 20) {  // pushed out of the point's own rows: a leader line to it
      const double ly = l.y - 4, lx = l.end_anchor ? l.box.x1 : l.box.x0;
      s += fmt("<line x1=\"%.1f\"", px[i]) + fmt(" y1=\"%.1f\"", py[i] + (ly > py[i] ? 5 : -5)) +
           fmt(" x2=\"%.1f\"", lx) + fmt(" y2=\"%.1f\" stroke=\"#999\" stroke-width=\"0.8\"/>\n", ly);
    }
    s += fmt("<text x=\"%.1f\"", l.x) + fmt(" y=\"%.1f\"", l.y) + (l.end_anchor ? " text-anchor=\"end\">" : ">") +
         escape_html(labels[i]) + "</text>\n";
  }
  return s + "</svg>\n";
}

}  // namespace

namespace {
// A weight size in MB as the table prints it (bytes_str: 0.1 MB, 0.1 kB or
// whole bytes): two runs it prints alike are equal on the chart's front.
double printed_megabytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1e6) return std::round(b / 1e5) / 10;
  if (b >= 1e3) return std::round(b / 1e2) / 1e4;
  return b / 1e6;
}
}  // namespace

std::string tradeoff_chart(const std::vector<RunSummary>& runs) {
  std::vector<std::string> names;
  std::vector<double> x, acc;
  for (const auto& r : runs) {
    names.push_back(r.name);
    x.push_back(printed_megabytes(r.weight_bytes));
    acc.push_back(r.best_top1);
  }
  return accuracy_chart(names, x, acc, "best val top-1 against weight storage", "weights (MB)", false);
}

std::string speed_chart(const std::vector<RunSummary>& runs) {
  std::vector<std::string> names;
  std::vector<double> x, acc;
  for (const auto& r : runs)
    if (r.infer_img_s > 0) {
      names.push_back(r.name);
      x.push_back(std::round(r.infer_img_s));  // as the table prints it
      acc.push_back(r.best_top1);
    }
  if (names.empty()) return "";
  return accuracy_chart(names, x, acc, "best val top-1 against inference throughput",
                        "images per second (FP32 model / frozen integer model)", true);
}

std::string html_report(const std::string& title, const std::string& markdown_table,
                        const std::vector<std::pair<std::string, std::string>>& svgs) {
  std::string h = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" + escape_html(title) +
                  "</title>\n<style>body{font-family:sans-serif;margin:2em;max-width:1100px}"
                  "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}"
                  "td:first-child,th:first-child{text-align:left}</style></head><body>\n<h1>" +
                  escape_html(title) + "</h1>\n";
  // Markdown: each run of '|' lines is one table (its first row the header),
  // other non-empty lines paragraphs.
  size_t pos = 0;
  int row = -1;  // -1: not in a table
  while (pos < markdown_table.size()) {
    size_t end = markdown_table.find('\n', pos);
    if (end == std::string::npos) end = markdown_table.size();
    const std::string line = markdown_table.substr(pos, end - pos);
    pos = end + 1;
    if (line.rfind('|', 0) != 0) {
      if (row >= 0) h += "</table>\n", row = -1;
      if (!line.empty()) h += "<p>" + escape_html(line) + "</p>\n";
      continue;
    }
    if (row < 0) h += "<table>\n", row = 0;
    if (line.find("---") != std::string::npos) continue;  // the separator row
    const char* tag = row++ == 0 ? "th" : "td";
    h += "<tr>";
    for (const std::string& c : cells_of(line)) h += std::string("<") + tag + ">" + escape_html(c) + "</" + tag + ">";
    h += "</tr>\n";
  }
  if (row >= 0) h += "</table>\n";
  for (const auto& [t, svg] : svgs) h += "<h2>" + escape_html(t) + "</h2>\n" + svg;
  return h + "</body></html>\n";
}

}  // namespace qat::apps
