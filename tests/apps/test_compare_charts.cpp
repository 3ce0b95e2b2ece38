// The geometry of qat compare's charts (issue 40: labels cut at the right
// edge, labels over one another, ticks at 75.2 and 77.8, a Pareto front
// through points that print alike and are less accurate). Each chart's text
// elements are read back from the SVG and boxed with the charts' own width
// estimate (chart_layout.h: wide on purpose), then: every box inside the
// drawing, no two boxes overlapping, the value ticks on a round step.
#include <cmath>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "tests/test_util.h"

#include "apps/calibrate_cmd.h"
#include "apps/chart_layout.h"
#include "apps/compare.h"
#include "apps/compare_report.h"
#include "apps/compare_sqnr.h"
#include "apps/train.h"

using namespace qat;
using namespace qat::apps;

namespace {

struct SvgText {
  std::string text;
  TextBox box;
};

std::string unescape(std::string s) {
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""},
                                 {"&#39;", "'"}, {"&amp;", "&"}})
    for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
  return s;
}

double attribute(const std::string& tag, const std::string& name, double fallback) {
  std::smatch m;
  return std::regex_search(tag, m, std::regex(" " + name + "=\"([-0-9.]+)\"")) ? std::stod(m[1]) : fallback;
}

// Every <text> of an SVG with its box; (width, height) of the drawing.
std::vector<SvgText> texts_of(const std::string& svg, double& width, double& height) {
  std::smatch m;
  REQUIRE(std::regex_search(svg, m, std::regex("<svg [^>]*width=\"([0-9.]+)\" height=\"([0-9.]+)\"")));
  width = std::stod(m[1]), height = std::stod(m[2]);
  std::vector<SvgText> out;
  const std::regex text("<text([^>]*)>([^<]*)</text>");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), text); it != std::sregex_iterator(); ++it) {
    const std::string tag = (*it)[1], body = unescape((*it)[2]);
    std::smatch a;
    const std::string anchor = std::regex_search(tag, a, std::regex("text-anchor=\"([a-z]+)\"")) ? a[1].str() : "start";
    out.push_back({body, text_box(attribute(tag, "x", 0), attribute(tag, "y", 0), body, anchor,
                                  attribute(tag, "font-size", 12))});
  }
  return out;
}

void check_layout(const std::string& svg) {
  double W = 0, H = 0;
  const std::vector<SvgText> t = texts_of(svg, W, H);
  REQUIRE(t.size() > 3);
  for (const SvgText& x : t) {
    INFO("'" << x.text << "' at [" << x.box.x0 << ", " << x.box.x1 << "] x [" << x.box.y0 << ", " << x.box.y1
              << "] in " << W << " x " << H);
    CHECK(x.box.x0 >= 0);
    CHECK(x.box.x1 <= W);
    CHECK(x.box.y0 >= 0);
    CHECK(x.box.y1 <= H);
  }
  for (size_t i = 0; i < t.size(); ++i)
    for (size_t j = i + 1; j < t.size(); ++j) {
      INFO("'" << t[i].text << "' and '" << t[j].text << "'");
      CHECK_FALSE(overlap(t[i].box, t[j].box));
    }
}

// The values of the tick labels ending in `suffix` ("%"): on one round step.
void check_ticks(const std::string& svg, const std::string& suffix) {
  double W = 0, H = 0;
  std::vector<double> v;
  for (const SvgText& x : texts_of(svg, W, H))
    if (std::regex_match(x.text, std::regex("-?[0-9]+(\\.[0-9]+)?" + suffix)))
      v.push_back(std::stod(x.text));
  REQUIRE(v.size() >= 3);
  std::sort(v.begin(), v.end());
  const double step = v[1] - v[0];
  INFO("ticks " << v.front() << " .. " << v.back() << " step " << step);
  const double mag = std::pow(10.0, std::floor(std::log10(step) + 1e-9)), m = step / mag;
  CHECK((std::fabs(m - 1) < 1e-6 || std::fabs(m - 2) < 1e-6 || std::fabs(m - 2.5) < 1e-6 || std::fabs(m - 5) < 1e-6));
  for (size_t i = 1; i < v.size(); ++i) CHECK(std::fabs(v[i] - v[i - 1] - step) < 1e-6 * step);
  for (double x : v) CHECK(std::fabs(x / step - std::round(x / step)) < 1e-6);  // multiples of the step
}

RunSummary run(const std::string& name, double mb, double top1, std::vector<double> curve) {
  RunSummary r;
  r.name = name;
  r.weight_bytes = static_cast<int64_t>(mb * 1e6);
  r.best_top1 = top1;
  r.val_top1 = std::move(curve);
  return r;
}

// The report's own crowd: seven AlexNet runs, four of them at 28.6 MB within
// two points, the FP32 one at the right edge.
std::vector<RunSummary> crowded_runs() {
  return {run("alexnet_fp32_imagenette", 228.2, 0.7625, {0.43, 0.52, 0.48, 0.61, 0.69, 0.70, 0.72, 0.74, 0.76, 0.7625}),
          run("alexnet_w8a8_imagenette", 57.1, 0.7664, {0.759, 0.752, 0.7664}),
          run("alexnet_w4a4_lsq_imagenette", 28.62, 0.7778, {0.73, 0.74, 0.77, 0.7778}),
          run("alexnet_w4a4_lsq_imagenette_mixed", 28.61, 0.7755, {0.73, 0.74, 0.77, 0.7755}),
          run("qat_w4a4_all_from_fp32", 28.58, 0.7615, {0.745, 0.7615}),
          run("qat_w4a4_all_from_ptq", 28.56, 0.7653, {0.75, 0.7653}),
          run("alexnet_int8_imagenette", 57.1, 0.7595, {0.46, 0.45, 0.56, 0.59, 0.69, 0.70, 0.71, 0.75, 0.76, 0.7595})};
}

}  // namespace

