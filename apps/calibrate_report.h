#pragma once
// The report of `qat calibrate --compare`: a Markdown table (calibrator, val
// top-1 and top-5 of the frozen integer model, delta vs FP32, calibration
// time) and an SVG bar chart of top-1 with the FP32 line, written to
// calibrators.md and calibrators.svg of --out and printed.
#include <string>

#include "apps/calibrate_cmd.h"

namespace qat::apps {

std::string calibrator_table(const CalibrateReport& r, const std::string& title);
std::string calibrator_chart(const CalibrateReport& r, const std::string& title);
// Writes the table and the chart to the two paths and prints the table.
void write_calibrator_report(const CalibrateReport& r, const std::string& title, const std::string& table_path,
                             const std::string& chart_path);

}  // namespace qat::apps
