#include "core/ops/loss.h"

#include <cmath>

#include "core/ops/common.h"

namespace qat {

namespace {

void check_scores(const Tensor& x, const char* op) {
  detail::check_f32(x, op, "input");
  QAT_CHECK(x.dim() == 2 && x.size(1) >= 1, op, ": expected scores (N,C), got ", x.sizes());
}

void check_target(const Tensor& x, const Tensor& target, const char* op) {
  QAT_CHECK(target.defined() && target.dtype() == DType::i32, op, ": expected int32 targets");
  QAT_CHECK(target.dim() == 1 && target.size(0) == x.size(0), op, ": expected targets (", x.size(0),
            ") for scores ", x.sizes(), ", got ", target.sizes());
  Tensor t = target.contiguous();
  const int32_t* pt = t.data<int32_t>();
  for (int64_t i = 0; i < t.numel(); ++i)
    QAT_CHECK(pt[i] >= 0 && pt[i] < x.size(1), op, ": target ", pt[i], " at index ", i, " out of range [0, ",
              x.size(1), ")");
}

// Row-wise log-softmax of contiguous (N,C) into out.
void log_softmax_rows(const float* x, int64_t n, int64_t c, float* out) {
#pragma omp parallel for if (n * c > detail::kParallelGrain) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float* r = x + i * c;
    float mx = r[0];
    for (int64_t j = 1; j < c; ++j) mx = std::max(mx, r[j]);
    double s = 0;
    for (int64_t j = 0; j < c; ++j) s += std::exp(static_cast<double>(r[j] - mx));
    const float lse = mx + static_cast<float>(std::log(s));
    for (int64_t j = 0; j < c; ++j) out[i * c + j] = r[j] - lse;
  }
}

}  // namespace

Tensor log_softmax(const Tensor& x) {
  check_scores(x, "log_softmax");
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
    for (int64_t i = 0; i < n; ++i) {
      double s = 0;
      for (int64_t j = 0; j < c; ++j) s += pg[i * c + j];
      for (int64_t j = 0; j < c; ++j) pd[i * c + j] = pg[i * c + j] - std::exp(py[i * c + j]) * static_cast<float>(s);
    }
    return TensorList{dx};
  });
}

Tensor nll_loss(const Tensor& logp, const Tensor& target) {
  check_scores(logp, "nll_loss");
  check_target(logp, target, "nll_loss");
  Tensor lc = logp.contiguous(), tc = target.contiguous();
  const int64_t n = logp.size(0), c = logp.size(1);
  const float* pl = lc.data<float>();
  const int32_t* pt = tc.data<int32_t>();
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s -= pl[i * c + pt[i]];
  Tensor out = Tensor::scalar(static_cast<float>(s / static_cast<double>(n)));
  return record(out, "nll_loss", {&logp}, [st = Saved(tc), n, c](const Tensor& g, const NeedGrad&) {
    const int32_t* pt = st.get("nll_loss").data<int32_t>();
    Tensor dx = Tensor::zeros({n, c});
    const float v = -g.item() / static_cast<float>(n);
    for (int64_t i = 0; i < n; ++i) dx.data<float>()[i * c + pt[i]] = v;
    return TensorList{dx};
  });
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, float label_smoothing) {
  QAT_PROFILE("cross_entropy");
  check_scores(logits, "cross_entropy");
  check_target(logits, target, "cross_entropy");
  QAT_CHECK(label_smoothing >= 0.f && label_smoothing <= 1.f, "cross_entropy: label_smoothing must be in [0, 1], got ",
            label_smoothing);
  Tensor xc = logits.contiguous(), tc = target.contiguous();
  const int64_t n = logits.size(0), c = logits.size(1);
  Tensor logp = Tensor::empty({n, c});
  float* pl = logp.data<float>();
  log_softmax_rows(xc.data<float>(), n, c, pl);
  const int32_t* pt = tc.data<int32_t>();
  const float eps = label_smoothing, on = 1.f - eps, off = eps / static_cast<float>(c);
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    double row_sum = 0;
    for (int64_t j = 0; j < c; ++j) row_sum += pl[i * c + j];
    total += -on * pl[i * c + pt[i]] - off * row_sum;
  }
  Tensor out = Tensor::scalar(static_cast<float>(total / static_cast<double>(n)));
  return record(out, "cross_entropy", {&logits},
                [sl = Saved(logp), st = Saved(tc), on, off](const Tensor& g, const NeedGrad&) {
                  const Tensor& lp = sl.get("cross_entropy");
                  const int32_t* pt = st.get("cross_entropy").data<int32_t>();
                  const int64_t n = lp.size(0), c = lp.size(1);
                  const float scale = g.item() / static_cast<float>(n);
                  Tensor dx = Tensor::empty({n, c});
                  const float* pl = lp.data<float>();
                  float* pd = dx.data<float>();
                  for (int64_t i = 0; i < n; ++i)
                    for (int64_t j = 0; j < c; ++j) {
                      const float q = (j == pt[i] ? on : 0.f) + off;
                      pd[i * c + j] = scale * (std::exp(pl[i * c + j]) - q);
                    }
                  return TensorList{dx};
                });
}

}  // namespace qat
