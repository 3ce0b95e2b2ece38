#include "quant/observe/observer.h"

#include <limits>

#include "core/ops/common.h"
#include "core/profiler.h"
#include "quant/observe/row_min_max.h"

namespace qat::quant {

Observer::Observer(const QuantSpec& spec, int64_t channels) : spec_(spec), channels_(channels) {
  spec_.validate("observer");
  QAT_CHECK(channels >= 1, "observer: channels must be >= 1, got ", channels);
  QAT_CHECK(spec_.per_channel || channels == 1, "observer: a per-tensor spec (", spec_.describe(),
            ") takes channels = 1, got ", channels);
}

void Observer::observe(const Tensor& x) {
  if (!enabled) return;
  QAT_PROFILE("observer.observe");
  detail::check_f32_any_device(x, "observer", "input");
  if (x.numel() == 0) return;
  // On cuda, the range folds (MinMax, MovingAverage) reduce there and fold on
  // the host; a calibrator's statistics (histograms) are built on the CPU.
  QAT_CHECK(x.device() == Device::cpu || channel_fold() != nullptr, "observer ", describe(), ": the input (shape ",
            x.sizes(), ") is on ", device_name(x.device()), ", but this observer runs on the CPU only");
  if (spec_.per_channel) {
    QAT_CHECK(spec_.axis < x.dim(), "observer: channel axis ", spec_.axis, " out of range for input shape ", x.sizes());
    QAT_CHECK(x.size(spec_.axis) == channels_, "observer: expected ", channels_, " channels along axis ", spec_.axis,
              ", got input shape ", x.sizes());
  }
  update(x);
}

QParams Observer::qparams() const {
  const Range r = range();
  return compute_qparams(spec_, r.min_val, r.max_val);
}

bool Observer::initialized() const {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const Range r = range();
  return !(r.min_val.data<float>()[0] == kInf && r.max_val.data<float>()[0] == -kInf);
}

void ChannelMinMaxFold::fold_row(int64_t c, const float* row, int64_t n, float& lo, float& hi) {
  float mn, mx;
  row_min_max(row, n, mn, mx);  // NaNs ignored
  fold_channel(c, mn, mx);
  channel_range(c, lo, hi);
}

}  // namespace qat::quant
