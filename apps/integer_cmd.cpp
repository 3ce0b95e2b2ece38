#include "apps/integer_cmd.h"
#include "apps/onnx_export.h"

#include <algorithm>
#include <fstream>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "apps/config.h"
#include "apps/infer_save.h"
#include "apps/integer_io.h"
#include "apps/run_state.h"
#include "apps/train.h"
#include "core/autograd.h"
#include "core/cuda_runtime.h"
#include "core/enum_names.h"
#include "core/error.h"
#include "core/threads.h"
#include "data/image.h"
#include "data/image_folder.h"
#include "quant/convert/compare_layers.h"
#include "quant/convert/freeze.h"
#include "quant/integer/integer_model_cuda.h"

namespace qat::apps {

namespace fs = std::filesystem;

namespace {

// The config's QAT model with the checkpoint's weights, frozen.
struct Frozen {
  ExperimentConfig cfg;
  ModulePtr model;
  quant::IntegerModel integer;
  std::vector<std::string> classes;  // the checkpoint's training classes (empty: not recorded)
};

Frozen freeze_checkpoint(const std::string& config, const std::vector<std::string>& overrides,
                         const std::string& checkpoint) {
  Frozen f{load_config(config, overrides), nullptr, {}, {}};
  QAT_CHECK(f.cfg.quant.enabled, "config ", config, ": quant.enabled is false; only a QAT model can be frozen");
  set_num_threads(static_cast<int>(f.cfg.train.threads));
  f.model = build_model(f.cfg, false, false);
  f.classes = load_run_state(checkpoint, *f.model, nullptr, &f.cfg, ConfigMatch::quant).classes;
  f.integer = quant::freeze(*f.model);
  return f;
}

std::string size_str(uintmax_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return b;
}


std::vector<std::string> image_files(const std::string& input) {
  QAT_CHECK(fs::exists(input), "infer: ", input, " does not exist");
  if (!fs::is_directory(input)) return {input};
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(input))
    // (an entry named like an image that is not a file, a dangling link say, is decoded and refused by name)
    if (!e.is_directory() && data::has_image_extension(e.path().string())) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  QAT_CHECK(!out.empty(), "infer: no images (.jpg/.jpeg/.png) under ", input);
  return out;
}

// An ONNX export replaces an earlier .onnx file (as torch.onnx.export does)
// but nothing else: not its own checkpoint or config, not a folder, not a
// file of another kind.
void check_onnx_target(const ExportArgs& args) {
  const std::string& out = args.out_dir;
  std::error_code ec;
  if (!fs::exists(out, ec)) return;
  for (const std::string* input : {&args.checkpoint, &args.config})
    QAT_CHECK(!fs::equivalent(out, *input, ec), "export --format onnx: --out ", out, " is the input ", *input,
              "; choose another file");
  // (the network the config imports is an input too: the run's config would name another model)
  const std::string source = load_config(args.config, args.overrides).model.onnx;
  QAT_CHECK(source.empty() || !fs::equivalent(out, source, ec), "export --format onnx: --out ", out,
            " is the input ", source, " (the config's model.onnx); choose another file");
  QAT_CHECK(fs::is_regular_file(out) && fs::path(out).extension() == ".onnx", "export --format onnx: --out ", out,
            fs::is_directory(out) ? " is a folder" : " exists and is not a .onnx file", "; refusing to overwrite it");
}

}  // namespace

