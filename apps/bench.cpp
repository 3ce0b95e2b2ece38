#include "apps/bench.h"
#include "apps/model_file.h"
#include "apps/onnx_import.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "core/ops.h"
#include "core/profiler.h"
#include "core/threads.h"
#include "models/models.h"
#include "optim/adamw.h"
#include "optim/sgd.h"
#include "apps/config.h"
#include "apps/device_check.h"
#include "core/cuda_runtime.h"
#include "core/enum_names.h"
#include "apps/train.h"
#include "apps/run_state.h"
#include "core/autograd.h"
#include "core/blas.h"
#include "quant/convert/freeze.h"
#include "core/cpu_features.h"
#include "quant/integer/int8_gemm.h"
#include "quant/sim/fq_rows.h"
#include "quant/int8_training/grad_quant.h"
#include "quant/sim/weight_lookahead.h"
#include "quant/integer/integer_model_cuda.h"

namespace qat::apps {

namespace {

// --stem: refused for a model without a stem choice, as model.stem is.
ModelOptions bench_model_options(const BenchOptions& opt) {
  const ResNetStem stem = enum_from_name<ResNetStem>(opt.stem).value_or(ResNetStem::imagenet);
  QAT_CHECK(stem == ResNetStem::imagenet || model_takes_stem(opt.model), "bench: --stem ", opt.stem,
            " does not apply to --model ", opt.model, " (resnet18 and mobilenet_v2 take one)");
  return {stem};
}

// The bench's network in a config: --model, --classes and --stem, so that
// the quantized model is the FP32 one's network (a config's model.stem: small
// at --stem imagenet would time a network 16 times larger at 128 px).
void bench_network_into(ExperimentConfig& cfg, const BenchOptions& opt) {
  cfg.model.name = opt.model;
  cfg.model.num_classes = opt.classes;
  cfg.model.stem = bench_model_options(opt).stem;
}

// --model: a built-in's name, a model file (.yaml) or an ONNX model (.onnx).
ModulePtr bench_model(const BenchOptions& opt) {
  const bool model_file = opt.model.ends_with(".yaml"), onnx = opt.model.ends_with(".onnx");
  if (!model_file && !onnx) return make_model(opt.model, opt.classes, 0, bench_model_options(opt));
  QAT_CHECK(opt.stem == "imagenet", "bench: --stem does not apply to a model file (", opt.model, ")");
  ModelConfig from_file;  // (checked as a config's would be: it runs at --res and gives --classes logits)
  (onnx ? from_file.onnx : from_file.file) = opt.model;
  from_file.num_classes = opt.classes;
  ModulePtr model = onnx ? import_onnx(opt.model) : load_model_file(opt.model, opt.classes, 0);
  dry_run(from_file, *model, opt.res);
  model->train();
  return model;
}

double peak_rss_mib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // ru_maxrss is KiB on Linux
}

// Each op's forward and backward time, as a share of the measured steps.
// "backward (total)" spans all backward ops, so it is shown apart; so are
// the parts of one op, keyed "part (in op)" (conv2d's depthwise and 1x1
// kernels), which its own row already counts.
void print_profile(const std::vector<Profiler::Row>& rows, double total_seconds, int steps) {
  std::printf("time per op (share of step time, ms per step):\n");
  double covered = 0;
  for (const auto& r : rows) {
    const bool is_total = r.key.find("(total)") != std::string::npos;
    const bool is_part = r.key.find(" (in ") != std::string::npos;
    if (!is_total && !is_part) covered += r.seconds;
    std::printf("  %-30s %6.1f%%  %8.1f ms%s\n", r.key.c_str(), 100.0 * r.seconds / total_seconds,
                1000.0 * r.seconds / steps, is_total ? "  (includes the backward ops above/below)" : "");
  }
  std::printf("  %-30s %6.1f%%  %8.1f ms\n", "not in any op", 100.0 * (total_seconds - covered) / total_seconds,
              1000.0 * (total_seconds - covered) / steps);
}

}  // namespace

