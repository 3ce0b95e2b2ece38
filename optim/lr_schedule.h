#pragma once
// Learning-rate schedules as a pure function of position: the LR factor at a
// (fractional) epoch or iteration — the caller picks the unit and uses it for
// every length below. apply() sets each group's lr = its base lr * factor,
// where the base lrs are the groups' lrs when the schedule was constructed.
//
// factor(pos), with W = warmup:
//   pos < W (warmup, as torch LinearLR(start_factor, end_factor=1, total_iters=W)):
//     start_factor + (1 - start_factor) * pos / W
//   otherwise, with t = pos - W (the main schedule starts after the warmup, as
//   torch SequentialLR([LinearLR, main], milestones=[W])):
//     constant:  1
//     step:      gamma ^ floor(t / step_size)                       (StepLR)
//     multistep: gamma ^ (number of milestones <= t)                (MultiStepLR)
//     cosine:    eta_min + (1 - eta_min) * (1 + cos(pi * t / total)) / 2
//                (CosineAnnealingLR's closed form with its eta_min = eta_min *
//                base lr: eta_min here is a FRACTION of each group's base lr.
//                As in torch, past `total` the cosine rises again: set total
//                to the length of the run.)
#include <vector>

#include "core/enum_names.h"
#include "optim/optimizer.h"

namespace qat {

enum class LrScheduleKind { constant, step, multistep, cosine };
constexpr auto enum_names(LrScheduleKind) {
  return std::to_array<EnumName<LrScheduleKind>>({{LrScheduleKind::constant, "constant"},
                                                  {LrScheduleKind::step, "step"},
                                                  {LrScheduleKind::multistep, "multistep"},
                                                  {LrScheduleKind::cosine, "cosine"}});
}

struct LrScheduleOptions {
  LrScheduleKind kind = LrScheduleKind::constant;
  double gamma = 0.1;              // step, multistep
  double step_size = 1.0;          // step
  std::vector<double> milestones;  // multistep (any order)
  double total = 0.0;              // cosine: length of the half period (T_max)
  double eta_min = 0.0;            // cosine: final factor, a fraction of the base lr
  double warmup = 0.0;             // 0: no warmup
  double warmup_start_factor = 1.0 / 3.0;
};

class LrSchedule {
 public:
  LrSchedule(const LrScheduleOptions& options, const Optimizer& optimizer);
  double factor(double position) const;
  void apply(Optimizer& optimizer, double position) const;
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  const LrScheduleOptions& options() const { return opt_; }

 private:
  double main_factor(double t) const;
  LrScheduleOptions opt_;
  std::vector<double> base_lrs_;
};

}  // namespace qat
