#include "apps/compare_report.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

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
  std::vector<size_t> order(pts.size());
  for (size_t i = 0; i < pts.size(); ++i) order[i] = i;
  // By size ascending, then accuracy descending: a point is on the front
  // when it is more accurate than everything smaller before it.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (pts[a].first != pts[b].first) return pts[a].first < pts[b].first;
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
// larger_x_better: throughput (else size).
std::string accuracy_chart(const std::vector<std::string>& names, const std::vector<double>& x,
                           const std::vector<double>& acc, const std::string& title, const std::string& x_label,
                           bool larger_x_better) {
  const double W = 640, H = 420, left = 70, right = 30, top = 40, bottom = 50;
  const double pw = W - left - right, ph = H - top - bottom;
  std::vector<std::pair<double, double>> pts;
  double xmax = 0, lo = 1, hi = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    pts.emplace_back(larger_x_better ? -x[i] : x[i], acc[i]);
    xmax = std::max(xmax, x[i]);
    lo = std::min(lo, acc[i]), hi = std::max(hi, acc[i]);
  }
  xmax = xmax > 0 ? xmax * 1.1 : 1;
  lo = std::max(0.0, std::floor(lo * 100 - 1) / 100);
  hi = std::min(1.0, std::ceil(hi * 100 + 1) / 100);
  auto X = [&](double v) { return left + pw * v / xmax; };
  auto Y = [&](double v) { return top + ph * (1 - (v - lo) / (hi - lo)); };
  std::string s = svg_begin(W, H);
  s += fmt("<text x=\"%.0f\" y=\"18\" font-size=\"14\">", left) + escape_html(title) + " (dashed line: the Pareto front)</text>\n";
  for (int k = 0; k <= 4; ++k) {
    const double v = lo + (hi - lo) * k / 4, xv = xmax * k / 4;
    s += fmt("<line x1=\"%.1f\"", left) + fmt(" x2=\"%.1f\"", left + pw) + fmt(" y1=\"%.1f\"", Y(v)) +
         fmt(" y2=\"%.1f\" stroke=\"#ddd\"/>\n", Y(v));
    s += fmt("<text x=\"%.1f\"", left - 8) + fmt(" y=\"%.1f\" text-anchor=\"end\">", Y(v) + 4) +
         fmt("%.1f%%</text>\n", 100 * v);
    s += fmt("<text x=\"%.1f\"", X(xv)) + fmt(" y=\"%.1f\" text-anchor=\"middle\">", top + ph + 18) +
         fmt("%.0f</text>\n", xv);
  }
  s += fmt("<text x=\"%.1f\"", left + pw / 2) + fmt(" y=\"%.1f\" text-anchor=\"middle\">", H - 10) + x_label +
       "</text>\n";
  std::string line;
  for (size_t i : pareto_front(pts)) line += fmt("%.1f,", X(x[i])) + fmt("%.1f ", Y(acc[i]));
  s += "<polyline fill=\"none\" stroke=\"#d62728\" stroke-width=\"1.5\" stroke-dasharray=\"5 3\" points=\"" + line +
       "\"/>\n";
  for (size_t i = 0; i < x.size(); ++i) {
    s += fmt("<circle cx=\"%.1f\"", X(x[i])) + fmt(" cy=\"%.1f\" r=\"5\" fill=\"#1f77b4\"/>\n", Y(acc[i]));
    s += fmt("<text x=\"%.1f\"", X(x[i]) + 8) + fmt(" y=\"%.1f\">", Y(acc[i]) - 6) + escape_html(names[i]) +
         fmt(" (%.2f%%)</text>\n", 100 * acc[i]);
  }
  return s + "</svg>\n";
}

}  // namespace

std::string tradeoff_chart(const std::vector<RunSummary>& runs) {
  std::vector<std::string> names;
  std::vector<double> x, acc;
  for (const auto& r : runs) {
    names.push_back(r.name);
    x.push_back(static_cast<double>(r.weight_bytes) / 1e6);
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
      x.push_back(r.infer_img_s);
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
