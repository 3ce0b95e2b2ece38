// `qat eval` and the validation pass training runs after each epoch:
// top-1, top-5 and the loss of a model (or a frozen integer model) on a
// loader, summed over the processes of a data-parallel run.
#include <algorithm>
#include <cstdio>

#include "apps/config.h"
#include "apps/data_parallel.h"
#include "apps/device_check.h"
#include "apps/integer_io.h"
#include "apps/run_state.h"
#include "apps/train.h"
#include "core/autograd.h"
#include "core/collective.h"
#include "core/ops.h"
#include "core/threads.h"
#include "data/loader.h"

namespace qat::apps {

EvalSummary evaluate(Module& model, data::DataLoader& loader, int64_t num_classes, Device device) {
  model.eval();
  return evaluate([&](const Tensor& x) { return model.forward(x); }, loader, num_classes, device);
}

EvalSummary evaluate(const std::function<Tensor(const Tensor&)>& forward, data::DataLoader& loader,
                     int64_t num_classes, Device device) {
  NoGradGuard no_grad;
  EvalSummary r;
  double loss_sum = 0;
  int64_t c1 = 0, c5 = 0;
  Collective* all = collective();
  std::string failure;  // data-parallel: this process's error, told to the others before anyone stops
  try {
    loader.start_epoch(0);
    data::Batch b;
    while (loader.next(b)) {
      const int64_t n = b.labels.size(0);
      const Tensor logits = forward(b.images.to(device)).to(Device::cpu);
      loss_sum += cross_entropy(logits, b.labels).item() * static_cast<double>(n);
      c1 += topk_correct(logits, b.labels, 1);
      c5 += topk_correct(logits, b.labels, std::min<int64_t>(5, num_classes));
      r.images += n;
    }
  } catch (const Error& e) {
    if (!all) throw;
    failure = e.what();
  }
  if (all) {  // data-parallel: each process evaluated its shard
    double sums[5] = {loss_sum, static_cast<double>(c1), static_cast<double>(c5), static_cast<double>(r.images),
                      failure.empty() ? 0.0 : 1.0};
    all->sum(sums, 5);
    if (sums[4] > 0) throw_agreed_failure(*all, failure, static_cast<int>(sums[4]), "validation");
    loss_sum = sums[0], c1 = static_cast<int64_t>(sums[1]), c5 = static_cast<int64_t>(sums[2]);
    r.images = static_cast<int64_t>(sums[3]);
  }
  QAT_CHECK(r.images > 0, "evaluate: the validation set gave no images");
  r.loss = loss_sum / static_cast<double>(r.images);
  r.top1 = static_cast<double>(c1) / static_cast<double>(r.images);
  r.top5 = static_cast<double>(c5) / static_cast<double>(r.images);
  return r;
}

EvalSummary eval_checkpoint(const EvalArgs& args) {
  ExperimentConfig cfg = load_config(args.config, args.overrides);
  set_num_threads(static_cast<int>(cfg.train.threads));
  const data::ImageFolder val_set = image_folder(cfg.data, cfg.data.val);
  data::DataLoader val_loader(val_set, transform_spec(cfg.data), loader_options(cfg, false));
  // train.device: evaluation runs where the config trains (it was ignored: the CPU, whatever it said).
  const Device device = cfg.train.device;
  if (is_export_dir(args.checkpoint)) {  // the frozen integer model of `qat export`
    QAT_CHECK(device == Device::cpu, "eval: config ", cfg.source_path, " has train.device ", enum_name(device),
              ", but an export's integer model is evaluated on the CPU; `qat infer --device ", enum_name(device),
              "` runs it there (or --set train.device=cpu)");
    const ExportedModel ex = load_export(args.checkpoint);
    check_same_model(ex, args.checkpoint, cfg.model.name, cfg.source_path);
    check_same_preprocessing(ex, args.checkpoint, transform_spec(cfg.data), cfg.source_path);
    QAT_CHECK(ex.model.num_classes() == cfg.model.num_classes && ex.image_size == cfg.data.image_size, "eval: export ",
              args.checkpoint, " has ", ex.model.num_classes(), " classes at ", ex.image_size, " px; config ",
              cfg.source_path, " has ", cfg.model.num_classes, " at ", cfg.data.image_size, " px");
    check_same_classes(ex.classes, val_set.classes(), "eval", "export " + args.checkpoint, cfg.data.val);
    EvalSummary s = evaluate([&](const Tensor& x) { return ex.model.forward(x); }, val_loader, cfg.model.num_classes);
    s.epoch = -1;
    return s;
  }
  check_training_device(device, training_step_of(cfg));
  ModulePtr model = build_model(cfg, false, false);
  const RunState st = load_run_state(args.checkpoint, *model, nullptr, &cfg, ConfigMatch::quant);
  if (!st.classes.empty()) check_same_classes(st.classes, val_set.classes(), "eval", args.checkpoint, cfg.data.val);
  model->to(device);
  EvalSummary s = evaluate(*model, val_loader, cfg.model.num_classes, device);
  s.epoch = st.epoch;
  return s;
}

int run_eval(const EvalArgs& args) {
  const EvalSummary r = eval_checkpoint(args);
  if (r.epoch < 0) {
    std::printf("eval %s (integer model): %lld images, loss %.4f, top-1 %.2f%%, top-5 %.2f%%\n",
                args.checkpoint.c_str(), static_cast<long long>(r.images), r.loss, 100 * r.top1, 100 * r.top5);
    return 0;
  }
  std::printf("eval %s (epoch %lld): %lld images, loss %.4f, top-1 %.2f%%, top-5 %.2f%%\n", args.checkpoint.c_str(),
              static_cast<long long>(r.epoch), static_cast<long long>(r.images), r.loss, 100 * r.top1, 100 * r.top5);
  return 0;
}

}  // namespace qat::apps
