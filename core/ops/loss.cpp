#include "core/ops/loss.h"

#include <cmath>
#include <vector>

#include "core/ops/common.h"
#include "core/ops/loss_math.h"
#if QAT_WITH_CUDA
#include "core/ops/cuda_twins.h"
#endif

namespace qat {

namespace {

void check_scores(const Tensor& x, const char* op) {
  detail::check_f32_dims_any_device(x, 2, op, "scores (N,C)");
  QAT_CHECK(x.size(1) >= 1, op, ": expected scores (N,C), got ", x.sizes());
}

// The targets' range is checked on the host: device targets are copied here
// (N int32 values; the copy waits for the work queued before it).
void check_target(const Tensor& x, const Tensor& target, const char* op) {
  QAT_CHECK(target.defined() && target.dtype() == DType::i32, op, ": expected int32 targets");
  QAT_CHECK(target.dim() == 1 && target.size(0) == x.size(0), op, ": expected targets (", x.size(0),
            ") for scores ", x.sizes(), ", got ", target.sizes());
  detail::check_same_device(op, {{"input", &x}, {"target", &target}});
  const Tensor t = target.device() == Device::cpu ? target.contiguous() : target.to(Device::cpu);
  const int32_t* pt = t.data<int32_t>();
  for (int64_t i = 0; i < t.numel(); ++i)
    QAT_CHECK(pt[i] >= 0 && pt[i] < x.size(1), op, ": target ", pt[i], " at index ", i, " out of range [0, ",
              x.size(1), ")");
}

// Row-wise log-softmax of contiguous (N,C) into out.
void log_softmax_rows(const float* x, int64_t n, int64_t c, float* out) {
#pragma omp parallel for if (n * c > detail::kParallelGrain) schedule(static)
  for (int64_t i = 0; i < n; ++i) op_math::log_softmax_row(x + i * c, c, out + i * c);
}

}  // namespace

Tensor log_softmax(const Tensor& x) {
  check_scores(x, "log_softmax");
#if QAT_WITH_CUDA
  if (x.device() == Device::cuda) return cuda_twin::log_softmax(x);  // core/ops/loss.cu
#endif
  Tensor xc = x.contiguous();
  const int64_t n = x.size(0), c = x.size(1);
  Tensor out = Tensor::empty({n, c});
  log_softmax_rows(xc.data<float>(), n, c, out.data<float>());
  return record(out, "log_softmax", {&x}, [sy = Saved(out)](const Tensor& g, const NeedGrad&) {
    const Tensor& y = sy.get("log_softmax");
    Tensor gc = g.contiguous();
    const int64_t n = y.size(0), c = y.size(1);
    Tensor dx = Tensor::empty({n, c});
    const float* py = y.data<float>();
    const float* pg = gc.data<float>();
    float* pd = dx.data<float>();
    for (int64_t i = 0; i < n; ++i) op_math::log_softmax_backward_row(py + i * c, pg + i * c, c, pd + i * c);
    return TensorList{dx};
  });
}

Tensor nll_loss(const Tensor& logp, const Tensor& target) {
  check_scores(logp, "nll_loss");
  check_target(logp, target, "nll_loss");
#if QAT_WITH_CUDA
  if (logp.device() == Device::cuda) return cuda_twin::nll_loss(logp, target);  // core/ops/loss.cu
#endif
  Tensor lc = logp.contiguous(), tc = target.contiguous();
  const int64_t n = logp.size(0), c = logp.size(1);
  Tensor out = Tensor::scalar(op_math::nll_loss_value(lc.data<float>(), tc.data<int32_t>(), n, c));
  return record(out, "nll_loss", {&logp}, [st = Saved(tc), n, c](const Tensor& g, const NeedGrad&) {
    const int32_t* pt = st.get("nll_loss").data<int32_t>();
    Tensor dx = Tensor::empty({n, c});
    const float gv = g.item();
    float* pd = dx.data<float>();
    for (int64_t i = 0; i < n * c; ++i) pd[i] = op_math::nll_loss_grad_at(i, pt, n, c, gv);
    return TensorList{dx};
  });
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, float label_smoothing) {
  QAT_PROFILE("cross_entropy");
  check_scores(logits, "cross_entropy");
  check_target(logits, target, "cross_entropy");
  QAT_CHECK(label_smoothing >= 0.f && label_smoothing <= 1.f, "cross_entropy: label_smoothing must be in [0, 1], got ",
            label_smoothing);
#if QAT_WITH_CUDA
  if (logits.device() == Device::cuda) return cuda_twin::cross_entropy(logits, target, label_smoothing);  // loss.cu
#endif
  Tensor xc = logits.contiguous(), tc = target.contiguous();
  const int64_t n = logits.size(0), c = logits.size(1);
  Tensor logp = Tensor::empty({n, c});
  float* pl = logp.data<float>();
  log_softmax_rows(xc.data<float>(), n, c, pl);
  const int32_t* pt = tc.data<int32_t>();
  const float eps = label_smoothing, on = 1.f - eps, off = eps / static_cast<float>(c);
  std::vector<double> rows(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) rows[i] = op_math::cross_entropy_row(pl + i * c, c, pt[i], on, off);
  Tensor out = Tensor::scalar(op_math::mean_in_order(rows.data(), n));
  return record(out, "cross_entropy", {&logits},
                [sl = Saved(logp), st = Saved(tc), on, off](const Tensor& g, const NeedGrad&) {
                  const Tensor& lp = sl.get("cross_entropy");
                  const int32_t* pt = st.get("cross_entropy").data<int32_t>();
                  const int64_t n = lp.size(0), c = lp.size(1);
                  const float gv = g.item();
                  Tensor dx = Tensor::empty({n, c});
                  const float* pl = lp.data<float>();
                  float* pd = dx.data<float>();
                  for (int64_t i = 0; i < n * c; ++i)
                    pd[i] = op_math::cross_entropy_grad_at(i, pl, pt, n, c, on, off, gv);
                  return TensorList{dx};
                });
}

}  // namespace qat
