// Int8GradState (int8_ops.h): one INT8 layer's gradient quantizers and what they measured.
#include <algorithm>
#include <cmath>

#include "core/collective.h"
#include "core/error.h"
#include "quant/int8_training/int8_ops.h"

namespace qat::quant {

// ---------------------------------------------------------------- state
Int8GradState::Int8GradState(const Int8GradConfig& cfg, uint64_t seed, std::string layer)
    : cfg_(cfg), seed_(seed), layer_(std::move(layer)) {
  QAT_CHECK(cfg.bits >= 2 && cfg.bits <= 8, "int8 training: gradient_bits must be in [2, 8], got ", cfg.bits);
  QAT_CHECK(cfg.period >= 1, "int8 training: period must be >= 1, got ", cfg.period);
  clip_dw_ = register_host_buffer("clip_dw", Tensor::zeros({1}));
  clip_dx_ = register_host_buffer("clip_dx", Tensor::zeros({1}));
  ratio_dw_ = register_host_buffer("ratio_dw", Tensor::zeros({1}));
  ratio_dx_ = register_host_buffer("ratio_dx", Tensor::zeros({1}));
  distance_dw_ = register_host_buffer("distance_dw", Tensor::zeros({1}));
  distance_dx_ = register_host_buffer("distance_dx", Tensor::zeros({1}));
  lr_scale_ = register_host_buffer("lr_scale", Tensor::ones({1}));
  steps_ = register_host_buffer("steps", Tensor::zeros({1}, DType::i32));
  epoch_sums_ = register_host_buffer("epoch_sums", Tensor::zeros({5}));
}

std::string Int8GradState::describe() const {
  return detail::cat("int", cfg_.bits, " gradients, ", enum_name(cfg_.rounding), " rounding, ",
                     enum_name(cfg_.clipping), " clipping", cfg_.lr_scaling ? ", LR scaling" : "");
}

namespace {
float& cell(Tensor& t) { return t.data<float>()[0]; }
float cell(const Tensor& t) { return t.data<float>()[0]; }
}  // namespace

float Int8GradState::clip(int which) const { return cell(which == 0 ? clip_dw_ : clip_dx_); }
float Int8GradState::distance(int which) const { return cell(which == 0 ? distance_dw_ : distance_dx_); }

bool Int8GradState::clip_due(int which) const {
  return cfg_.clipping == GradClipping::max || cell(which == 0 ? ratio_dw_ : ratio_dx_) <= 0.f ||
         steps() % cfg_.period == 0;
}

void Int8GradState::refresh_clip(int which, const float* g, int64_t n) {
  const float m = max_abs(g, n);
  if (cfg_.clipping == GradClipping::max) return refresh_max_clip(which, m);
  check_finite_max(m);
  set_clip(which, search_clip(g, n, cfg_.bits).clip, m);
}

void Int8GradState::refresh_max_clip(int which, float max_abs_g) {
  QAT_CHECK(cfg_.clipping == GradClipping::max, "int8 training: layer ", layer_,
            ": refresh_max_clip under direction-sensitive clipping");
  check_finite_max(max_abs_g);
  set_clip(which, max_abs_g, max_abs_g);
}

void Int8GradState::check_finite_max(float m) const {
  QAT_CHECK(std::isfinite(m), "int8 training: layer ", layer_, ": the output gradient holds ", m,
            " (non-finite) at step ", steps());
}

void Int8GradState::set_clip(int which, float c, float m) {
  cell(which == 0 ? clip_dw_ : clip_dx_) = usable_clip(c, cfg_.bits);  // a tiny max|g|: zeros, not an overflow
  cell(which == 0 ? ratio_dw_ : ratio_dx_) = m > 0.f ? c / m : 0.f;
}

void Int8GradState::track_clip(int which, float max_abs_g) {
  QAT_CHECK(std::isfinite(max_abs_g), "int8 training: layer ", layer_, ": the output gradient holds ", max_abs_g,
            " (non-finite) at step ", steps());
  cell(which == 0 ? clip_dw_ : clip_dx_) = usable_clip(cell(which == 0 ? ratio_dw_ : ratio_dx_) * max_abs_g, cfg_.bits);
}

float Int8GradState::grad_scale(int which) const { return clip(which) / static_cast<float>(grad_qmax(cfg_.bits)); }

// One key per (seed, step, quantizer): the noise of a step is a pure
// function of the checkpointed state. In a data-parallel run every process
// but 0 (which keeps the single-process stream) adds its rank, so the
// processes' parts of a batch get independent noise.
uint64_t Int8GradState::noise_key(int which) const {
  const Collective* all = collective();
  const uint64_t rank = all ? static_cast<uint64_t>(all->rank()) : 0;
  return seed_ ^ (static_cast<uint64_t>(steps()) * 0x9E3779B97F4A7C15ull) ^ (which ? 0xD1B54A32D192ED03ull : 0) ^
         (rank * 0xA0761D6478BD642Full);
}

void Int8GradState::record(int which, const GradQuantStats& stats) {
  cell(which == 0 ? distance_dw_ : distance_dx_) = static_cast<float>(cosine_distance(stats));
}

void Int8GradState::finish_step(bool had_dw, bool had_dx) {
  float* sums = epoch_sums_.data<float>();
  if (had_dw) {
    cell(lr_scale_) = cfg_.lr_scaling ? static_cast<float>(lr_scale_for(distance(0), cfg_.alpha, cfg_.beta)) : 1.f;
    sums[0] += distance(0), sums[2] += lr_scale(), sums[3] += 1.f;
  }
  if (had_dx) sums[1] += distance(1), sums[4] += 1.f;
  steps_.data<int32_t>()[0] += 1;
  for (Tensor* t : {&clip_dw_, &clip_dx_, &ratio_dw_, &ratio_dx_, &distance_dw_, &distance_dx_, &lr_scale_, &steps_,
                    &epoch_sums_})
    t->bump_version();
}

Int8GradState::Means Int8GradState::take_means() {
  float* sums = epoch_sums_.data<float>();
  Means m;
  m.count_dw = static_cast<int64_t>(sums[3]);
  m.count_dx = static_cast<int64_t>(sums[4]);
  if (m.count_dw > 0) m.distance_dw = sums[0] / sums[3], m.lr_scale = sums[2] / sums[3];
  if (m.count_dx > 0) m.distance_dx = sums[1] / sums[4];
  for (int i = 0; i < 5; ++i) sums[i] = 0.f;
  epoch_sums_.bump_version();
  return m;
}

}  // namespace qat::quant
