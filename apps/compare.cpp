#include "apps/compare.h"
#include "apps/model_file.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "apps/chart_layout.h"
#include "apps/compare_report.h"
#include "apps/compare_speed.h"
#include "apps/compare_sqnr.h"
#include "apps/config.h"
#include "apps/metrics_log.h"
#include "apps/output_folder.h"
#include "apps/output_kind.h"
#include "apps/report_format.h"
#include "core/error.h"
#include "core/text_file.h"
#include "models/models.h"

namespace qat::apps {

namespace fs = std::filesystem;

std::string bytes_str(int64_t b) {
  if (b >= 1000000) return fmt("%.1f MB", b / 1e6);
  if (b >= 1000) return fmt("%.1f kB", b / 1e3);
  return std::to_string(b) + " B";
}

int64_t weight_storage_bytes(const ModelConfig& model, int weight_bits,
                             const std::map<std::string, int>& layer_weight_bits) {
  ModulePtr m = make_configured_model(model, 0);
  int64_t bits_total = 0;
  for (auto& [name, t] : m->named_parameters()) {
    int bits = 32;
    if (t.dim() >= 2) {
      bits = weight_bits;
      for (auto& [layer, b] : layer_weight_bits)
        if (name == layer + ".weight") bits = b;
    }
    bits_total += t.numel() * bits;
  }
  return (bits_total + 7) / 8;
}

namespace {

// ", classifier.6 W8A8, features.0 W8": per-layer overrides, A the bits of
// the activation the layer reads.
std::string override_label(const RunSummary& r) {
  std::map<std::string, std::string> parts;  // appended piece by piece: GCC 12 warns falsely on "W" + string
  for (auto& [layer, b] : r.layer_weight_bits) (parts[layer] += 'W') += std::to_string(b);
  for (auto& [layer, b] : r.layer_activation_bits) (parts[layer] += 'A') += std::to_string(b);
  std::string out;
  for (auto& [layer, p] : parts) out += ", " + layer + " " + p;
  return out;
}


}  // namespace

RunSummary summarize_run(const std::string& run_dir) {
  const std::string cfg_path = run_dir + "/config.yaml";
  QAT_CHECK(fs::exists(cfg_path), "compare: ", run_dir, " has no config.yaml (not a qat run directory?)");
  // The run's data may have moved since it was trained; only the experiment matters here.
  const ExperimentConfig cfg = load_config(cfg_path, {}, DataPaths::as_recorded);
  RunSummary s;
  s.name = fs::path(run_dir).lexically_normal().filename().string();
  if (s.name.empty()) s.name = fs::path(run_dir).lexically_normal().parent_path().filename().string();
  s.model = cfg.model.name;
  s.num_classes = cfg.model.num_classes;
  if (cfg.quant.enabled) {
    const quant::QConfig q = make_qconfig(cfg.quant);
    s.weight_bits = q.weight_bits;
    s.activation_bits = q.activation_bits;
    for (auto& [layer, bits] : q.overrides) {
      if (bits.weight_bits > 0) s.layer_weight_bits[layer] = bits.weight_bits;
      if (bits.activation_bits > 0) s.layer_activation_bits[layer] = bits.activation_bits;
    }
    s.method = quant::method_name(q.method);
    const Int8TrainingConfig& i8 = cfg.quant.int8_training;
    if (i8.enabled)  // e.g. "moving_average + INT8 training (G8 direction_sensitive, LR scaling)"
      s.method += std::string(" + INT8 training (G") + std::to_string(i8.grad.bits) + " " +
                  enum_name(i8.grad.clipping) + (i8.grad.lr_scaling ? ", LR scaling)" : ")");
  }
  const auto rows = read_metrics(run_dir);
  QAT_CHECK(!rows.empty(), "compare: ", run_dir, "/metrics.csv has no finished epoch");
  for (const auto& r : rows) {
    s.val_top1.push_back(r.val_top1);
    s.train_seconds += r.epoch_seconds;
    if (r.val_top1 > s.best_top1) s.best_top1 = r.val_top1, s.best_top5 = r.val_top5;
  }
  s.final_top1 = rows.back().val_top1;
  s.final_top5 = rows.back().val_top5;
  s.weight_bytes = weight_storage_bytes(cfg.model, s.weight_bits, s.layer_weight_bits);
  s.init_from = cfg.quant.enabled ? cfg.quant.init_from : std::string();
  return s;
}

namespace {
// The checkpoint a run started from, through a calibration: a calibrated
// checkpoint records the FP32 one it was calibrated from ("calibrated_from"),
// and QAT from it continues that FP32 run. A file that cannot be read (gone,
// or a checkpoint from before the record) is taken as it is.
std::string started_from(const std::string& init_from) {
  std::error_code ec;
  if (!fs::is_regular_file(init_from, ec)) return init_from;
  try {
    const Metadata m = load_safetensors_metadata(init_from);
    if (const auto it = m.find("calibrated_from"); it != m.end()) return it->second;
  } catch (const Error&) {
  }
  return init_from;
}
}  // namespace

void align_runs(std::vector<RunSummary>& runs, const std::vector<std::string>& run_dirs) {
  auto parent_of = [&](const RunSummary& r) -> int {
    if (r.init_from.empty()) return -1;
    const fs::path folder = fs::path(started_from(r.init_from)).lexically_normal().parent_path();
    std::error_code ec;
    for (size_t j = 0; j < runs.size(); ++j) {
      if (&runs[j] == &r) continue;
      if (fs::equivalent(folder, run_dirs[j], ec)) return static_cast<int>(j);
    }
    for (size_t j = 0; j < runs.size(); ++j)
      if (&runs[j] != &r && folder.filename().string() == runs[j].name) return static_cast<int>(j);
    return -1;
  };
  for (auto& r : runs) r.parent = parent_of(r);
  // Offsets along each chain (a cycle, which only hand-edited configs make, is cut).
  for (size_t i = 0; i < runs.size(); ++i) {
    int64_t offset = 0;
    size_t guard = 0;
    for (int p = runs[i].parent; p >= 0 && guard < runs.size(); p = runs[p].parent, ++guard)
      offset += static_cast<int64_t>(runs[p].val_top1.size());
    if (guard >= runs.size()) runs[i].parent = -1, offset = 0;
    runs[i].epoch_offset = offset;
  }
}

std::string markdown_table(const std::vector<RunSummary>& runs) {
  // The reference for deltas: the first FP32 run given, else the first run.
  const RunSummary* ref = &runs.front();
  for (const auto& r : runs)
    if (r.method == "fp32") {
      ref = &r;
      break;
    }
  bool speed = false;
  for (const auto& r : runs) speed = speed || r.infer_img_s > 0;
  std::string t =
      "| run | bits W/A | method | best top-1 | best top-5 | final top-1 | final top-5 | Δ best top-1 vs " +
      markdown_cell(ref->name) +
      " | weights | train time |" + (speed ? " inference |" : "") + "\n|---|---|---|---|---|---|---|---|---|---|" +
      (speed ? "---|" : "") + "\n";
  for (const auto& r : runs) {
    std::string bits = r.method == "fp32" ? "32/32" : std::to_string(r.weight_bits) + "/" +
                                                          std::to_string(r.activation_bits);
    bits += override_label(r);
    t += "| " + markdown_cell(r.name) + " | " + bits + " | " + r.method + " | " + fmt("%.2f%%", 100 * r.best_top1) + " | " +
         fmt("%.2f%%", 100 * r.best_top5) + " | " + fmt("%.2f%%", 100 * r.final_top1) + " | " +
         fmt("%.2f%%", 100 * r.final_top5) + " | " + fmt("%+.2f", 100 * (r.best_top1 - ref->best_top1)) + " | " +
         bytes_str(r.weight_bytes) + " | " + fmt("%.1f min", r.train_seconds / 60) + " |";
    if (speed) t += r.infer_img_s > 0 ? fmt(" %.0f img/s |", r.infer_img_s) : std::string(" |");
    t += "\n";
  }
  return t;
}

std::string svg_chart(const std::vector<RunSummary>& runs) {
  double longest = 0;
  for (const auto& r : runs) longest = std::max(longest, text_width(r.name));
  // The legend sits right of the plot: room for the longest run name.
  const double right = 50 + longest + 10, W = 520 + right, H = 420, left = 60, top = 30, bottom = 50;
  const double pw = W - left - right, ph = H - top - bottom;
  size_t max_epochs = 1;
  double lo = 1, hi = 0;
  for (const auto& r : runs) {
    max_epochs = std::max(max_epochs, static_cast<size_t>(r.epoch_offset) + r.val_top1.size());
    for (double v : r.val_top1) lo = std::min(lo, v), hi = std::max(hi, v);
  }
  const std::vector<double> ticks = nice_ticks(std::max(0.0, 100 * lo - 1), std::min(100.0, 100 * hi + 1), 6);  // %
  lo = ticks.front() / 100, hi = ticks.back() / 100;
  const int decimals = tick_decimals(ticks[1] - ticks[0]);
  auto X = [&](double e) { return left + (max_epochs == 1 ? pw / 2 : pw * (e - 1) / (max_epochs - 1)); };
  auto Y = [&](double v) { return top + ph * (1 - (v - lo) / (hi - lo)); };
  const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};
  std::string s = svg_begin(W, H);
  s += fmt("<text x=\"%.0f\" y=\"18\" font-size=\"14\">val top-1 per epoch</text>\n", left);
  for (double t : ticks) {
    const double v = t / 100;
    s += fmt("<line x1=\"%.1f\"", left) + fmt(" x2=\"%.1f\"", left + pw) + fmt(" y1=\"%.1f\"", Y(v)) +
         fmt(" y2=\"%.1f\" stroke=\"#ddd\"/>\n", Y(v));
    s += fmt("<text x=\"%.1f\"", left - 8) + fmt(" y=\"%.1f\" text-anchor=\"end\">", Y(v) + 4) +
         fmt(("%." + std::to_string(decimals) + "f%%</text>\n").c_str(), t);
  }
  for (size_t e = 1; e <= max_epochs; ++e)
    s += fmt("<text x=\"%.1f\"", X(e)) + fmt(" y=\"%.1f\" text-anchor=\"middle\">", top + ph + 18) +
         std::to_string(e) + "</text>\n";
  s += fmt("<text x=\"%.1f\"", left + pw / 2) + fmt(" y=\"%.1f\" text-anchor=\"middle\">epoch</text>\n", H - 10);
  for (size_t i = 0; i < runs.size(); ++i) {
    const char* c = colors[i % 8];
    const RunSummary& r = runs[i];
    const double off = static_cast<double>(r.epoch_offset);
    std::string pts;
    if (r.parent >= 0 && !runs[r.parent].val_top1.empty()) {
      // A fine-tune starts where its parent ended: from that point, with a ring on it.
      const double x0 = X(off), y0 = Y(runs[r.parent].val_top1.back());
      pts += fmt("%.1f,", x0) + fmt("%.1f ", y0);
      s += fmt("<circle cx=\"%.1f\"", x0) + fmt(" cy=\"%.1f\" r=\"5\" fill=\"white\" stroke=\"", y0) + c +
           "\" stroke-width=\"2\"><title>" + escape_html(r.name + " starts from " + runs[r.parent].name) +
           "</title></circle>\n";
    }
    for (size_t e = 0; e < r.val_top1.size(); ++e)
      pts += fmt("%.1f,", X(off + static_cast<double>(e) + 1)) + fmt("%.1f ", Y(r.val_top1[e]));
    s += "<polyline fill=\"none\" stroke=\"" + std::string(c) + "\" stroke-width=\"2\" points=\"" + pts + "\"/>\n";
    const double ly = top + 16 * i + 10;
    s += fmt("<line x1=\"%.1f\"", left + pw + 15) + fmt(" x2=\"%.1f\"", left + pw + 35) + fmt(" y1=\"%.1f\"", ly) +
         fmt(" y2=\"%.1f\" stroke=\"", ly) + c + "\" stroke-width=\"2\"/>\n";
    s += fmt("<text x=\"%.1f\"", left + pw + 40) + fmt(" y=\"%.1f\">", ly + 4) + escape_html(runs[i].name) + "</text>\n";
  }
  return s + "</svg>\n";
}

