#include "apps/calibrate_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "apps/report_format.h"

#include "core/text_file.h"

namespace qat::apps {

std::string calibrator_table(const CalibrateReport& r, const std::string& title) {
  std::string s = "Post-training calibration: " + title + "\n\n";
  s += "| calibrator | val top-1 | val top-5 | Δ top-1 vs FP32 | calibration time |\n";
  s += "|---|---:|---:|---:|---:|\n";
  s += "| FP32 (no quantization) | " + fmt("%.2f%%", 100 * r.fp32_top1) + " | " + fmt("%.2f%%", 100 * r.fp32_top5) +
       " | | |\n";
  for (const CalibratorResult& c : r.results)
    s += "| " + std::string(quant::calibrator_name(c.calibrator)) + " | " + fmt("%.2f%%", 100 * c.top1) + " | " +
         fmt("%.2f%%", 100 * c.top5) + " | " + fmt("%+.2f", 100 * (c.top1 - r.fp32_top1)) + " | " +
         fmt("%.2f s", c.seconds) + " |\n";
  s += "\nTop-1/top-5: the frozen integer model on the validation set. Calibration time: the forward passes "
       "that fill the histograms (shared by all calibrators, " +
       fmt("%.2f s", r.collect_seconds) + "; FP32 inference of the same images " + fmt("%.2f s", r.float_seconds) +
       ") plus the calibrator's threshold search.\n";
  return s;
}

std::string calibrator_chart(const CalibrateReport& r, const std::string& title) {
  const double left = 110, top = 40, bar = 26, gap = 10, pw = 420, W = left + pw + 80;
  const double H = top + (bar + gap) * static_cast<double>(r.results.size() + 1) + 40;
  double hi = r.fp32_top1;
  for (const auto& c : r.results) hi = std::max(hi, c.top1);
  hi = std::min(1.0, std::ceil(hi * 10 + 1e-9) / 10);
  if (hi <= 0) hi = 1;
  auto X = [&](double v) { return left + pw * v / hi; };
  std::string s = svg_begin(W, H);
  s += "<text x=\"10\" y=\"18\" font-size=\"14\">val top-1 of the integer model per calibrator</text>\n";
  s += "<text x=\"10\" y=\"33\" fill=\"#555\">" + escape_html(title) + "</text>\n";
  auto row = [&](size_t i, const std::string& name, double v, const char* color) {
    const double y = top + (bar + gap) * static_cast<double>(i);
    s += fmt("<text x=\"%.1f\"", left - 8) + fmt(" y=\"%.1f\" text-anchor=\"end\">", y + bar / 2 + 4) + name +
         "</text>\n";
    s += fmt("<rect x=\"%.1f\"", left) + fmt(" y=\"%.1f\"", y) + fmt(" width=\"%.1f\"", X(v) - left) +
         fmt(" height=\"%.1f\" fill=\"", bar) + color + "\"/>\n";
    s += fmt("<text x=\"%.1f\"", X(v) + 5) + fmt(" y=\"%.1f\">", y + bar / 2 + 4) + fmt("%.2f%%</text>\n", 100 * v);
  };
  row(0, "FP32", r.fp32_top1, "#7f7f7f");
  for (size_t i = 0; i < r.results.size(); ++i)
    row(i + 1, quant::calibrator_name(r.results[i].calibrator), r.results[i].top1, "#1f77b4");
  const double bottom = top + (bar + gap) * static_cast<double>(r.results.size() + 1);
  s += fmt("<line x1=\"%.1f\"", X(r.fp32_top1)) + fmt(" x2=\"%.1f\"", X(r.fp32_top1)) + fmt(" y1=\"%.1f\"", top) +
       fmt(" y2=\"%.1f\" stroke=\"#d62728\" stroke-dasharray=\"4 3\"/>\n", bottom);
  for (int k = 0; k <= 5; ++k) {
    const double v = hi * k / 5;
    s += fmt("<text x=\"%.1f\"", X(v)) + fmt(" y=\"%.1f\" text-anchor=\"middle\" fill=\"#555\">", bottom + 16) +
         fmt("%.0f%%</text>\n", 100 * v);
  }
  return s + "</svg>\n";
}

void write_calibrator_report(const CalibrateReport& r, const std::string& title, const std::string& table_path,
                             const std::string& chart_path) {
  const std::string table = calibrator_table(r, title);
  write_text_file_atomic(table_path, table);
  write_text_file_atomic(chart_path, calibrator_chart(r, title));
  std::printf("\n%s\n", table.c_str());
}

}  // namespace qat::apps