namespace {

// The profile key of the optimizer's step (--optimizer).
const char* optimizer_step_label(const BenchOptions& opt) {
  return opt.optimizer == "adamw" ? "adamw.step" : "sgd.step";
}

// One model's training steps on a fixed synthetic batch (the model moves to
// `device`), timed step by step, each with its own per-op profile on the
// CPU. Every step ends reading the loss back, so on cuda the time includes
// the step's kernels.
class TrainingTimer {
 public:
  TrainingTimer(Module& model, const BenchOptions& opt, Device device, const char* label)
      : model_(model), opt_(opt), device_(device), label_(label) {
    model.to(device);
    model.train();
    if (opt.optimizer == "adamw") {
      optimizer_ = std::make_unique<AdamW>(make_param_groups(model.named_parameters(), 1e-3, 5e-4, false));
    } else {
      optimizer_ = std::make_unique<SGD>(make_param_groups(model.named_parameters(), 0.01, 5e-4, false),
                                         SGDOptions{0.9});
    }
    Generator gen(1);
    x_ = Tensor::randn({opt.batch, 3, opt.res, opt.res}, gen).to(device);
    std::vector<int32_t> labels(opt.batch);
    for (auto& l : labels) l = static_cast<int32_t>(gen.below(opt.classes));
    y_ = Tensor::from_vector_i32(labels, {opt.batch}).to(device);
  }

  void warm_up() {
    for (int i = 0; i < opt_.warmup; ++i) {
      const float l = step();
      if (opt_.verbose) std::printf("%s warm-up step %d: loss %.4f\n", label_, i, l);
    }
  }

  // One timed step; its ops' times are added to this model's profile.
  void timed_step() {
    Profiler::reset();
    Profiler::set_enabled(profiled());
    const auto t0 = std::chrono::steady_clock::now();
    last_loss_ = step();
    step_seconds_.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    Profiler::set_enabled(false);
    for (const auto& r : Profiler::rows()) {
      Profiler::Row& sum = profile_.try_emplace(r.key, Profiler::Row{r.key, 0.0, 0}).first->second;
      sum.seconds += r.seconds;
      sum.calls += r.calls;
    }
    if (opt_.verbose) std::printf("%s step %zu: loss %.4f\n", label_, step_seconds_.size(), last_loss_);
  }

  double seconds() const { return std::accumulate(step_seconds_.begin(), step_seconds_.end(), 0.0); }
  const std::vector<double>& step_seconds() const { return step_seconds_; }
  double images_per_second() const { return step_seconds_.size() * opt_.batch / seconds(); }

  // The "train <label>" line and, on the CPU, the per-op profile.
  void report() const {
    const double secs = seconds();
    const int steps = static_cast<int>(step_seconds_.size());
    std::printf("train %s%s: %.1f img/s  (%.1f ms/step, last loss %.3f)\n", label_,
                device_ == Device::cpu ? "" : " on cuda", images_per_second(), 1000.0 * secs / steps, last_loss_);
    if (!profiled()) return;
    std::vector<Profiler::Row> rows;
    for (const auto& [key, r] : profile_) rows.push_back(r);
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
    print_profile(rows, secs, steps);
  }

 private:
  // Kernels run asynchronously on cuda: per-op host times would not be theirs.
  bool profiled() const { return opt_.profile && device_ == Device::cpu; }

  float step() {
    optimizer_->zero_grad();
    Tensor loss = cross_entropy(model_.forward(x_), y_);
    {
      QAT_PROFILE("backward (total)");
      loss.backward();
    }
    {
      QAT_PROFILE(optimizer_step_label(opt_));
      optimizer_->step();
    }
    return loss.item();
  }