// Each run given once, all of one model output size (top-1 deltas between a
// 2-class and a 10-class run mean nothing).
void check_comparable(const std::vector<RunSummary>& runs, const std::vector<std::string>& dirs) {
  std::error_code ec;
  for (size_t i = 0; i < runs.size(); ++i)
    for (size_t j = 0; j < i; ++j) {
      QAT_CHECK(!fs::equivalent(dirs[i], dirs[j], ec), "compare: ", dirs[j], " and ", dirs[i],
                " are the same run; give each run once");
      QAT_CHECK(runs[i].num_classes == runs[j].num_classes, "compare: ", dirs[j], " has ", runs[j].num_classes,
                " classes but ", dirs[i], " has ", runs[i].num_classes,
                "; runs of different model.num_classes are not comparable");
    }
}

namespace {

// Runs are labelled by their folder's name; where two names are the same
// ("a/run", "b/run") they take as many trailing path components as tell them apart.
void label_runs(std::vector<RunSummary>& runs, const std::vector<std::string>& dirs) {
  std::vector<std::vector<std::string>> parts(runs.size());
  for (size_t i = 0; i < runs.size(); ++i)
    for (const auto& c : fs::absolute(dirs[i]).lexically_normal())
      if (!c.empty() && c != "/") parts[i].push_back(c.string());
  auto tail = [&](size_t i, size_t k) {
    std::string out;
    const size_t n = parts[i].size();
    for (size_t c = n > k ? n - k : 0; c < n; ++c) {
      if (!out.empty()) out += '/';
      out += parts[i][c];
    }
    return out;
  };
  std::vector<std::string> labels;
  for (size_t i = 0; i < runs.size(); ++i) {
    size_t k = 1;
    auto clashes = [&] {
      for (size_t j = 0; j < runs.size(); ++j)
        if (j != i && (k == 1 ? runs[j].name == runs[i].name : tail(j, k) == tail(i, k))) return true;
      return false;
    };
    while (clashes() && k < parts[i].size()) ++k;
    labels.push_back(k == 1 ? runs[i].name : tail(i, k));
  }
  for (size_t i = 0; i < runs.size(); ++i) runs[i].name = labels[i];
}

}  // namespace

