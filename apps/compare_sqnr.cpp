#include "apps/compare_sqnr.h"
#include "apps/model_file.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>

#include "apps/chart_layout.h"
#include "apps/config.h"
#include "apps/ptq.h"
#include "apps/report_format.h"
#include "apps/run_state.h"
#include "apps/train.h"
#include "core/autograd.h"
#include "core/error.h"
#include "layers/layers.h"
#include "models/checkpoint.h"
#include "models/models.h"
#include "quant/sim/avg_pool_on_grid.h"
#include "quant/sim/qat_modules.h"

namespace qat::apps {

namespace fs = std::filesystem;

namespace {

Tensor trace_into(Module& m, const Tensor& x, const std::string& prefix, std::map<std::string, Tensor>& out) {
  Tensor h = x;
  for (auto& [name, child] : m.children()) {
    const std::string full = prefix.empty() ? name : prefix + "." + name;
    // (an AvgPoolOnGrid's two children run together: its forward rounds as the model does)
    const bool walk = dynamic_cast<Sequential*>(child.get()) && !dynamic_cast<quant::AvgPoolOnGrid*>(child.get());
    h = walk ? trace_into(*child, h, full, out) : child->forward(h);
    out[full] = h;
  }
  return h;
}

// Quantized layer name -> where its output is compared: after the Identity
// modules that took the place of the layers folded into it.
std::vector<std::pair<std::string, std::string>> comparison_points(Module& qat) {
  std::vector<std::pair<std::string, std::string>> out;
  std::function<void(Module&, const std::string&)> walk = [&](Module& m, const std::string& prefix) {
    const auto& ch = m.children();
    for (size_t i = 0; i < ch.size(); ++i) {
      const std::string full = prefix.empty() ? ch[i].first : prefix + "." + ch[i].first;
      Module* c = ch[i].second.get();
      if (dynamic_cast<quant::QatConv2d*>(c) || dynamic_cast<quant::QatLinear*>(c)) {
        size_t j = i;
        while (j + 1 < ch.size() && ch[j + 1].second->type_name() == "Identity") ++j;
        out.emplace_back(full, prefix.empty() ? ch[j].first : prefix + "." + ch[j].first);
      } else if (dynamic_cast<Sequential*>(c)) {
        walk(*c, full);
      }
    }
  };
  walk(qat, "");
  return out;
}

}  // namespace

std::map<std::string, Tensor> trace_outputs(Module& model, const Tensor& x) {
  std::map<std::string, Tensor> out;
  trace_into(model, x, "", out);
  return out;
}

double sqnr_db(double signal, double noise) {
  if (noise <= 0) return INFINITY;
  return 10.0 * std::log10(signal / noise);
}

std::vector<RunSqnr> layer_sqnr(const std::vector<RunSummary>& runs, const std::vector<std::string>& run_dirs,
                                int64_t images) {
  int ref = -1;
  for (size_t i = 0; i < runs.size(); ++i)
    if (runs[i].method == "fp32" && fs::exists(run_dirs[i] + "/best.safetensors")) {
      ref = static_cast<int>(i);
      break;
    }
  if (ref < 0) return {};
  const ExperimentConfig rcfg = load_config(run_dirs[ref] + "/config.yaml");
  ModulePtr fp32 = make_configured_model(rcfg.model, 0);
  load_model_checked(run_dirs[ref] + "/best.safetensors", *fp32, nullptr);
  fp32->eval();
  const data::ImageFolder val = image_folder(rcfg.data, rcfg.data.val);
  const ImageSet set = load_image_set(val, balanced_indices(val, images, rcfg.train.seed), transform_spec(rcfg.data));
  // Only fine-tunes of the reference (directly or through a chain): a run
  // trained from scratch is another network, its layers not comparable.
  auto descends = [&](size_t i) {
    size_t guard = 0;
    for (int p = runs[i].parent; p >= 0 && guard++ < runs.size(); p = runs[p].parent)
      if (p == ref) return true;
    return false;
  };
  std::vector<RunSqnr> out;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (runs[i].method == "fp32" || !descends(i) || !fs::exists(run_dirs[i] + "/best.safetensors")) continue;
    const ExperimentConfig cfg = load_config(run_dirs[i] + "/config.yaml", {}, DataPaths::as_recorded);
    ModulePtr q = build_model(cfg, false, false);
    load_run_state(run_dirs[i] + "/best.safetensors", *q, nullptr, &cfg, ConfigMatch::quant);
    q->eval();
    const auto points = comparison_points(*q);
    std::vector<double> signal(points.size(), 0), noise(points.size(), 0);
    NoGradGuard ng;
    for (int64_t lo = 0; lo < set.images.size(0); lo += 32) {
      const Tensor x = set.images.narrow(0, lo, std::min<int64_t>(32, set.images.size(0) - lo)).contiguous();
      const auto a = trace_outputs(*fp32, x), b = trace_outputs(*q, x);
      for (size_t k = 0; k < points.size(); ++k) {
        const auto ra = a.find(points[k].second), rb = b.find(points[k].second);
        QAT_CHECK(ra != a.end() && rb != b.end() && ra->second.numel() == rb->second.numel(), "compare: layer ",
                  points[k].first, " of ", runs[i].name, " has no output matching the FP32 run's at ", points[k].second);
        const std::vector<float> u = ra->second.contiguous().to_vector(), v = rb->second.contiguous().to_vector();
        for (size_t e = 0; e < u.size(); ++e) {
          const double d = static_cast<double>(u[e]) - v[e];
          signal[k] += static_cast<double>(u[e]) * u[e];
          noise[k] += d * d;
        }
      }
    }
    RunSqnr r{runs[i].name, {}, set.images.size(0)};
    for (size_t k = 0; k < points.size(); ++k) r.layers.push_back({points[k].first, sqnr_db(signal[k], noise[k])});
    out.push_back(std::move(r));
  }
  return out;
}