  Module& model_;
  const BenchOptions& opt_;
  Device device_;
  const char* label_;
  std::unique_ptr<Optimizer> optimizer_;
  Tensor x_, y_;
  std::vector<double> step_seconds_;
  float last_loss_ = 0;
  std::map<std::string, Profiler::Row> profile_;
};

// Times `timers` step by step in turn (the order alternating from one round
// to the next), so that a machine whose speed drifts during the bench slows
// every model alike; each reports its figures.
void time_in_turn(const std::vector<TrainingTimer*>& timers, int steps) {
  for (TrainingTimer* t : timers) t->warm_up();
  for (int i = 0; i < steps; ++i)
    for (size_t k = 0; k < timers.size(); ++k) timers[i % 2 == 0 ? k : timers.size() - 1 - k]->timed_step();
  for (TrainingTimer* t : timers) t->report();
}

// The quantized step's time over the FP32 step's: of the totals, and the
// median of the per-step ratios (steps taken in turn).
void print_step_ratio(const char* kind, const TrainingTimer& fp32, const TrainingTimer& quantized) {
  std::vector<double> ratios;
  for (size_t i = 0; i < fp32.step_seconds().size(); ++i)
    ratios.push_back(quantized.step_seconds()[i] / fp32.step_seconds()[i]);
  std::sort(ratios.begin(), ratios.end());
  std::printf("%s/fp32 step time: %.3f  (steps taken in turn with the FP32 model's; per-step ratios: median %.3f, "
              "middle half %.3f-%.3f)\n",
              kind, quantized.seconds() / fp32.seconds(), ratios[ratios.size() / 2], ratios[ratios.size() / 4],
              ratios[(3 * ratios.size()) / 4]);
}

}  // namespace