int run_export(const ExportArgs& args) {
  QAT_CHECK(args.format == "qat" || args.format == "onnx", "export: --format must be qat or onnx, got ", args.format);
  QAT_CHECK(args.onnx_profile == "standard" || args.onnx_profile == "tensorrt",
            "export: --onnx-profile must be standard or tensorrt, got ", args.onnx_profile);
  QAT_CHECK(args.format == "onnx" || (args.onnx_profile == "standard" && !args.onnx_int32_bias),
            "export: --onnx-profile and --onnx-int32-bias go with --format onnx");
  if (args.format == "onnx") check_onnx_target(args);
  Frozen f = freeze_checkpoint(args.config, args.overrides, args.checkpoint);
  if (args.format == "onnx") {
    OnnxExportOptions o;
    o.profile = args.onnx_profile == "tensorrt" ? OnnxProfile::tensorrt : OnnxProfile::standard;
    o.image_size = f.cfg.data.image_size;
    o.int32_bias = args.onnx_int32_bias;
    export_onnx(f.integer, o, args.out_dir);
    std::printf("exported %s (%s) to %s: ONNX opset 13, QDQ, %s profile, input (N, 3, %lld, %lld), %s\n",
                args.checkpoint.c_str(), f.cfg.model.name.c_str(), args.out_dir.c_str(), args.onnx_profile.c_str(),
                static_cast<long long>(o.image_size), static_cast<long long>(o.image_size),
                size_str(fs::file_size(args.out_dir)).c_str());
    return 0;
  }
  ExportedModel ex;
  ex.model = std::move(f.integer);
  ex.model_name = f.cfg.model.name;
  ex.classes = data::ImageFolder(f.cfg.data.val, true).classes();
  QAT_CHECK(static_cast<int64_t>(ex.classes.size()) == ex.model.num_classes(), "export: ", f.cfg.data.val, " has ",
            ex.classes.size(), " class folders, the model ", ex.model.num_classes(), " outputs");
  // The manifest names the outputs: they must be the classes the checkpoint trained on.
  if (!f.classes.empty()) check_same_classes(f.classes, ex.classes, "export", args.checkpoint, f.cfg.data.val);
  ex.image_size = f.cfg.data.image_size;
  ex.resize = f.cfg.data.resize;
  for (int c = 0; c < 3; ++c) {
    ex.mean[c] = static_cast<float>(f.cfg.data.mean[c]);
    ex.std[c] = static_cast<float>(f.cfg.data.std[c]);
  }
  save_export(args.out_dir, ex);
  std::printf("exported %s (%s) to %s\n", args.checkpoint.c_str(), ex.model_name.c_str(), args.out_dir.c_str());
  for (const auto& l : ex.model.layers) {
    std::printf("  %-28s %-18s", l.name.c_str(), quant::int_op_name(l.op));
    if (quant::int_op_def(l.op).has(quant::kMatmul))
      std::printf(" int%d weights%s, %s", l.weight_bits, l.weight_bits <= 4 ? " (packed 2/byte)" : "",
                  l.dequantize ? "float output"
                               : ((l.out.is_signed ? "int" : "uint") + std::to_string(l.out.bits) + " output").c_str());
    std::printf("\n");
  }
  const fs::path w = fs::path(args.out_dir) / "weights.safetensors", m = fs::path(args.out_dir) / "manifest.yaml";
  std::printf("  weights.safetensors %s, manifest.yaml %s\n", size_str(fs::file_size(w)).c_str(),
              size_str(fs::file_size(m)).c_str());
  return 0;
}

std::vector<Prediction> predict_images(const ExportedModel& ex, const std::string& input, int top_n,
                                       const PredictionSink& sink, const std::function<Tensor(const Tensor&)>& forward) {
  const data::TransformSpec spec = eval_transform(ex);
  const int64_t S = ex.image_size, classes = ex.model.num_classes(), top = std::min<int64_t>(top_n, classes);
  Generator unused(0);  // eval transforms draw nothing
  std::vector<Prediction> out;
  for (const std::string& path : image_files(input)) {
    Tensor x = Tensor::empty({1, 3, S, S});
    try {
      data::apply_transform(data::decode_image(path), spec, false, unused, x.data<float>());
    } catch (const Error& e) {  // one bad file of a folder: report it, go on with the others
      out.push_back({path, {}, e.what()});
      continue;
    }
    const std::vector<float> logits = (forward ? forward(x) : ex.model.forward(x)).to_vector();
    if (sink) sink(path, x, logits);
    const float mx = *std::max_element(logits.begin(), logits.end());
    std::vector<double> p(logits.size());
    double sum = 0;
    for (size_t i = 0; i < p.size(); ++i) sum += p[i] = std::exp(static_cast<double>(logits[i] - mx));
    std::vector<int64_t> order(static_cast<size_t>(classes));
    for (int64_t i = 0; i < classes; ++i) order[i] = i;
    std::partial_sort(order.begin(), order.begin() + top, order.end(),
                      [&](int64_t a, int64_t b) { return p[a] > p[b]; });
    Prediction pr{path, {}, {}};
    for (int64_t k = 0; k < top; ++k) pr.top.emplace_back(ex.classes[order[k]], p[order[k]] / sum);
    out.push_back(std::move(pr));
  }
  return out;
}

int run_infer(const InferArgs& args) {
  set_num_threads(args.threads);
  const Device device = *enum_from_name<Device>(args.device);
  if (device == Device::cuda) cuda::require("infer --device cuda");
  const ExportedModel ex = load_export(args.export_dir);
  std::optional<quant::CudaIntegerModel> gpu;
  std::function<Tensor(const Tensor&)> forward;
  if (device == Device::cuda) {
    gpu.emplace(ex.model);
    forward = [&gpu](const Tensor& x) { return gpu->forward(x); };
  }
  std::optional<InferSaveSet> saved;  // (checked before any image is read)
  PredictionSink sink;
  if (!args.save.empty()) {
    saved.emplace(args.save);
    sink = [&](const std::string& path, const Tensor& x, const std::vector<float>& l) {
      saved->add(path, x.data<float>(), x.numel(), l.data(), static_cast<int64_t>(l.size()));
    };
  }
  int64_t bad = 0;
  for (const Prediction& pr : predict_images(ex, args.input, args.top, sink, forward)) {
    if (!pr.error.empty()) {
      std::fprintf(stderr, "qat: %s\n", pr.error.c_str());
      ++bad;
      continue;
    }
    std::printf("%s\n", pr.path.c_str());
    for (const auto& [name, prob] : pr.top) std::printf("  %6.2f%%  %s\n", 100.0 * prob, name.c_str());
  }
  if (bad > 0)
    std::fprintf(stderr, "qat: %lld image(s) could not be read%s\n", static_cast<long long>(bad),
                 saved ? "; --save wrote nothing (any earlier files of its prefix are as they were)" : "");
  // (a run with an unreadable image fails: the earlier set stays as it was)
  if (saved && bad == 0) saved->finish();
  return bad > 0 ? 1 : 0;
}

