#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace qat {

LrSchedule::LrSchedule(const LrScheduleOptions& options, const Optimizer& optimizer) : opt_(options) {
  QAT_CHECK(opt_.warmup >= 0.0, "LrSchedule: warmup must be >= 0, got ", opt_.warmup);
  QAT_CHECK(opt_.warmup == 0.0 || (opt_.warmup_start_factor > 0.0 && opt_.warmup_start_factor <= 1.0),
            "LrSchedule: warmup_start_factor must be in (0, 1], got ", opt_.warmup_start_factor);
  switch (opt_.kind) {
    case LrScheduleKind::constant: break;
    case LrScheduleKind::step:
      QAT_CHECK(opt_.step_size > 0.0, "LrSchedule(step): step_size must be > 0, got ", opt_.step_size);
      break;
    case LrScheduleKind::multistep: std::sort(opt_.milestones.begin(), opt_.milestones.end()); break;
    case LrScheduleKind::cosine:
      QAT_CHECK(opt_.total > 0.0, "LrSchedule(cosine): total must be > 0, got ", opt_.total);
      QAT_CHECK(opt_.eta_min >= 0.0, "LrSchedule(cosine): eta_min must be >= 0, got ", opt_.eta_min);
      break;
  }
  for (const ParamGroup& g : optimizer.param_groups()) base_lrs_.push_back(g.lr);
}

double LrSchedule::main_factor(double t) const {
  switch (opt_.kind) {
    case LrScheduleKind::constant: return 1.0;
    case LrScheduleKind::step: return std::pow(opt_.gamma, std::floor(t / opt_.step_size));
    case LrScheduleKind::multistep: {
      const auto passed = std::upper_bound(opt_.milestones.begin(), opt_.milestones.end(), t) - opt_.milestones.begin();
      return std::pow(opt_.gamma, static_cast<double>(passed));
    }
    case LrScheduleKind::cosine:
      return opt_.eta_min + (1.0 - opt_.eta_min) * (1.0 + std::cos(std::numbers::pi * t / opt_.total)) / 2.0;
  }
  return 1.0;
}

double LrSchedule::factor(double position) const {
  QAT_CHECK(position >= 0.0, "LrSchedule::factor: position must be >= 0, got ", position);
  if (position < opt_.warmup)
    return opt_.warmup_start_factor + (1.0 - opt_.warmup_start_factor) * position / opt_.warmup;
  return main_factor(position - opt_.warmup);
}

void LrSchedule::apply(Optimizer& optimizer, double position) const {
  auto& groups = optimizer.param_groups();
  QAT_CHECK(groups.size() == base_lrs_.size(), "LrSchedule::apply: optimizer has ", groups.size(),
            " groups, the schedule was built for ", base_lrs_.size());
  const double f = factor(position);
  for (size_t g = 0; g < groups.size(); ++g) groups[g].lr = base_lrs_[g] * f;
}

}  // namespace qat