// Images per second of `forward` on one fixed batch (median of the timed passes).
double time_inference(const std::function<Tensor(const Tensor&)>& forward, const Tensor& x, const BenchOptions& opt,
                      const char* label) {
  for (int i = 0; i < opt.warmup; ++i) forward(x);
  Profiler::reset();  // (the per-op times: the timed passes' alone, not the first passes' page faults and cold caches)
  std::vector<double> secs;
  for (int i = 0; i < opt.steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    forward(x);
    secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(secs.begin(), secs.end());
  const double med = secs[secs.size() / 2];
  const double ips = opt.batch / med;
  std::printf("infer %s: %.1f img/s  (%.2f ms/batch, median of %d)\n", label, ips, 1000.0 * med, opt.steps);
  return ips;
}

namespace {

}  // namespace

ExperimentConfig bench_config(const BenchOptions& opt) {
  ExperimentConfig cfg;
  if (!opt.config.empty()) {
    cfg = load_config(opt.config, {}, DataPaths::as_recorded);  // synthetic data: its data paths may be absent
    QAT_CHECK(cfg.quant.enabled, "bench: ", opt.config, " has no enabled quant: section");
  } else {
    cfg.quant.enabled = true;
    cfg.source_path = std::string(QAT_SOURCE_DIR) + "/configs/bench.yaml";
  }
  const ResNetStem stem = bench_model_options(opt).stem;
  QAT_CHECK(opt.checkpoint.empty() ||
                (cfg.model.name == opt.model && cfg.model.num_classes == opt.classes && cfg.model.stem == stem),
            "bench: --checkpoint ", opt.checkpoint, " goes with its config's model, ", cfg.model.name, " with ",
            cfg.model.num_classes, " classes, stem ", enum_name(cfg.model.stem), " (", opt.config,
            "); the bench builds ", opt.model, " with ", opt.classes, ", stem ", opt.stem, ": give --model ",
            cfg.model.name, " --classes ", cfg.model.num_classes, " --stem ", enum_name(cfg.model.stem));
  bench_network_into(cfg, opt);
  return cfg;
}

namespace {

// The QAT model the integer model is frozen from: the config's (and its
// checkpoint) or the default backend at 8 bits, observers set by a few
// training-mode batches of random images.
ModulePtr qat_model_for_bench(const BenchOptions& opt) {
  ExperimentConfig cfg = bench_config(opt);
  ModulePtr m = build_model(cfg, false, false);
  if (!opt.checkpoint.empty()) {
    load_run_state(opt.checkpoint, *m, nullptr, &cfg, ConfigMatch::quant);
    return m;
  }
  m->train();
  NoGradGuard ng;
  Generator gen(3);
  for (int i = 0; i < 3; ++i) m->forward(Tensor::randn({8, 3, opt.res, opt.res}, gen));
  return m;
}

int narrowest_weight_bits(const quant::IntegerModel& im) {
  int bits = 8;
  for (const auto& l : im.layers)
    if (quant::int_op_def(l.op).has(quant::kMatmul)) bits = std::min(bits, l.weight_bits);
  return bits;
}

BenchFigures run_bench_infer(const BenchOptions& opt) {
  quant::GemmKernel kernel = quant::best_gemm_kernel();
  if (!opt.int8_kernel.empty()) {
    const auto k = enum_from_name<quant::GemmKernel>(opt.int8_kernel);
    QAT_CHECK(k && quant::gemm_kernel_runs_here(*k), "bench: --int8-kernel '", opt.int8_kernel, "' ",
              k ? "does not run on this CPU" : "is not one of " + enum_name_list<quant::GemmKernel>());
    kernel = *k;
  }
  ModulePtr model = bench_model(opt);
  model->eval();
  Generator gen(1);
  const Tensor x = Tensor::randn({opt.batch, 3, opt.res, opt.res}, gen);
  NoGradGuard ng;
  Profiler::reset();
  Profiler::set_enabled(opt.profile);
  const double fp32 = time_inference([&](const Tensor& t) { return model->forward(t); }, x, opt, "fp32");
  Profiler::set_enabled(false);
  if (opt.profile) {
    std::printf("FP32 model, time per op (timed passes):\n");
    const int passes = opt.steps;
    for (const auto& r : Profiler::rows())
      std::printf("  %-28s %8.2f ms per pass\n", r.key.c_str(), 1000.0 * r.seconds / passes);
  }
  ModulePtr qmodel = qat_model_for_bench(opt);
  quant::IntegerModel im = quant::freeze(*qmodel);
  im.kernel = kernel;
  const int bits = narrowest_weight_bits(im);
  Profiler::reset();
  Profiler::set_enabled(opt.profile);
  const double int8 = time_inference([&](const Tensor& t) { return im.forward(t); }, x, opt, "int8");
  Profiler::set_enabled(false);
  int packed = 0;
  for (const auto& l : im.layers) packed += quant::runs_packed(l, im.kernel);
  std::printf("int8/fp32 inference speed: %.2fx  (GEMM kernel %s, %d layers on packed weights, narrowest "
              "weights %d bits)\n",
              int8 / fp32, quant::gemm_kernel_name(im.kernel), packed, bits);
  if (opt.profile) {
    std::printf("integer model, time per layer (timed passes) and its GEMM kernel:\n");
    double total = 0;
    for (const auto& r : Profiler::rows()) total += r.seconds;
    for (const auto& r : Profiler::rows()) {
      std::string kernel;
      for (const auto& l : im.layers)
        if (l.name == r.key) kernel = im.layer_kernel(l);
      std::printf("  %-28s %6.1f%%  %8.2f ms per pass  %s\n", r.key.c_str(), 100.0 * r.seconds / total,
                  1000.0 * r.seconds / static_cast<double>(r.calls), kernel.c_str());
    }
  }
  std::printf("peak memory: %.0f MiB (max RSS)\n", peak_rss_mib());
  return {fp32, int8, bits, quant::gemm_kernel_name(im.kernel)};
}

// --infer --device cuda: FP32 eval forward (cuDNN / cuBLAS twins) and the
// integer model (CudaIntegerModel) on the GPU, each pass timed to the end of
// its last kernel; then the integer logits of the batch against the CPU
// integer model's, bit for bit.
BenchFigures run_bench_infer_cuda(const BenchOptions& opt) {
  cuda::require("bench --infer --device cuda");
  std::printf("device: %s\n", cuda::describe().c_str());
  ModulePtr model = bench_model(opt);
  model->eval();
  model->to(Device::cuda);
  Generator gen(1);
  const Tensor x = Tensor::randn({opt.batch, 3, opt.res, opt.res}, gen);
  const Tensor xd = x.to(Device::cuda);
  NoGradGuard ng;
  auto synced = [](Tensor y) {
    cuda::synchronize();
    return y;
  };
  const double fp32 =
      time_inference([&](const Tensor& t) { return synced(model->forward(t)); }, xd, opt, "fp32 on cuda");
  ModulePtr qmodel = qat_model_for_bench(opt);
  const quant::IntegerModel im = quant::freeze(*qmodel);
  const quant::CudaIntegerModel gpu(im);
  const double int8 = time_inference([&](const Tensor& t) { return synced(gpu.forward(t)); }, xd, opt, "int8 on cuda");
  const std::vector<float> dev = gpu.forward(xd).to(Device::cpu).to_vector(), cpu = im.forward(x).to_vector();
  const bool same = dev.size() == cpu.size() &&
                    std::equal(dev.begin(), dev.end(), cpu.begin(), [](float a, float b) {
                      return std::memcmp(&a, &b, sizeof a) == 0;
                    });
  std::printf("int8/fp32 inference speed on cuda: %.2fx  (DP4A GEMM, implicit im2row); int8 logits equal the CPU "
              "integer model's bit for bit: %s\n",
              int8 / fp32, same ? "yes" : "NO");
  QAT_CHECK(same, "bench --infer --device cuda: the integer model's logits on cuda differ from the CPU's");
  if (opt.profile) std::printf("(the per-layer profile is timed on the CPU only: kernels run asynchronously on cuda)\n");
  std::printf("peak memory: %.0f MiB (max RSS, host)\n", peak_rss_mib());
  return {fp32, int8, narrowest_weight_bits(im), "cuda dp4a"};
}

// The CPU (/proc/cpuinfo's model name) and the kernels this run picks on
// it, so that figures from different machines are never confused.
void print_machine() {
  std::string model = "unknown";
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) model = line.substr(std::min(line.size(), colon + 2));
      break;
    }
  const bool capped = max_cpu_isa() != CpuIsa::amx;
  std::printf("cpu: %s (%s%s%savx512 %s, vnni %s, avx-vnni %s, amx-int8 %s)\n", model.c_str(),
              capped ? "as the kernels see it under QAT_MAX_CPU_ISA=" : "", capped ? enum_name(max_cpu_isa()) : "",
              capped ? ": " : "", cpu_has_avx512bw() ? "yes" : "no", cpu_has_avx512_vnni() ? "yes" : "no",
              cpu_has_avx_vnni() ? "yes" : "no", cpu_has_amx_int8() ? "yes" : "no");
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  std::printf(
      "kernels: convolutions %s; OpenBLAS %s%s%s; int8 GEMM %s; fake-quant rows %s; gradient quantization %s\n",
      conv_kernels_name().c_str(), blas_core_name(), forced ? " (OPENBLAS_CORETYPE=" : "",
      forced ? (std::string(forced) + ")").c_str() : "", quant::gemm_kernel_name(quant::best_gemm_kernel()),
      enum_name(quant::best_fq_rows_kernel()), enum_name(quant::best_grad_stats_kernel()));
}

}  // namespace