LayerComparison compare_checkpoint_layers(const CompareLayersArgs& args) {
  Frozen f = freeze_checkpoint(args.config, args.overrides, args.checkpoint);
  const data::ImageFolder val = image_folder(f.cfg.data, f.cfg.data.val);
  data::LoaderOptions lo = loader_options(f.cfg, false);
  lo.cache = false;
  data::DataLoader loader(val, transform_spec(f.cfg.data), lo);
  const int64_t want = args.images > 0 ? std::min(args.images, val.size()) : val.size();
  std::vector<quant::LayerDiff> total;
  int64_t seen = 0;
  loader.start_epoch(0);
  data::Batch b;
  while (seen < want && loader.next(b)) {
    const int64_t n = std::min(b.labels.size(0), want - seen);
    const Tensor x = b.images.narrow(0, 0, n).contiguous();
    const auto diffs = quant::compare_layers(*f.model, f.integer, x, b.labels.narrow(0, 0, n).contiguous());
    if (total.empty()) total = diffs;
    else
      for (size_t i = 0; i < diffs.size(); ++i) total[i].merge(diffs[i]);
    seen += n;
  }
  QAT_CHECK(seen > 0, "compare-layers: no image of ", f.cfg.data.val, " was compared");
  return {seen, f.cfg.data.val, std::move(total)};
}

int run_compare_layers(const CompareLayersArgs& args, LayerComparison* result) {
  const LayerComparison c = compare_checkpoint_layers(args);
  const std::vector<quant::LayerDiff>& total = c.layers;
  std::printf("fake-quant vs integer model, %lld images of %s\n", static_cast<long long>(c.images),
              c.images_of.c_str());
  // "alone": the layer fed the fake-quant model's values of its inputs (its own differences).
  std::printf("%-30s %-18s %10s %10s %10s %12s %12s\n", "layer", "op", "max LSB", "mean LSB", "differ", "alone: max",
              "alone: differ");
  std::string first_drift;
  for (const auto& d : total) {
    const double share = d.count ? 100.0 * static_cast<double>(d.differ) / static_cast<double>(d.count) : 0.0;
    const double own_share = d.count ? 100.0 * static_cast<double>(d.own_differ) / static_cast<double>(d.count) : 0.0;
    if (d.logits) {
      std::printf("%-30s %-18s %10.4g %10.4g %9.2f%% %12.4g %11.2f%%  (float logits: absolute differences)\n",
                  d.name.c_str(), d.op.c_str(), d.max_diff, d.mean_diff(), share, d.own_max_diff, own_share);
      continue;
    }
    // Drift: an output more than one LSB off (rounding alone gives 1), or
    // more than 10% of outputs off (1-LSB differences piling up).
    const bool drifts = d.max_diff > 1 || share > 10.0;
    if (drifts && first_drift.empty()) first_drift = d.name;
    std::printf("%-30s %-18s %10.0f %10.4f %9.2f%% %12.0f %11.4f%%%s\n", d.name.c_str(), d.op.c_str(), d.max_diff,
                d.mean_diff(), share, d.own_max_diff, own_share,
                drifts && first_drift == d.name ? "  <- first layer that drifts" : "");
  }
  const quant::LayerDiff& out = total.back();
  std::printf("top-1 agreement: %lld of %lld images (%.2f%%); the last layer alone on the fake-quant features: %lld\n",
              static_cast<long long>(out.top1_agree), static_cast<long long>(out.rows),
              100.0 * static_cast<double>(out.top1_agree) / std::max<int64_t>(1, out.rows),
              static_cast<long long>(out.own_top1_agree));
  std::printf("top-1 accuracy: fake-quant %.2f%%, integer %.2f%%\n",
              100.0 * static_cast<double>(out.correct_reference) / std::max<int64_t>(1, out.rows),
              100.0 * static_cast<double>(out.correct_integer) / std::max<int64_t>(1, out.rows));
  if (first_drift.empty()) std::printf("no layer drifts (every output within 1 LSB, at most 10%% of any layer off)\n");
  if (result) *result = c;
  return 0;
}

}  // namespace qat::apps
