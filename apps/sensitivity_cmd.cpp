#include "apps/sensitivity_cmd.h"
#include "apps/model_file.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "apps/calibrate_cmd.h"
#include "apps/compare.h"
#include "apps/config.h"
#include "apps/output_folder.h"
#include "apps/ptq.h"
#include "apps/report_format.h"
#include "apps/run_state.h"
#include "apps/train.h"
#include "core/error.h"
#include "core/text_file.h"
#include "core/threads.h"
#include "models/checkpoint.h"
#include "models/models.h"

namespace qat::apps {

namespace fs = std::filesystem;

namespace {

// The layers the config's own quant.overrides set: they keep those bits in
// every variant and are not ranked. A half an override leaves at 0 (the
// global setting) is the config's global bits, so the layer stays as the
// config has it whatever the variant's bits.
std::map<std::string, quant::LayerBits> fixed_layers(const ExperimentConfig& cfg) {
  const QuantConfig& q = cfg.quant;
  const int w = static_cast<int>(q.weight.bits > 0 ? q.weight.bits : q.bits);
  const int x = static_cast<int>(q.activation.bits > 0 ? q.activation.bits : q.bits);
  std::map<std::string, quant::LayerBits> fixed;
  for (const auto& [layer, b] : q.overrides) fixed[layer] = {b.weight_bits ? b.weight_bits : w, b.activation_bits ? b.activation_bits : x};
  return fixed;
}

// The config's quantization with every layer at `bits`, the layers of
// `keep` at `keep_bits` (weights and the activation each reads) and the
// config's own overrides kept.
ExperimentConfig with_bits(const ExperimentConfig& cfg, int64_t bits, const std::vector<std::string>& keep,
                           int64_t keep_bits) {
  ExperimentConfig c = cfg;
  c.quant.bits = bits;
  c.quant.weight.bits = c.quant.activation.bits = 0;
  c.quant.overrides = fixed_layers(cfg);
  for (const std::string& l : keep)
    c.quant.overrides[l] = {static_cast<int>(keep_bits), static_cast<int>(keep_bits)};
  return c;
}

// --out's files (Note [output folder]).
const OutputFolderSpec kOutSpec{"sensitivity", "--out", {"sensitivity.md", "sensitivity.svg", "overrides.yaml",
                                                         "mixed.yaml"}};

// --finetune-steps K as E epochs of M steps (M divides K, M at most one epoch
// of the training set), so that exactly K steps are trained. K beyond the
// config's whole training (train.epochs epochs) is refused, and so is a K
// that only splits into many short epochs (each fine-tune epoch also
// evaluates the validation set).
FinetunePlan plan_finetune(int64_t steps, const ExperimentConfig& cfg, int64_t train_images) {
  FinetunePlan p;
  if (steps <= 0) return p;
  int64_t epoch = train_images / cfg.train.batch_size;  // the training loader drops the last, short batch
  if (cfg.train.max_steps_per_epoch > 0) epoch = std::min(epoch, cfg.train.max_steps_per_epoch);
  QAT_CHECK(epoch > 0, "sensitivity --finetune-steps: ", cfg.data.train, " has ", train_images,
            " images, fewer than one batch of ", cfg.train.batch_size);
  const int64_t most = epoch * cfg.train.epochs;
  QAT_CHECK(steps <= most, "sensitivity: --finetune-steps ", steps, " is more than the config's whole training (",
            cfg.train.epochs, " epochs of ", epoch, " steps: ", most, " steps, train.epochs x one epoch of ",
            cfg.data.train, " at batch ", cfg.train.batch_size, "); ask for at most ", most);
  if (steps <= epoch) return {1, steps};
  int64_t m = epoch;
  while (steps % m != 0) --m;
  const int64_t fewest = (steps + epoch - 1) / epoch;
  QAT_CHECK(steps / m <= 2 * fewest, "sensitivity: --finetune-steps ", steps, " does not split into whole epochs of "
            "at most ", epoch, " steps (one epoch of ", cfg.data.train, " at batch ", cfg.train.batch_size,
            ") without ", steps / m, " short ones; ask for a multiple of ", epoch, " (", (steps / epoch) * epoch,
            " or ", fewest * epoch, ") or at most ", epoch);
  return {steps / m, m};
}

struct Context {
  const SensitivityArgs& args;
  ExperimentConfig cfg;
  TensorMap fp32;
  Tensor calib;
  ImageSet scored;
  std::string scratch;  // the fine-tunes' folder, in --out's staging folder (not published)
  FinetunePlan plan;
  SensitivityReport* rep = nullptr;

