#include "core/ops/dropout.h"

#include "core/ops/common.h"
#include "core/ops/dropout_math.h"
#if QAT_WITH_CUDA
#include "core/ops/cuda_twins.h"
#endif

namespace qat {

namespace {

// x times the mask of Note [dropout mask] (0 or scale per element).
Tensor apply_dropout_mask(const Tensor& x, uint64_t key, float p, float scale) {
  Tensor out = Tensor::empty(x.sizes());
  const float* px = x.data<float>();
  float* po = out.data<float>();
  const int64_t n = x.numel();
#pragma omp parallel for if (n > detail::kParallelGrain) schedule(static)
  for (int64_t i = 0; i < n; ++i) po[i] = px[i] * op_math::dropout_mask_at(key, i, p, scale);
  return out;
}

}  // namespace

Tensor dropout(const Tensor& x, float p, bool training, Generator& gen) {
  QAT_PROFILE("dropout");
  detail::check_f32_any_device(x, "dropout", "input");
  QAT_CHECK(p >= 0.f && p <= 1.f, "dropout: probability must be in [0, 1], got ", p);
  if (!training || p == 0.f) return x;
#if QAT_WITH_CUDA
  // The same mask rule on the device (Note [dropout mask]).
  if (x.device() == Device::cuda) return cuda_twin::dropout(x, p, training, gen);  // core/ops/dropout.cu
#endif
  const float scale = p < 1.f ? 1.f / (1.f - p) : 0.f;
  // One draw of gen, the mask a function of (key, index): Note [dropout
  // mask]; the backward recomputes it (nothing saved).
  const uint64_t key = gen.next_u64();
  Tensor out = apply_dropout_mask(x.contiguous(), key, p, scale);
  return record(out, "dropout", {&x}, [key, p, scale](const Tensor& g, const NeedGrad&) {
    return TensorList{apply_dropout_mask(g.contiguous(), key, p, scale)};
  });
}

}  // namespace qat