int run_bench(const BenchOptions& opt, BenchFigures* figures) {
  QAT_CHECK(opt.checkpoint.empty() || (opt.infer && !opt.config.empty()), "bench: --checkpoint goes with --infer and "
            "--config (the integer model is frozen from it); the training benchmarks run on random weights");
  print_machine();
  set_num_threads(opt.threads);
  BenchFigures measured;
  if (opt.infer) {
    std::printf("bench --infer: model %s, %dx%d, batch %d, %d classes, %d threads, %d timed passes after %d warm-up%s\n",
                opt.model.c_str(), opt.res, opt.res, opt.batch, opt.classes, num_threads(), opt.steps, opt.warmup,
                opt.device == "cuda" ? ", on cuda" : "");
    QAT_CHECK(opt.device == "cpu" || opt.int8_kernel.empty(), "bench: --int8-kernel chooses a CPU kernel; with "
              "--device cuda the integer model multiplies on the GPU's DP4A GEMM");
    measured = opt.device == "cuda" ? run_bench_infer_cuda(opt) : run_bench_infer(opt);
    if (figures) *figures = measured;
    return 0;
  }
  std::printf("bench: model %s, %dx%d, batch %d, %d classes, %d threads, %d steps after %d warm-up\n",
              opt.model.c_str(), opt.res, opt.res, opt.batch, opt.classes, num_threads(), opt.steps, opt.warmup);
  const Device device = *enum_from_name<Device>(opt.device);
  // Note [training device]: the FP32 step, before anything runs; said in bench's words (--device, not the key)
  if (std::string why = training_device_refusal(device, cuda::device_info(), cuda::built()); !why.empty()) {
    for (const auto& [from, to] : {std::pair<std::string, std::string>{"train.device: cuda: ", "bench --device cuda: "},
                                   {"use train.device: cpu", "use --device cpu"}})
      if (const size_t at = why.find(from); at != std::string::npos) why.replace(at, from.size(), to);
    QAT_FAIL(why);
  }
  if (device == Device::cuda) std::printf("device: %s\n", cuda::describe().c_str());
  ModulePtr model = bench_model(opt);
  TrainingTimer fp32(*model, opt, device, "fp32");
  if (opt.config.empty()) {
    time_in_turn({&fp32}, opt.steps);
    measured.fp32 = fp32.images_per_second();
  } else {
    ExperimentConfig cfg = bench_config(opt);
    cfg.train.seed = 0;
    // An INT8-training config times the integer GEMMs (forward and backward).
    const char* kind = cfg.quant.int8_training.enabled ? "int8" : "qat";
    const std::string refused =
        training_device_refusal(device, cuda::device_info(), cuda::built(), training_step_of(cfg));
    if (!refused.empty()) {
      time_in_turn({&fp32}, opt.steps);
      measured.fp32 = fp32.images_per_second();
      std::printf("train %s: not timed: %s\n", kind, refused.c_str());
    } else {
      ModulePtr qmodel = build_model(cfg, /*load_init=*/false, /*print=*/false);
      TrainingTimer quantized(*qmodel, opt, device, kind);
      quant::set_weight_lookahead_enabled(opt.weight_lookahead);
      const int64_t taken = quant::weight_lookahead_taken();
      time_in_turn({&fp32, &quantized}, opt.steps);
      quant::set_weight_lookahead_enabled(true);
      measured.fp32 = fp32.images_per_second();
      measured.quantized = quantized.images_per_second();
      std::printf("weight lookahead: %s, %.1f weights a step fake-quantized inside %s\n",
                  opt.weight_lookahead ? "on" : "off (--no-weight-lookahead)",
                  static_cast<double>(quant::weight_lookahead_taken() - taken) / (opt.warmup + opt.steps),
                  optimizer_step_label(opt));
      print_step_ratio(kind, fp32, quantized);
    }
  }
  std::printf("peak memory: %.0f MiB (max RSS%s)\n", peak_rss_mib(),
              measured.quantized > 0 ? ", the FP32 and the quantized model both resident" : "");
  if (figures) *figures = measured;
  return 0;
}

}  // namespace qat::apps
