#include "quant/sim/fake_quantizer.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "core/autograd.h"
#include "core/collective.h"
#include "core/profiler.h"
#include "quant/observe/minmax.h"
#include "quant/sim/fq_channel_rows.h"
#include "quant/sim/lsq.h"

namespace qat::quant {

namespace {
Tensor flag(bool on) {
  Tensor t = Tensor::zeros({1}, DType::u8);
  t.data<uint8_t>()[0] = on ? 1 : 0;
  return t;
}
bool read_flag(const Tensor& t) { return t.data<uint8_t>()[0] != 0; }
void write_flag(Tensor& t, bool on) {
  t.data<uint8_t>()[0] = on ? 1 : 0;
  t.bump_version();
}
}  // namespace

// The one place a quantization method picks its implementation.
std::shared_ptr<FakeQuantizer> make_fake_quantizer(const QuantizerConfig& cfg, int64_t channels) {
  switch (cfg.method) {
    case QuantMethod::minmax:
    case QuantMethod::moving_average: return std::make_shared<ObserverFakeQuantizer>(cfg, channels);
    case QuantMethod::lsq: return std::make_shared<LsqFakeQuantizer>(cfg, channels);
    case QuantMethod::lsq_plus:
      // A symmetric grid has zero point 0 by definition (PyTorch's symmetric
      // qschemes, TensorRT): no offset to learn. LSQ+ learns one on affine
      // grids only, which is where its paper puts it (activations).
      if (cfg.spec.symmetric) return std::make_shared<LsqFakeQuantizer>(cfg, channels);
      return std::make_shared<LsqPlusFakeQuantizer>(cfg, channels);
  }
  QAT_FAIL("make_fake_quantizer: unknown method ", static_cast<int>(cfg.method));
}

// ---------------------------------------------------------------- base
FakeQuantizer::FakeQuantizer(const QuantizerConfig& cfg, int64_t channels) : cfg_(cfg) {
  cfg_.spec.validate("FakeQuantizer");
  QAT_CHECK(channels >= 1, "FakeQuantizer: channels must be >= 1, got ", channels);
  QAT_CHECK(cfg_.spec.per_channel || channels == 1, "FakeQuantizer: per-tensor spec with ", channels, " channels");
  // Host buffers: read on the host every step, wherever the model trains.
  scale_ = register_host_buffer("scale", Tensor::ones({channels}));
  zero_point_ = register_host_buffer("zero_point", Tensor::zeros({channels}, DType::i32));
  observer_on_ = register_host_buffer("observer_enabled", flag(true));
  fake_quant_on_ = register_host_buffer("fake_quant_enabled", flag(true));
  initialized_ = register_host_buffer("initialized", flag(false));
}

std::string FakeQuantizer::describe() const {
  return cfg_.spec.describe() + ", " + method_name(cfg_.method) + (cfg_.ste == SteKind::plain ? ", plain STE" : "");
}

void FakeQuantizer::set_observer_enabled(bool on) { write_flag(observer_on_, on); }
void FakeQuantizer::set_fake_quant_enabled(bool on) { write_flag(fake_quant_on_, on); }
bool FakeQuantizer::observer_enabled() const { return read_flag(observer_on_); }
bool FakeQuantizer::fake_quant_enabled() const { return read_flag(fake_quant_on_); }
bool FakeQuantizer::initialized() const { return read_flag(initialized_); }
void FakeQuantizer::set_initialized() { write_flag(initialized_, true); }

void FakeQuantizer::store_qparams(const Tensor& scale, const Tensor& zero_point) {
  NoGradGuard ng;
  scale_.copy_(scale.view(scale_.sizes()));
  zero_point_.copy_(zero_point.view(zero_point_.sizes()));
}

void FakeQuantizer::set_qparams(const QParams& q) {
  QAT_CHECK(q.scale.numel() == scale_.numel() && q.zero_point.numel() == zero_point_.numel(),
            "FakeQuantizer::set_qparams: ", q.scale.numel(), " scales for ", scale_.numel(), " channels");
  store_qparams(q.scale, q.zero_point);
  set_observer_enabled(false);
  set_initialized();
}

Tensor FakeQuantizer::apply_frozen(const Tensor& x) const {
  return fake_quantize(x, scale_, zero_point_, cfg_.spec, cfg_.ste);
}

// ---------------------------------------------------------------- observed
ObserverFakeQuantizer::ObserverFakeQuantizer(const QuantizerConfig& cfg, int64_t channels)
    : FakeQuantizer(cfg, channels),
      observer_(cfg.observer ? cfg.observer(cfg_.spec, channels)
                             : make_observer(cfg.method, cfg_.spec, channels, cfg.averaging_constant)) {
  QAT_CHECK(observer_ && observer_->channels() == channels, "FakeQuantizer: the observer factory made ",
            observer_ ? "an observer of " + std::to_string(observer_->channels()) + " channels" : std::string("none"),
            " for ", channels, " channels");
  // The observer folds each observation's range on the host (minmax.h).
  for (auto& [name, t] : observer_->state()) register_host_buffer(name, t);
}

ObserverFakeQuantizer::~ObserverFakeQuantizer() {
  if (!lookahead_) return;
  lookahead_->disarm();
  if (const std::shared_ptr<TensorImpl> w = hooked_.lock(); w && w->update_hook == lookahead_) w->update_hook.reset();
}

void ObserverFakeQuantizer::stop_looking_ahead() {
  if (lookahead_) lookahead_->disarm();
}

void ObserverFakeQuantizer::look_ahead_at(const Tensor& x) {
  ChannelMinMaxFold* fold = observer_->channel_fold();
  const QuantSpec& spec = cfg_.spec;
  const bool fits = weight_lookahead_enabled() && is_training() && !calibrating_ && fold && spec.per_channel &&
                    spec.axis == 0 && x.is_leaf() && x.requires_grad() && x.device() == Device::cpu &&
                    x.dtype() == DType::f32 && x.is_contiguous() && x.dim() >= 2 &&
                    x.size(0) == observer_->channels() && x.numel() > 0;
  if (!fits) return stop_looking_ahead();
  if (!lookahead_) lookahead_ = std::make_shared<WeightLookahead>(spec, *fold, observer_->channels(), cfg_.ste);
  if (!x.update_hook()) {
    // A weight this quantizer looked ahead at before keeps no hook of it.
    if (const std::shared_ptr<TensorImpl> old = hooked_.lock(); old && old->update_hook == lookahead_)
      old->update_hook.reset();
    Tensor(x).set_update_hook(lookahead_);
    hooked_ = x.impl_shared();
  }
  // A parameter another quantizer looks ahead at stays that one's.
  if (x.update_hook() == lookahead_.get())
    lookahead_->arm(x);
  else
    stop_looking_ahead();
}

std::string ObserverFakeQuantizer::describe() const {
  if (!cfg_.observer) return FakeQuantizer::describe();
  return cfg_.spec.describe() + ", " + observer_->describe() + (cfg_.ste == SteKind::plain ? ", plain STE" : "");
}

Tensor ObserverFakeQuantizer::forward(const Tensor& x) {
  QAT_PROFILE("fake_quantizer");
  observer_->enabled = observer_enabled() && (is_training() || calibrating_);
  if (!fake_quant_enabled()) {
    stop_looking_ahead();
    if (observer_->enabled) observer_->observe(x);
    // Calibrating: the qparams come from apply_calibration(), after the last
    // batch (a histogram observer's qparams() runs a threshold search). An
    // observer that is off keeps the stored ones (a calibration's).
    if (observer_->enabled && observer_->initialized() && !calibrating_) {
      const QParams q = observer_->qparams();
      store_qparams(q.scale, q.zero_point);
    }
    return x;
  }
  // Observer off (eval, frozen, calibrated): the stored qparams, those of the
  // last forward with it on (equal to the observer's then) or set_qparams().
  if (!observer_->enabled) {
    stop_looking_ahead();
    return fake_quantize(x, scale_, zero_point_, cfg_.spec, cfg_.ste);
  }
  QParams used;
  std::optional<Tensor> ahead = lookahead_ ? lookahead_->take(x, used) : std::nullopt;
  Tensor y = ahead ? std::move(*ahead) : observe_and_fake_quantize(*observer_, x, cfg_.ste, &used);
  look_ahead_at(x);
  store_qparams(used.scale, used.zero_point);
  set_initialized();
  return y;
}

// Note [the output quantizer inside batch norm]
// A QAT Conv+BN(+ReLU/ReLU6) layer's output quantizer reads the batch
// norm's output once to observe it and once to fake-quantize it, and that
// output is stored only to be read so. Run inside the batch norm as its
// output stage (core/ops/batch_norm.h), the quantizer observes the range
// the op finds before writing (each channel's extremes are those of its
// input through a monotonic map), then fake-quantizes each plane as it is
// written: the output is never stored, and the op keeps one mask byte an
// element for both backwards instead of the output. What the quantizer
// does to itself is forward()'s with fake quantization on: the fold of the
// range into the observer, the qparams from it, stored and used (or the
// stored ones with the observer off); the per-element rule is
// fake_quantize's (fq_span), so output, gradients, observer state and
// qparams are the same bits as the ops one after another (tested). Only
// per-tensor quantizers with a min/max-fold observer (or none on), outside
// calibration and data-parallel runs, on the CPU.
class ObserverFakeQuantizer::InsideStage final : public BnOutputStage {
 public:
  explicit InsideStage(ObserverFakeQuantizer& q) : q_(q) {}
  bool wants_range() const override { return q_.observer_->enabled; }
  void begin(float lo, float hi) override {
    if (q_.observer_->enabled) {
      ChannelMinMaxFold* fold = q_.observer_->channel_fold();
      fold->fold_channel(0, lo, hi);  // as observe(): update() of one channel
      fold->end_fold();
      float a, b;
      fold->channel_range(0, a, b);
      float sc;
      int32_t zp;
      qparams_from_range(q_.cfg_.spec, a, b, sc, zp);
      q_.store_qparams(Tensor::from_vector({sc}, {1}), Tensor::from_vector_i32({zp}, {1}));
      q_.set_initialized();
    }
    // The applied qparams, checked and prepared as plan_fake_quantize does.
    s_ = q_.scale_.data<float>()[0];
    const int32_t zp = q_.zero_point_.data<int32_t>()[0];
    const QuantSpec& spec = q_.cfg_.spec;
    QAT_CHECK(s_ > 0.f && std::isfinite(s_), "fake_quantize: scale must be positive and finite, got ", s_);
    QAT_CHECK(zp >= spec.qmin() && zp <= spec.qmax(), "fake_quantize: zero_point ", zp, " outside [", spec.qmin(),
              ", ", spec.qmax(), "]");
    z_ = static_cast<float>(zp);
    inv_ = 1.0f / s_;
    qmin_ = static_cast<float>(spec.qmin()), qmax_ = static_cast<float>(spec.qmax());
  }
  void apply(const float* in, float* out, uint8_t* passes, int64_t planes, int64_t len,
             int64_t stride) const override {
    for (int64_t k = 0; k < planes; ++k) {
      const float* x = in + k * len;
      float* y = out + k * stride;
      uint8_t* m = passes ? passes + k * stride : nullptr;
      if (m && q_.cfg_.ste == SteKind::clipped) {
        fq_span<true>(x, y, m, len, s_, inv_, z_, qmin_, qmax_);
      } else {
        fq_span<false>(x, y, nullptr, len, s_, inv_, z_, qmin_, qmax_);
        if (m) std::fill(m, m + len, uint8_t{1});  // the plain STE passes everything
      }
    }
  }