TEST_CASE("compare's charts: every text inside the drawing, none over another, ticks on a round step",
          "[compare]") {
  std::vector<RunSummary> runs = crowded_runs();
  SECTION("accuracy against weight storage") {
    const std::string svg = tradeoff_chart(runs);
    check_layout(svg);
    check_ticks(svg, "%");
  }
  SECTION("accuracy against inference throughput") {
    const double speeds[] = {332, 0, 0, 2803, 2770, 2772, 0};
    for (size_t i = 0; i < runs.size(); ++i) runs[i].infer_img_s = speeds[i];
    const std::string svg = speed_chart(runs);
    check_layout(svg);
    check_ticks(svg, "%");
  }
  SECTION("val top-1 per epoch, fine-tunes continuing their parent") {
    for (size_t i = 1; i < runs.size() - 1; ++i) runs[i].parent = 0, runs[i].epoch_offset = 10;
    const std::string svg = svg_chart(runs);
    check_layout(svg);
    check_ticks(svg, "%");
  }
  SECTION("per-layer SQNR, its legend of long run names") {
    std::vector<RunSqnr> s = {{"alexnet_w4a4_lsq_imagenette_from_a_long_folder", {{"features.0", 13.3}, {"fc", 9.0}}, 500},
                              {"qat_w4a4_all_from_fp32_imagenette", {{"features.0", 13.9}, {"fc", 7.6}}, 500}};
    check_layout(sqnr_chart(s));
  }
}

TEST_CASE("nice_ticks covers the range on a round step", "[compare]") {
  CHECK(nice_ticks(75.45, 78.28, 5) == std::vector<double>{75, 76, 77, 78, 79});
  CHECK(nice_ticks(42.0, 78.8, 6) == std::vector<double>{40, 50, 60, 70, 80});
  CHECK(nice_ticks(0, 251, 5) == std::vector<double>{0, 100, 200, 300});
  CHECK(nice_ticks(0, 0.9, 4) == std::vector<double>{0, 0.25, 0.5, 0.75, 1.0});
  CHECK(tick_decimals(0.25) == 2);
  CHECK(tick_decimals(5) == 0);
}

TEST_CASE("the Pareto front: of sizes that print alike only the most accurate is on it", "[compare]") {
  // Exact ties: equal size, the less accurate dominated; equal points: the first.
  CHECK(pareto_front({{28, 0.77}, {28, 0.78}, {57, 0.78}, {14, 0.70}, {14, 0.70}}) == std::vector<size_t>{3, 1});
  // Through the chart: 28.56 MB and 28.62 MB both print as 28.6 MB, so the
  // less accurate all-4-bit runs are not on the front (they were, 0.06 MB smaller).
  const std::vector<RunSummary> runs = crowded_runs();
  const std::string svg = tradeoff_chart(runs);
  size_t rings = 0;
  for (size_t p = svg.find("r=\"8\" fill=\"none\" stroke=\"#d62728\""); p != std::string::npos;
       p = svg.find("r=\"8\" fill=\"none\" stroke=\"#d62728\"", p + 1))
    ++rings;
  CHECK(rings == 1);  // alexnet_w4a4_lsq_imagenette: the smallest and the most accurate
}

// Issue 40: a QAT run started from a calibration was drawn at epochs 1-2,
// beside its FP32 parent's last epoch: the calibration now records the FP32
// checkpoint it came from, and the curve continues that run.
TEST_CASE("a QAT run from a calibration continues the FP32 run the calibration came from", "[compare][e2e]") {
  const std::filesystem::path dir = testing::fresh_temp_dir("qat_cmpcal_", "runs");
  REQUIRE(run_train({testing::write_sample_config(dir, "fp32.yaml", "", 2, 2, "fp32"), {}, ""}) == 0);
  const std::string quant = "quant: {enabled: true, backend: default, method: minmax}\n";
  CalibrateArgs c;
  c.config = testing::write_sample_config(dir, "q.yaml", quant, 1, 2, "q");
  c.checkpoint = (dir / "fp32" / "best.safetensors").string();
  c.images = 16;
  c.out_dir = (dir / "ptq").string();
  REQUIRE(run_calibrate(c) == 0);
  REQUIRE(run_train({testing::write_sample_config(
                         dir, "qat.yaml",
                         "quant: {enabled: true, backend: default, method: minmax, init_from: " +
                             (dir / "ptq" / "calibrated.safetensors").string() + "}\n",
                         1, 2, "qat"),
                     {}, ""}) == 0);
  const std::vector<std::string> dirs = {(dir / "fp32").string(), (dir / "qat").string()};
  std::vector<RunSummary> runs = {summarize_run(dirs[0]), summarize_run(dirs[1])};
  align_runs(runs, dirs);
  CHECK(runs[1].parent == 0);
  CHECK(runs[1].epoch_offset == 2);
}