  Score ptq_score(const ExperimentConfig& c) const {
    PtqModel p = calibrated_model(c, fp32, calib, args.calibrator);
    return score_calibrated(c, p);
  }
  Score score_calibrated(const ExperimentConfig& c, PtqModel& p) const {
    if (args.finetune_steps > 0) return finetuned_score(c, p);
    return integer_score(*p.model, scored, c.train.batch_size);
  }

  // QAT for finetune_steps steps from the calibration (qat train on a
  // config whose quant.init_from is the calibrated checkpoint), then scored.
  // Each fine-tune replaces the last one in the scratch folder, which qat made.
  Score finetuned_score(const ExperimentConfig& c, PtqModel& calibrated) const {
    const std::string dir = scratch + "/finetune";
    fs::remove_all(dir);
    fs::create_directories(dir);
    ExperimentConfig t = c;
    t.quant.init_from = dir + "/calibrated.safetensors";
    t.train.epochs = plan.epochs;
    t.train.max_steps_per_epoch = plan.epoch_steps;
    t.output.dir = dir + "/run";
    save_run_state(t.quant.init_from, *calibrated.model, nullptr, RunState{}, t,
                   {{"calibrator", quant::calibrator_name(args.calibrator)}, {"prepared", calibrated.report.to_string()}});
    write_text_file_atomic(dir + "/config.yaml", config_to_yaml(t));
    QAT_CHECK(run_train({dir + "/config.yaml", {}, ""}) == 0, "sensitivity: the fine-tune in ", dir, " stopped");
    const ExperimentConfig trained = load_config(t.output.dir + "/config.yaml");
    ModulePtr m = build_model(trained, false, false);
    const RunState done = load_run_state(t.output.dir + "/last.safetensors", *m, nullptr, &t, ConfigMatch::quant);
    const int64_t steps = done.epoch * plan.epoch_steps + done.step;
    QAT_CHECK(steps == args.finetune_steps, "sensitivity: the fine-tune in ", dir, " trained ", steps, " steps, not ",
              args.finetune_steps);
    rep->finetune_steps_done.push_back(steps);
    rep->finetune_config = t;
    m->eval();
    return integer_score(*m, scored, c.train.batch_size);
  }
  int64_t bytes(int64_t bits, const std::vector<std::string>& keep) const {
    std::map<std::string, int> per_layer;
    for (const auto& [l, b] : fixed_layers(cfg)) per_layer[l] = b.weight_bits;
    for (const std::string& l : keep) per_layer[l] = static_cast<int>(args.high_bits);
    return weight_storage_bytes(cfg.model, static_cast<int>(bits), per_layer);
  }
};

// --size-mb in bytes; a budget beyond int64 (1e13 MB) allows any model
// (the cast of a double that large was undefined: it gave 996 B).
int64_t budget_bytes(double size_mb) {
  const double bytes = size_mb * 1e6;
  return bytes >= 9.2e18 ? INT64_MAX : static_cast<int64_t>(bytes);
}

// Before any scoring: a budget no choice meets.
void check_request(const Context& ctx) {
  const SensitivityArgs& a = ctx.args;
  if (a.size_mb <= 0) return;
  const int64_t all_low = ctx.bytes(a.bits, {});
  QAT_CHECK(all_low <= budget_bytes(a.size_mb), "sensitivity: --size-mb ", a.size_mb,
            ": even every layer at ", a.bits, " bits needs ", bytes_str(all_low), " of weights");
}

// The mixed choice: the most sensitive layers kept high, as few as the budget allows.
void choose_mixed(const Context& ctx, SensitivityReport& rep) {
  const SensitivityArgs& a = ctx.args;
  std::vector<std::string> ranked;
  for (const auto& l : rep.layers) ranked.push_back(l.layer);
  std::vector<std::string> keep;
  Score s{};
  if (a.size_mb > 0) {
    const auto budget = budget_bytes(a.size_mb);  // (checked to allow every layer low: check_budget)
    for (const std::string& l : ranked) {
      std::vector<std::string> k = keep;
      k.push_back(l);
      if (ctx.bytes(a.bits, k) <= budget) keep = k;
    }
    s = ctx.ptq_score(with_bits(ctx.cfg, a.bits, keep, a.high_bits));
  } else {
    for (size_t k = 0; k <= ranked.size(); ++k) {
      keep.assign(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(k));
      if (k == ranked.size()) {  // every layer high: the baseline itself
        s = {rep.base_top1, rep.base_loss};
        break;
      }
      s = ctx.ptq_score(with_bits(ctx.cfg, a.bits, keep, a.high_bits));
      std::printf("  %zu layer(s) kept at %lld bits: top-1 %.2f%% (%+.2f vs W%lldA%lld)\n", k,
                  static_cast<long long>(a.high_bits), 100 * s.top1, 100 * (s.top1 - rep.base_top1),
                  static_cast<long long>(a.high_bits), static_cast<long long>(a.high_bits));
      if (100 * (rep.base_top1 - s.top1) <= a.max_drop + 1e-9) break;  // (0.776 - 0.771) * 100 > 0.5 in doubles
    }
  }
  rep.keep_high = keep;
  rep.mixed_top1 = s.top1;
  rep.mixed_loss = s.loss;
  rep.mixed_bytes = ctx.bytes(a.bits, keep);
}

std::string finetune_words(const FinetunePlan& p) {
  const int64_t steps = p.epochs * p.epoch_steps;
  return std::to_string(steps) + " QAT steps" +
         (p.epochs > 1 ? " (" + std::to_string(p.epochs) + " epochs of " + std::to_string(p.epoch_steps) + ")" : "");
}

std::string table(const SensitivityReport& r, const SensitivityArgs& a, int64_t scored) {
  const std::string lo = std::to_string(a.bits), hi = std::to_string(a.high_bits);
  std::string s = "Per-layer sensitivity to " + lo + " bits (" +
                  (a.finetune_steps > 0 ? finetune_words(r.plan) + " after " : std::string("post-training, ")) +
                  quant::calibrator_name(a.calibrator) + " calibration, " + std::to_string(scored) + " validation images; every other layer at " + hi +
                  " bits)\n\n";
  s += "| rank | layer | weights | top-1, this layer at " + lo + " bits | Δ top-1 | loss | Δ loss |\n";
  s += "|---:|---|---:|---:|---:|---:|---:|\n";
  for (size_t i = 0; i < r.layers.size(); ++i) {
    const LayerSensitivity& l = r.layers[i];
    s += "| " + std::to_string(i + 1) + " | " + l.layer + " | " + std::to_string(l.weights) + " | " +
         fmt("%.2f%%", 100 * l.top1) + " | " + fmt("%+.2f", -100 * l.drop) + " | " + fmt("%.4f", l.loss) + " | " +
         fmt("%+.4f", l.loss_increase) + " |\n";
  }
  if (!r.fixed.empty()) {
    std::string list;
    for (const auto& [l, b] : r.fixed)
      list += (list.empty() ? "" : ", ") + l + " (W" + std::to_string(b.weight_bits) + "A" + std::to_string(b.activation_bits) + ")";
    s += "\nKept as the config's quant.overrides set them, in every variant, and not ranked: " + list + ".\n";
  }
  const std::string every = r.fixed.empty() ? "Every layer" : "Every ranked layer";
  s += "\nFP32: top-1 " + fmt("%.2f%%", 100 * r.fp32_top1) + ", loss " + fmt("%.4f", r.fp32_loss) + ". " + every +
       " at " + hi + " bits: top-1 " + fmt("%.2f%%", 100 * r.base_top1) + ", loss " + fmt("%.4f", r.base_loss) +
       ", weights " + bytes_str(r.base_bytes) + ". " + every + " at " + lo + " bits: weights " +
       bytes_str(r.low_bytes) + ".\n\n";
  std::string kept;
  for (const auto& k : r.keep_high) kept += (kept.empty() ? "" : ", ") + k;
  s += "Mixed precision (" +
       (a.size_mb > 0 ? "weights within " + bytes_str(budget_bytes(a.size_mb)) : "at most " + fmt("%.2f", a.max_drop) +
                                                                             " points below W" + hi + "A" + hi) +
       "): " + (kept.empty() ? std::string("no layer") : kept) + " at " + hi + " bits, the rest at " + lo +
       ": top-1 " + fmt("%.2f%%", 100 * r.mixed_top1) + " (" + fmt("%+.2f", 100 * (r.mixed_top1 - r.base_top1)) +
       "), weights " + bytes_str(r.mixed_bytes) + " (" +
       fmt("%.0f%%", 100.0 * static_cast<double>(r.mixed_bytes) / static_cast<double>(r.base_bytes)) + " of W" + hi +
       "A" + hi + ").\n";
  return s;
}

std::string chart(const SensitivityReport& r, const SensitivityArgs& a) {
  const double left = 150, top = 40, bar = 20, gap = 8, pw = 400, W = left + pw + 90;
  const double H = top + (bar + gap) * static_cast<double>(r.layers.size()) + 30;
  double hi = 1e-9;
  for (const auto& l : r.layers) hi = std::max(hi, l.loss_increase);
  std::string s = svg_begin(W, H);
  s += "<text x=\"10\" y=\"18\" font-size=\"14\">validation loss increase with one layer at " + std::to_string(a.bits) +
       " bits</text>\n";
  s += "<text x=\"10\" y=\"33\" fill=\"#555\">the rest at " + std::to_string(a.high_bits) +
       " bits; red: kept at " + std::to_string(a.high_bits) + " bits in the mixed choice</text>\n";
  for (size_t i = 0; i < r.layers.size(); ++i) {
    const LayerSensitivity& l = r.layers[i];
    const bool kept = std::find(r.keep_high.begin(), r.keep_high.end(), l.layer) != r.keep_high.end();
    const double y = top + (bar + gap) * static_cast<double>(i), w = pw * std::max(0.0, l.loss_increase) / hi;
    s += fmt("<text x=\"%.1f\"", left - 8) + fmt(" y=\"%.1f\" text-anchor=\"end\">", y + bar / 2 + 4) + l.layer +
         "</text>\n";
    s += fmt("<rect x=\"%.1f\"", left) + fmt(" y=\"%.1f\"", y) + fmt(" width=\"%.1f\"", w) +
         fmt(" height=\"%.1f\" fill=\"", bar) + (kept ? "#d62728" : "#1f77b4") + "\"/>\n";
    s += fmt("<text x=\"%.1f\"", left + w + 5) + fmt(" y=\"%.1f\">", y + bar / 2 + 4) +
         fmt("%+.4f</text>\n", l.loss_increase);
  }
  return s + "</svg>\n";
}

void write_outputs(const Context& ctx, const SensitivityReport& r, const OutputFolder& out) {
  const SensitivityArgs& a = ctx.args;
  write_text_file_atomic(out.staged("sensitivity.md"), table(r, a, ctx.scored.images.size(0)));
  write_text_file_atomic(out.staged("sensitivity.svg"), chart(r, a));
  std::string snippet = "# qat sensitivity: the most sensitive layers kept at " + std::to_string(a.high_bits) +
                        " bits, the rest at " + std::to_string(a.bits) + "\nquant:\n  bits: " + std::to_string(a.bits) +
                        "\n  overrides:" + (r.keep_high.empty() && r.fixed.empty() ? " {}\n" : "\n");
  std::map<std::string, quant::LayerBits> all = r.fixed;
  for (const std::string& l : r.keep_high) all[l] = {static_cast<int>(a.high_bits), static_cast<int>(a.high_bits)};
  for (const auto& [l, b] : all)
    snippet += "    " + l + ": {weight_bits: " + std::to_string(b.weight_bits) +
               ", activation_bits: " + std::to_string(b.activation_bits) + "}\n";
  write_text_file_atomic(out.staged("overrides.yaml"), snippet);
  ExperimentConfig mixed = with_bits(ctx.cfg, a.bits, r.keep_high, a.high_bits);
  mixed.output.dir = ctx.cfg.output.dir + "_mixed";
  write_text_file_atomic(out.staged("mixed.yaml"), config_to_yaml(mixed));
}

}  // namespace

int run_sensitivity(const SensitivityArgs& a, SensitivityReport* report) {
  QAT_CHECK(a.bits >= 2 && a.bits < a.high_bits && a.high_bits <= 8, "sensitivity: need 2 <= --bits < --high-bits <= 8, got ",
            a.bits, " and ", a.high_bits);
  QAT_CHECK(a.images > 0 && a.calib_images > 0, "sensitivity: --images and --calib-images must be > 0");
  SensitivityReport rep;
  Context ctx{a, load_config(a.config, a.overrides), {}, {}, {}, {}, {}, &rep};
  QAT_CHECK(ctx.cfg.quant.enabled, "sensitivity: config ", a.config,
            " has quant.enabled false; the quant: section says what to quantize (backend, method)");
  check_request(ctx);
  set_num_threads(static_cast<int>(ctx.cfg.train.threads));
  const data::ImageFolder train = image_folder(ctx.cfg.data, ctx.cfg.data.train);
  ctx.plan = rep.plan = plan_finetune(a.finetune_steps, ctx.cfg, train.size());
  rep.out_dir = a.out_dir.empty() ? ctx.cfg.output.dir + "-sensitivity" : a.out_dir;
  check_out_kind("sensitivity", rep.out_dir,
                 {OutputKind::training_run, OutputKind::export_model, OutputKind::calibration});
  for (const auto& [option, path] : {std::pair<const char*, std::string>{"config", a.config},
                                     {"--checkpoint", a.checkpoint}})
    QAT_CHECK(!path_inside(path, rep.out_dir), "sensitivity: ", option, " ", path, " lies in --out ", rep.out_dir,
              ", whose files sensitivity replaces; copy it elsewhere or choose another --out");
  OutputFolder out(kOutSpec, rep.out_dir);
  if (a.finetune_steps > 0) ctx.scratch = out.scratch("finetune");

  ModulePtr fp32 = make_configured_model(ctx.cfg.model, ctx.cfg.train.seed);
  check_checkpoint_identity(a.checkpoint, ctx.cfg, {CheckpointKind::float_model}, "sensitivity --checkpoint",
                            "it starts from a float model: an FP32 training run's best.safetensors");
  load_model_checked(a.checkpoint, *fp32, nullptr);
  fp32->eval();
  ctx.fp32 = fp32->state_dict();
  const data::TransformSpec spec = transform_spec(ctx.cfg.data);
  ctx.calib = load_image_set(train, balanced_indices(train, a.calib_images, ctx.cfg.train.seed), spec).images;
  const data::ImageFolder val = image_folder(ctx.cfg.data, ctx.cfg.data.val);
  ctx.scored = load_image_set(val, balanced_indices(val, a.images, ctx.cfg.train.seed), spec);
  const int64_t batch = ctx.cfg.train.batch_size;

  const Score f = score([&](const Tensor& x) { return fp32->forward(x); }, ctx.scored, batch);
  rep.fp32_top1 = f.top1, rep.fp32_loss = f.loss;
  const ExperimentConfig base = with_bits(ctx.cfg, a.high_bits, {}, a.high_bits);
  PtqModel b = calibrated_model(base, ctx.fp32, ctx.calib, a.calibrator);
  const Score bs = ctx.score_calibrated(base, b);
  rep.base_top1 = bs.top1, rep.base_loss = bs.loss;
  rep.base_bytes = ctx.bytes(a.high_bits, {});
  rep.low_bytes = ctx.bytes(a.bits, {});
  std::printf("%lld validation images: FP32 top-1 %.2f%%, every layer at %lld bits %.2f%%\n",
              static_cast<long long>(ctx.scored.images.size(0)), 100 * f.top1, static_cast<long long>(a.high_bits),
              100 * bs.top1);
  rep.fixed = fixed_layers(ctx.cfg);
  for (const quant::PreparedLayer& l : b.report.layers) {
    if (rep.fixed.count(l.name)) continue;  // the config's override: its bits are chosen already
    LayerSensitivity s;
    s.layer = l.name;
    const auto w = ctx.fp32.find(l.name + ".weight");
    s.weights = w != ctx.fp32.end() ? w->second.numel() : 0;
    const Score sc = ctx.ptq_score(with_bits(ctx.cfg, a.high_bits, {l.name}, a.bits));
    s.top1 = sc.top1, s.loss = sc.loss;
    s.drop = rep.base_top1 - sc.top1, s.loss_increase = sc.loss - rep.base_loss;
    std::printf("  %-16s at %lld bits: top-1 %.2f%% (%+.2f), loss %+.4f\n", l.name.c_str(),
                static_cast<long long>(a.bits), 100 * sc.top1, -100 * s.drop, s.loss_increase);
    rep.layers.push_back(s);
  }
  std::stable_sort(rep.layers.begin(), rep.layers.end(), [](const LayerSensitivity& x, const LayerSensitivity& y) {
    return x.loss_increase > y.loss_increase;
  });
  choose_mixed(ctx, rep);
  write_outputs(ctx, rep, out);
  out.publish();
  std::printf("\n%s\nwrote %s/{sensitivity.md, sensitivity.svg, overrides.yaml, mixed.yaml}\nnext: qat train %s/mixed.yaml\n",
              table(rep, a, ctx.scored.images.size(0)).c_str(), rep.out_dir.c_str(), rep.out_dir.c_str());
  if (report) *report = rep;
  return 0;
}

}  // namespace qat::apps