 private:
  ObserverFakeQuantizer& q_;
  float s_ = 0.f, inv_ = 0.f, z_ = 0.f, qmin_ = 0.f, qmax_ = 0.f;  // set by begin()
};

std::unique_ptr<BnOutputStage> ObserverFakeQuantizer::inside_stage(const Tensor& x) {
  if (!fake_quant_enabled() || calibrating_ || cfg_.spec.per_channel || lookahead_ || collective() ||
      x.device() != Device::cpu)
    return nullptr;
  observer_->enabled = observer_enabled() && is_training();  // as forward()
  if (observer_->enabled && !observer_->channel_fold()) return nullptr;
  stop_looking_ahead();  // (forward() stops it too: an activation is no weight)
  return std::make_unique<InsideStage>(*this);
}

bool ObserverFakeQuantizer::forward_codes(const Tensor& w, QuantCodes& out, const std::string& what) {
  if (!fake_quant_enabled() || !codes_supported(cfg_.spec)) return false;
  QAT_PROFILE("fake_quantizer");
  stop_looking_ahead();  // the weight's integers are made here, at the forward
  // As forward() with fake quantization on.
  observer_->enabled = observer_enabled() && (is_training() || calibrating_);
  if (!observer_->enabled) {
    quantize_codes(w, {scale_, zero_point_}, cfg_.spec, cfg_.ste, out, what);
    return true;
  }
  QParams used;
  observe_and_quantize_codes(*observer_, w, cfg_.ste, out, used, what);
  store_qparams(used.scale, used.zero_point);
  set_initialized();
  return true;
}

// ---------------------------------------------------------------- learned
LearnedFakeQuantizer::LearnedFakeQuantizer(const QuantizerConfig& cfg, int64_t channels)
    : FakeQuantizer(cfg, channels) {
  step_ = register_parameter("step", Tensor::ones({channels}));
}

void LearnedFakeQuantizer::start_from(const QParams& q) {
  NoGradGuard ng;
  QAT_CHECK(q.scale.numel() == step_.numel(), "start_from: ", q.scale.numel(), " scales for ", step_.numel(),
            " steps");
  step_.copy_(q.scale.view(step_.sizes()));
  store_qparams(q.scale, q.zero_point);
  set_initialized();
}

Tensor LearnedFakeQuantizer::zero_points(const Tensor&) const {
  return Tensor::zeros(zero_point_.sizes(), DType::i32);
}

Tensor LearnedFakeQuantizer::forward(const Tensor& x) {
  QAT_PROFILE("fake_quantizer");
  if (!initialized()) {  // weights: the pretrained weights; activations: the first batch
    NoGradGuard ng;
    initialize_from(x.detach());
    if (!cfg_.is_weight) average_over_processes();
    set_initialized();
  }
  sync_qparams();  // the qparams this forward applies: what freeze uses
  if (!fake_quant_enabled()) return x;
  // N for the gradient scale: weights per step, or features per example.
  const int64_t per_step = cfg_.is_weight ? x.numel() / step_.numel() : x.numel() / std::max<int64_t>(1, x.size(0));
  return quantize(x, lsq_grad_scale(per_step, cfg_.spec));
}

bool LearnedFakeQuantizer::sync_qparams() {
  if (!initialized()) return false;
  NoGradGuard ng;
  const Tensor s = lsq_step_value(step_, cfg_.spec);
  store_qparams(s, zero_points(s));
  return true;
}

// Data-parallel runs: each process initialised from its part of the first
// batch; the mean over processes starts every process from the same values
// (for LSQ the global batch's initial step when the parts are equal, since
// the step is a mean of |x|; for LSQ+ an approximation, docs/distributed.md).
void LearnedFakeQuantizer::average_over_processes() {
  Collective* all = collective();
  if (!all) return;
  for (auto& [name, p] : named_parameters()) {
    const std::vector<float> local = p.to_vector();
    std::vector<double> v(local.begin(), local.end());
    all->sum(v.data(), static_cast<int64_t>(v.size()));
    std::vector<float> mean(v.size());
    for (size_t i = 0; i < v.size(); ++i) mean[i] = static_cast<float>(v[i] / all->size());
    p.copy_(Tensor::from_vector(mean, p.sizes()));
  }
}

void LsqFakeQuantizer::initialize_from(const Tensor& x) {
  step_.copy_(lsq_init_steps(x, cfg_.spec).view(step_.sizes()));
}

Tensor LsqFakeQuantizer::quantize(const Tensor& x, float grad_scale) const {
  return lsq_quantize(x, step_, cfg_.spec, grad_scale);
}

LsqPlusFakeQuantizer::LsqPlusFakeQuantizer(const QuantizerConfig& cfg, int64_t channels)
    : LearnedFakeQuantizer(cfg, channels) {
  offset_ = register_parameter("offset", Tensor::zeros({channels}));
}

void LsqPlusFakeQuantizer::initialize_from(const Tensor& x) {
  const LsqPlusParams p = lsq_plus_init(x, cfg_.spec);
  step_.copy_(p.step.view(step_.sizes()));
  offset_.copy_(p.offset.view(offset_.sizes()));
}

void LsqPlusFakeQuantizer::start_from(const QParams& q) {
  LearnedFakeQuantizer::start_from(q);
  NoGradGuard ng;
  std::vector<float> beta(offset_.numel());
  for (size_t c = 0; c < beta.size(); ++c)  // beta = -z s: the affine grid's zero point
    beta[c] = -static_cast<float>(q.zero_point.data<int32_t>()[c]) * q.scale.data<float>()[c];
  offset_.copy_(Tensor::from_vector(beta, offset_.sizes()));  // wherever the offset lives
}

// v̂ = v̄ s + β  <=>  q = v̄ - round(β/s) with x̂ = (q - z) s and z = -round(β / s).
// The offset is learned freely: the zero point is clamped into the grid.
Tensor LsqPlusFakeQuantizer::zero_points(const Tensor& s) const {
  Tensor z = Tensor::zeros(zero_point_.sizes(), DType::i32);
  const std::vector<float> beta = offset_.to_vector(), step = s.to_vector();  // the offset may be on cuda
  for (int64_t c = 0; c < z.numel(); ++c) {
    const double zc = -std::nearbyint(static_cast<double>(beta[c]) / step[c]);
    z.data<int32_t>()[c] = static_cast<int32_t>(std::clamp<double>(zc, cfg_.spec.qmin(), cfg_.spec.qmax()));
  }
  return z;
}

// scale_ holds the effective step of the last forward; step and offset are
// detached: a frozen application trains neither.
Tensor LsqPlusFakeQuantizer::apply_frozen(const Tensor& x) const {
  return lsq_plus_quantize(x, scale_.to(offset_.device()), offset_.detach(), cfg_.spec, 1.f);
}

Tensor LsqPlusFakeQuantizer::quantize(const Tensor& x, float grad_scale) const {
  return lsq_plus_quantize(x, step_, offset_, cfg_.spec, grad_scale);
}

// ---------------------------------------------------------------- shared
Tensor SharedFakeQuantizer::forward(const Tensor& x) {
  if (!source_->fake_quant_enabled()) return x;
  return source_->apply_frozen(x);
}

}  // namespace qat::quant