// --out's files.
const OutputFolderSpec kOutSpec{"compare", "--out", {"compare.md", "val_top1.svg", "tradeoff.svg", "index.html",
                                                     "sqnr.md", "speed.svg", "sqnr.svg"}};

int run_compare(const CompareArgs& args) {
  QAT_CHECK(!args.runs.empty(), "compare: give at least one run directory");
  std::error_code ec;  // the output folder first: its problem is reported before any run is read
  QAT_CHECK(!fs::exists(args.out_dir, ec) || fs::is_directory(args.out_dir, ec), "compare: --out ", args.out_dir,
            " is a file, not a folder");
  check_out_kind("compare", args.out_dir, {OutputKind::training_run, OutputKind::export_model, OutputKind::calibration});
  OutputFolder out(kOutSpec, args.out_dir);  // Note [output folder]
  std::vector<RunSummary> runs;
  for (const auto& r : args.runs) runs.push_back(summarize_run(r));
  check_comparable(runs, args.runs);
  align_runs(runs, args.runs);  // before the labels: a fine-tune's parent is also found by folder name
  label_runs(runs, args.runs);
  if (args.speed_batch > 0) measure_speed(runs, args.runs, static_cast<int>(args.speed_batch));
  const std::string table = markdown_table(runs);
  const std::string curves = svg_chart(runs), tradeoff = tradeoff_chart(runs);
  std::vector<std::pair<std::string, std::string>> svgs = {
      {"val top-1 per epoch (a fine-tune continues the run it started from)", curves},
      {"accuracy against weight storage", tradeoff}};
  const std::string speed = speed_chart(runs);
  if (!speed.empty()) svgs.emplace_back("accuracy against inference throughput", speed);
  std::string sqnr_md, sqnr_svg;
  if (args.sqnr_images > 0) {
    const auto s = layer_sqnr(runs, args.runs, args.sqnr_images);
    QAT_CHECK(!s.empty(), "compare --sqnr-images: needs an FP32 run and a fine-tune of it (quant.init_from), both "
                          "with best.safetensors");
    sqnr_md = sqnr_table(s);
    sqnr_svg = sqnr_chart(s);
    svgs.emplace_back("per-layer output error against FP32", sqnr_svg);
  }
  const std::string page =
      html_report("qat compare: " + std::to_string(runs.size()) + " runs", table + "\n" + sqnr_md, svgs);
  for (const auto& [name, text] : {std::pair<std::string, std::string>{"compare.md", table},
                                    {"val_top1.svg", curves},
                                    {"tradeoff.svg", tradeoff},
                                    {"index.html", page},
                                    {"sqnr.md", sqnr_md},
                                    {"speed.svg", speed},
                                    {"sqnr.svg", sqnr_svg}}) {
    if (text.empty()) continue;  // not made this time: the new folder has none (an old one would be read as this one's)
    try {
      write_text_file_atomic(out.staged(name), text);
    } catch (const Error& e) {
      QAT_FAIL("compare: ", e.what());
    }
  }
  out.publish();
  std::printf("%s\n%s\nwrote %s/{compare.md, val_top1.svg, tradeoff.svg, index.html%s}\n", table.c_str(),
              sqnr_md.c_str(), args.out_dir.c_str(), sqnr_md.empty() ? "" : ", sqnr.md, sqnr.svg");
  return 0;
}

}  // namespace qat::apps
