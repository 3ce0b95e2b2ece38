#include "quant/sim/weight_lookahead.h"

#include "quant/observe/row_min_max.h"

namespace qat::quant {

namespace {
std::atomic<bool> g_enabled{true};
std::atomic<int64_t> g_taken{0};
}  // namespace

void set_weight_lookahead_enabled(bool on) { g_enabled = on; }
bool weight_lookahead_enabled() { return g_enabled; }
int64_t weight_lookahead_taken() { return g_taken; }

WeightLookahead::WeightLookahead(const QuantSpec& spec, ChannelMinMaxFold& fold, int64_t channels, SteKind ste)
    : spec_(spec), fold_(fold), channels_(channels), ste_(ste) {}

void WeightLookahead::arm(const Tensor& w) { armed_ = w.impl_shared(); }

void WeightLookahead::disarm() {
  armed_.reset();
  result_.reset();
  ready_ = false;
}

bool WeightLookahead::armed_for(const Tensor& w) const {
  const std::shared_ptr<TensorImpl> a = armed_.lock();
  return a && a.get() == w.impl_ptr();
}

bool WeightLookahead::begin(const Tensor& p) {
  result_.reset();  // an earlier step's result is stale from here on
  ready_ = false;
  if (!weight_lookahead_enabled() || !armed_for(p) || p.dtype() != DType::f32 || !p.is_contiguous() ||
      p.dim() < 2 || p.size(0) != channels_)
    return false;
  try {  // the weight trains, so the next forward keeps the clipped STE's mask
    result_ = std::make_unique<ChannelRows>(spec_, p.sizes(), ste_ == SteKind::clipped);
  } catch (...) {  // out of memory: the update goes on without the lookahead
    return false;
  }
  len_ = p.numel() / channels_;
  cur_min_.assign(channels_, 0.f);
  cur_max_.assign(channels_, 0.f);
  failed_ = false;
  return true;
}

void WeightLookahead::rows(int64_t r0, int64_t r1, const float* data) {
  if (failed_) return;
  try {
    for (int64_t c = r0; c < r1; ++c) {
      const float* row = data + (c - r0) * len_;
      float lo, hi;
      row_min_max(row, len_, cur_min_[c], cur_max_[c]);  // NaNs ignored, as fold_row
      fold_.preview_channel(c, cur_min_[c], cur_max_[c], lo, hi);
      result_->row(c, row, lo, hi);
    }
  } catch (...) {  // e.g. a non-finite range: the forward computes it and reports it
    failed_ = true;
  }
}

void WeightLookahead::end(const Tensor& p) {
  storage_ = p.impl_ptr()->storage;
  weight_version_ = p.version();
  state_version_ = fold_.state_version();
  ready_ = result_ && !failed_;
  if (!ready_) result_.reset();
}

std::optional<Tensor> WeightLookahead::take(const Tensor& x, QParams& used) {
  std::unique_ptr<ChannelRows> result = std::move(result_);
  const bool valid = ready_ && armed_for(x) && x.impl_ptr()->storage == storage_.lock() &&
                     x.version() == weight_version_ &&
                     fold_.state_version() == state_version_;
  ready_ = false;
  if (!valid) return std::nullopt;
  for (int64_t c = 0; c < channels_; ++c) fold_.fold_channel(c, cur_min_[c], cur_max_[c]);
  fold_.end_fold();
  ++g_taken;
  used = result->qparams();
  return result->finish(x, ste_);
}

}  // namespace qat::quant