std::string sqnr_table(const std::vector<RunSqnr>& s) {
  const int64_t images = s.empty() ? 0 : s.front().images;
  if (s.empty()) return "";
  std::string t = "Per-layer output SQNR against the FP32 run (dB, " + std::to_string(images) +
                  " validation images; higher is closer, ~6 dB a bit)\n\n| layer |";
  for (const auto& r : s) {  // appended piecewise: GCC 12's -Wrestrict misfires on " " + std::string chains
    t += ' ';
    t += markdown_cell(r.run);
    t += " |";
  }
  t += "\n|---|";
  for (size_t i = 0; i < s.size(); ++i) t += "---:|";
  t += "\n";
  std::vector<std::string> layers;
  for (const auto& r : s)
    for (const auto& l : r.layers)
      if (std::find(layers.begin(), layers.end(), l.layer) == layers.end()) layers.push_back(l.layer);
  for (const std::string& name : layers) {
    t += "| " + name + " |";
    for (const auto& r : s) {
      auto it = std::find_if(r.layers.begin(), r.layers.end(), [&](const LayerSqnr& l) { return l.layer == name; });
      if (it != r.layers.end()) (t += ' ') += fmt("%.1f", it->db);  // piecewise: GCC 12 warns falsely on " " + string
      t += " |";
    }
    t += "\n";
  }
  return t;
}

std::string sqnr_chart(const std::vector<RunSqnr>& s) {
  if (s.empty()) return "";
  std::vector<std::string> layers;
  double hi = 1;
  for (const auto& r : s)
    for (const auto& l : r.layers) {
      if (std::find(layers.begin(), layers.end(), l.layer) == layers.end()) layers.push_back(l.layer);
      if (std::isfinite(l.db)) hi = std::max(hi, l.db);
    }
  const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};
  double legend = 0;  // the widest run name: the legend's room right of the bars (and their value labels)
  for (const auto& r : s) legend = std::max(legend, text_width(r.run));
  const double left = 110, top = 40, group = 14.0 * static_cast<double>(s.size()) + 10, pw = 420;
  const double W = left + pw + 66 + legend + 10, H = top + group * static_cast<double>(layers.size()) + 30;
  std::string o = svg_begin(W, H);
  o += "<text x=\"10\" y=\"18\" font-size=\"14\">per-layer output SQNR against FP32 (dB; longer is closer)</text>\n";
  for (size_t li = 0; li < layers.size(); ++li) {
    const double y0 = top + group * static_cast<double>(li);
    o += fmt("<text x=\"%.1f\"", left - 8) + fmt(" y=\"%.1f\" text-anchor=\"end\">", y0 + group / 2) + layers[li] +
         "</text>\n";
    for (size_t ri = 0; ri < s.size(); ++ri) {
      auto it = std::find_if(s[ri].layers.begin(), s[ri].layers.end(),
                             [&](const LayerSqnr& l) { return l.layer == layers[li]; });
      if (it == s[ri].layers.end()) continue;
      const double db = std::isfinite(it->db) ? std::max(0.0, it->db) : hi, y = y0 + 14.0 * static_cast<double>(ri);
      o += fmt("<rect x=\"%.1f\"", left) + fmt(" y=\"%.1f\"", y) + fmt(" width=\"%.1f\" height=\"12\" fill=\"", pw * db / hi) +
           colors[ri % 6] + "\"/>\n";
      o += fmt("<text x=\"%.1f\"", left + pw * db / hi + 4) + fmt(" y=\"%.1f\">", y + 10) + fmt("%.1f</text>\n", it->db);
    }
  }
  for (size_t ri = 0; ri < s.size(); ++ri) {
    const double ly = top + 16.0 * static_cast<double>(ri);
    o += fmt("<rect x=\"%.1f\"", left + pw + 50) + fmt(" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"", ly) +
         colors[ri % 6] + "\"/>\n";
    o += fmt("<text x=\"%.1f\"", left + pw + 66) + fmt(" y=\"%.1f\">", ly + 10) + escape_html(s[ri].run) + "</text>\n";
  }
  return o + "</svg>\n";
}

}  // namespace qat::apps
