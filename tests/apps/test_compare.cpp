// qat compare on hand-made run directories.
#include <algorithm>
#include <filesystem>
#include <fstream>

#include "tests/test_util.h"

#include "apps/compare.h"
#include "apps/file_digest.h"
#include "apps/report_format.h"
#include "apps/compare_report.h"
#include "apps/metrics_log.h"

using namespace qat::apps;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {
fs::path make_run(const std::string& name, const std::string& quant, const std::vector<double>& top1) {
  fs::path d = fs::temp_directory_path() / ("qat_cmp_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  // Data folders that no longer exist: compare reads the experiment only.
  std::ofstream(d / "config.yaml") << "model: {name: small_cnn, num_classes: 4}\n"
                                      "data: {train: /gone/train, val: /gone/val}\n"
                                      "train: {epochs: 3}\n"
                                      "output: {dir: runs/" << name << "}\n" << quant;
  for (size_t e = 0; e < top1.size(); ++e) {
    EpochMetrics m;
    m.epoch = static_cast<int64_t>(e + 1);
    m.val_top1 = top1[e];
    m.val_top5 = 1.0;
    m.epoch_seconds = 30;
    append_metrics(d.string(), m);
  }
  return d;
}
}  // namespace

TEST_CASE("compare tabulates best/final accuracy, deltas and weight storage", "[compare]") {
  fs::path fp = make_run("fp32", "", {0.5, 0.7, 0.65});
  fs::path q4 = make_run("w4a4", "quant: {enabled: true, method: lsq, weight: {bits: 4}, activation: {bits: 4}}\n",
                         {0.4, 0.6});
  RunSummary a = summarize_run(fp.string()), b = summarize_run(q4.string());
  REQUIRE(a.best_top1 == Approx(0.7));
  REQUIRE(a.final_top1 == Approx(0.65));
  REQUIRE(a.train_seconds == Approx(90));
  REQUIRE(b.weight_bits == 4);
  REQUIRE(b.method == "lsq");
  // small_cnn: weights 8*3*9 + 16*8*9 + 4*16 = 1432 values; BN 2*8 + 2*16 and fc bias 4 = 52 float32
  REQUIRE(a.weight_bytes == (1432 + 52) * 4);
  REQUIRE(b.weight_bytes == 1432 / 2 + 52 * 4);
  const std::string t = markdown_table({a, b});
  REQUIRE_THAT(t, Contains("| fp32 | 32/32 | fp32 | 70.00%") && Contains("| w4a4 | 4/4 | lsq | 60.00%") &&
                      Contains("-10.00"));
  const std::string svg = svg_chart({a, b});
  REQUIRE_THAT(svg, Contains("<svg") && Contains("polyline") && Contains("w4a4"));
  REQUIRE_THROWS_WITH(summarize_run((fp / "nope").string()), Contains("no config.yaml"));
}

TEST_CASE("compare reads each run's config.yaml through the config loader", "[compare]") {
  fs::path bad = make_run("bad", "quant: {enabled: true, bits: four}\n", {0.5});
  REQUIRE_THROWS_WITH(summarize_run(bad.string()), Contains((bad / "config.yaml").string() + ", line 5: quant.bits: "
                                                                                             "expected an integer, got 'four'"));
  fs::path over = make_run("over",
                           "quant: {enabled: true, bits: 4, overrides: {fc: {weight_bits: 8, activation_bits: 8}, "
                           "features.0: {weight_bits: 8}}}\n",
                           {0.5});
  RunSummary s = summarize_run(over.string());
  CHECK(s.weight_bits == 4);
  CHECK(s.activation_bits == 4);
  CHECK(s.method == "moving_average");
  CHECK(s.layer_weight_bits == std::map<std::string, int>{{"fc", 8}, {"features.0", 8}});
  CHECK(s.layer_activation_bits == std::map<std::string, int>{{"fc", 8}});
  CHECK_THAT(markdown_table({s}), Contains("| 4/4, fc W8A8, features.0 W8 |"));
  fs::path i8 = make_run("int8", "quant: {enabled: true, int8_training: {enabled: true, clipping: max}}\n", {0.5});
  CHECK(summarize_run(i8.string()).method == "moving_average + INT8 training (G8 max, LR scaling)");
}

TEST_CASE("truncate_metrics keeps the rows of saved epochs only", "[compare]") {
  fs::path d = make_run("trunc", "", {0.1, 0.2, 0.3});
  truncate_metrics(d.string(), 2);
  auto rows = read_metrics(d.string());
  REQUIRE(rows.size() == 2);
  REQUIRE(rows.back().epoch == 2);
  std::ifstream j(d / "metrics.jsonl");
  int lines = 0;
  for (std::string l; std::getline(j, l);) ++lines;
  REQUIRE(lines == 2);
  truncate_metrics(d.string(), 0);
  REQUIRE(read_metrics(d.string()).empty());
}

TEST_CASE("truncate_metrics refuses to lose rows of saved epochs, changing nothing", "[compare]") {
  fs::path d = make_run("trunc_bad", "", {0.1, 0.2, 0.3});
  auto text = [](const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  };
  const std::string csv = (d / "metrics.csv").string();
  const std::string jsonl = text(d / "metrics.jsonl");
  // Row 2 garbled (the checkpoint has 3 epochs): refused, naming the row.
  std::string rows = text(csv);
  const size_t row2 = rows.find('\n', rows.find('\n', rows.find('\n') + 1) + 1);  // end of row 2
  const size_t row2_start = rows.rfind('\n', row2 - 1) + 1;
  rows.replace(row2_start, row2 - row2_start, "garbage");
  std::ofstream(csv, std::ios::binary) << rows;
  REQUIRE_THROWS_WITH(truncate_metrics(d.string(), 3),
                      Contains(csv + " holds 1 readable row(s), but the checkpoint has 3 epoch(s) done (row 2: "
                                     "expected 10 comma-separated numbers, got 1: garbage)"));
  CHECK(text(csv) == rows);
  CHECK(text(d / "metrics.jsonl") == jsonl);
  // A garbled row past the checkpoint's epochs (cut short by a crash) is dropped.
  CHECK(truncate_metrics(d.string(), 1) == 1);
  CHECK(read_metrics(d.string()).size() == 1);
  // Not the header at all: refused too; both files removed: the log starts afresh.
  std::ofstream(csv, std::ios::binary) << "garbage\n";
  REQUIRE_THROWS_WITH(truncate_metrics(d.string(), 1), Contains("holds 0 readable row(s)") && Contains("line 1:"));
  fs::remove(csv);
  REQUIRE_THROWS_WITH(truncate_metrics(d.string(), 1), Contains("holds 0 readable row(s)"));
  fs::remove(d / "metrics.jsonl");
  CHECK(truncate_metrics(d.string(), 1) == 0);
  CHECK(read_metrics(d.string()).empty());
}

TEST_CASE("a fine-tune of a compared run continues its curve, unrelated runs keep their own x", "[compare]") {
  fs::path fp = make_run("base_fp32", "", {0.3, 0.5, 0.6});
  // init_from as training recorded it (relative to where qat ran): matched by the run folder's name.
  fs::path ft = make_run("ft_w8", "quant: {enabled: true, init_from: runs/base_fp32/best.safetensors}\n", {0.62, 0.64});
  fs::path ft2 = make_run("ft_w4", "quant: {enabled: true, bits: 4, init_from: " + (ft / "best.safetensors").string() + "}\n",
                          {0.55});
  fs::path other = make_run("scratch_w8", "quant: {enabled: true, init_from: /elsewhere/x/best.safetensors}\n", {0.2, 0.4});
  const std::vector<std::string> dirs = {fp.string(), ft.string(), ft2.string(), other.string()};
  std::vector<RunSummary> runs;
  for (const auto& d : dirs) runs.push_back(summarize_run(d));
  align_runs(runs, dirs);
  CHECK(runs[0].parent == -1);
  CHECK(runs[0].epoch_offset == 0);
  CHECK(runs[1].parent == 0);  // by folder name
  CHECK(runs[1].epoch_offset == 3);
  CHECK(runs[2].parent == 1);  // by path; a chain adds up
  CHECK(runs[2].epoch_offset == 5);
  CHECK(runs[3].parent == -1);
  CHECK(runs[3].epoch_offset == 0);
  // Drawn: the fine-tune's line starts at its parent's last point, with a ring there.
  const std::string svg = svg_chart(runs);
  CHECK_THAT(svg, Contains("ft_w8 starts from base_fp32") && Contains("ft_w4 starts from ft_w8"));
}

TEST_CASE("the Pareto front of size against accuracy", "[compare]") {
  // (MB, top-1): b is beaten by a (smaller and better), d by c; e ties a and comes later.
  const std::vector<std::pair<double, double>> pts = {{28, 0.77}, {57, 0.76}, {57, 0.78}, {228, 0.762}, {28, 0.77},
                                                      {14, 0.70}, {228, 0.79}};
  CHECK(pareto_front(pts) == std::vector<size_t>{5, 0, 2, 6});
  CHECK(pareto_front({}).empty());
  CHECK(pareto_front({{1, 0.5}}) == std::vector<size_t>{0});
}

TEST_CASE("qat compare writes one self-contained page with the table and both charts", "[compare]") {
  fs::path fp = make_run("page_fp32", "", {0.5, 0.7});
  fs::path q = make_run("page_w8", "quant: {enabled: true, init_from: runs/page_fp32/best.safetensors}\n", {0.71});
  const fs::path out = fp.parent_path() / "report";
  REQUIRE(run_compare({{fp.string(), q.string()}, out.string()}) == 0);
  std::ifstream in(out / "index.html");
  const std::string html((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK_THAT(html, Contains("<table>") && Contains("<td>page_w8</td>") && Contains("<th>run</th>"));
  CHECK(html.find("src=") == std::string::npos);  // nothing fetched: no script, image or style sheet to load
  CHECK(html.find("href") == std::string::npos);
  CHECK_THAT(html, Contains("Pareto front") && Contains("page_w8 starts from page_fp32"));
  CHECK(fs::exists(out / "tradeoff.svg"));
}

TEST_CASE("the accuracy-vs-throughput chart: faster and more accurate is better", "[compare]") {
  std::vector<RunSummary> runs(3);
  runs[0].name = "slow_best", runs[0].best_top1 = 0.8, runs[0].infer_img_s = 100;
  runs[1].name = "fast_good", runs[1].best_top1 = 0.78, runs[1].infer_img_s = 400;
  runs[2].name = "unmeasured", runs[2].best_top1 = 0.9;
  const std::string svg = speed_chart(runs);
  CHECK_THAT(svg, Contains("slow_best") && Contains("fast_good") && Contains("Pareto front"));
  CHECK(svg.find("unmeasured") == std::string::npos);
  // Both points on the front (neither beats the other): the dashed line has two points.
  const size_t p = svg.find("stroke-dasharray");
  REQUIRE(p != std::string::npos);
  const std::string pts = svg.substr(svg.find("points=\"", p) + 8, svg.find("\"/>", p) - svg.find("points=\"", p) - 8);
  CHECK(std::count(pts.begin(), pts.end(), ',') == 2);
  for (auto& r : runs) r.infer_img_s = 0;
  CHECK(speed_chart(runs).empty());
  CHECK(markdown_table(runs).find("inference") == std::string::npos);
  runs[1].infer_img_s = 400;
  CHECK_THAT(markdown_table(runs), Contains("| 400 img/s |"));
}

TEST_CASE("index.html renders each Markdown table apart", "[compare]") {
  const std::string html = html_report("t", "| a | b |\n|---|---|\n| 1 | 2 |\n\nCaption line\n\n| x | y | z |\n|---|---|---|\n| 3 | 4 | 5 |\n", {});
  CHECK(std::count(html.begin(), html.end(), '\n') > 0);
  size_t tables = 0;
  for (size_t p = html.find("<table>"); p != std::string::npos; p = html.find("<table>", p + 1)) ++tables;
  CHECK(tables == 2);
  CHECK_THAT(html, Contains("<th>a</th><th>b</th>") && Contains("<th>x</th><th>y</th><th>z</th>") &&
                       Contains("<td>3</td>") && Contains("<p>Caption line</p>"));
}

// Run names are folder names: any of < > & " ' | may be in them.
TEST_CASE("run names are escaped in the charts, the page and the Markdown table", "[compare]") {
  const std::string name = "a<b>&\"q|r'";
  fs::path odd = make_run(name, "", {0.5, 0.6});
  fs::path fp = make_run("fp32", "", {0.5, 0.7});
  const std::vector<RunSummary> runs = {summarize_run(fp.string()), summarize_run(odd.string())};
  REQUIRE(runs[1].name == name);
  const std::string escaped = "a&lt;b&gt;&amp;&quot;q|r&#39;";
  for (const std::string& svg : {svg_chart(runs), tradeoff_chart(runs)}) {
    CHECK(svg.find("<b>") == std::string::npos);
    CHECK_THAT(svg, Contains(escaped));
  }
  const std::string table = markdown_table(runs);
  CHECK_THAT(table, Contains("| a\\<b\\>\\&\"q\\|r' | 32/32 |"));  // no HTML in the Markdown either
  CHECK(markdown_cell("a\nb\r|c\\") == "a b \\|c\\\\");  // a newline would end the table row
  const std::string html = html_report("t", table, {{"curves", svg_chart(runs)}});
  CHECK(html.find("<b>") == std::string::npos);
  CHECK_THAT(html, Contains("<td>" + escaped + "</td><td>32/32</td>"));
}

TEST_CASE("compare refuses metrics.csv rows qat cannot have written, naming the row and why", "[compare]") {
  fs::path run = make_run("odd_metrics", "", {0.5, 0.6});
  const std::string header =
      "epoch,train_loss,train_top1,val_loss,val_top1,val_top5,lr,epoch_time_s,images_per_s,data_wait_share\n";
  const std::string good = "1,2.6,0.1,2.3,0.5,0.95,0.01,5,19,0.002\n";
  auto with = [&](const std::string& text) {
    std::ofstream(run / "metrics.csv", std::ios::trunc) << text;
    return run.string();
  };
  CHECK(summarize_run(with(header + good)).best_top1 == Approx(0.5));
  REQUIRE_THROWS_WITH(summarize_run(with(header + "1;2.6;0.1;2.3;0.5;0.95;0.01;5;19;0.002\n")),
                      Contains("row 1: expected 10 comma-separated numbers"));
  REQUIRE_THROWS_WITH(summarize_run(with(header + "1,2.6,0.1,2.3,7.5,0.95,0.01,5,19,0.002\n")),
                      Contains("row 1: an accuracy outside [0, 1]"));
  REQUIRE_THROWS_WITH(summarize_run(with(header + "1,2.6,0.1,2.3,0.5,0.95,0.01,-5,19,0.002\n")),
                      Contains("row 1: a loss, lr, time, speed or wait share that is negative"));
  // (a nan cell read as a wrong column count before)
  REQUIRE_THROWS_WITH(summarize_run(with(header + "1,2.6,0.1,nan,0.5,0.95,0.01,5,19,0.002\n")),
                      Contains("row 1: column val_loss is nan, not a finite number"));
  REQUIRE_THROWS_WITH(summarize_run(with(header + "1,2.6,0.1,2.3,0.5,0.95,0.01,5,fast,0.002\n")),
                      Contains("row 1: column images_per_s is 'fast', not a number"));
  REQUIRE_THROWS_WITH(summarize_run(with(header + "1,2.6,0.1,2.3,0.5,0.95,0.01,5,19\n")),
                      Contains("row 1: expected 10 comma-separated numbers, got 9"));
  REQUIRE_THROWS_WITH(summarize_run(with(header + good + good)), Contains("row 2: epoch 1 where epoch 2 comes"));
  REQUIRE_THROWS_WITH(summarize_run(with(header + "1,2.6,0.1,2.3,0.5,0.95,0.01,1e308,19,0.002\n")),
                      Contains("row 1: an epoch time over 1e9 s"));
  REQUIRE_THROWS_WITH(summarize_run(with(good + "2,2.6,0.1,2.3,0.9,0.95,0.01,5,19,0.002\n")),
                      Contains("line 1: expected the header epoch,train_loss"));
}

TEST_CASE("compare refuses a run given twice, runs of other num_classes and an --out holding another output",
          "[compare]") {
  const fs::path a = make_run("cmp_a", "", {0.5, 0.6});
  const fs::path out = a.parent_path() / "cmp_out";
  REQUIRE_THROWS_WITH(run_compare({{a.string(), (a / ".." / "cmp_a").string()}, out.string()}),
                      Contains("are the same run; give each run once"));
  const fs::path two = make_run("cmp_two", "", {0.9});
  {
    std::string cfg;
    std::ifstream in(two / "config.yaml");
    std::getline(in, cfg, '\0');
    cfg.replace(cfg.find("num_classes: 4"), 14, "num_classes: 2");
    std::ofstream(two / "config.yaml", std::ios::trunc) << cfg;
  }
  REQUIRE_THROWS_WITH(run_compare({{a.string(), two.string()}, out.string()}),
                      Contains(a.string() + " has 4 classes but " + two.string() + " has 2") &&
                          Contains("not comparable"));
  // a run's own folder as --out: refused before anything is written there
  REQUIRE_THROWS_WITH(run_compare({{a.string()}, a.string()}),
                      Contains("compare: --out " + a.string() + " holds metrics.csv of a training run"));
  CHECK_FALSE(fs::exists(a / "compare.md"));
}

TEST_CASE("compare labels runs whose folders share a name by the path components that differ, and drops stale "
          "outputs", "[compare]") {
  const fs::path x = make_run("x/r", "", {0.5, 0.6}), y = make_run("y/r", "", {0.4, 0.7});
  const fs::path out = x.parent_path().parent_path() / "cmp_labels";
  fs::create_directories(out);
  // An earlier compare's folder: its outputs and their record (Note [output folder]).
  const std::string table = "an earlier compare's table", chart = "<svg/>";
  std::ofstream(out / "sqnr.md") << table;
  std::ofstream(out / "speed.svg") << chart;
  std::ofstream(out / ".qat-output") << "qat output folder of compare\n"
                                     << sha256_text(table) << " " << table.size() << " sqnr.md\n"
                                     << sha256_text(chart) << " " << chart.size() << " speed.svg\n";
  REQUIRE(run_compare({{x.string(), y.string()}, out.string()}) == 0);
  std::string md;
  std::ifstream in(out / "compare.md");
  std::getline(in, md, '\0');
  CHECK_THAT(md, Contains("| x/r |") && Contains("| y/r |"));
  CHECK_FALSE(fs::exists(out / "sqnr.md"));  // not made this time (no --sqnr-images)
  CHECK_FALSE(fs::exists(out / "speed.svg"));
}
