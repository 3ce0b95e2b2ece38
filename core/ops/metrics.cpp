#include "core/ops/metrics.h"

#include <algorithm>
#include <numeric>

#include "core/ops/common.h"

namespace qat {

Tensor topk_indices(const Tensor& scores, int64_t k) {
  detail::check_f32(scores, "topk", "scores");
  QAT_CHECK(scores.dim() == 2, "topk: expected scores (N,C), got ", scores.sizes());
  const int64_t n = scores.size(0), c = scores.size(1);
  QAT_CHECK(k >= 1 && k <= c, "topk: k=", k, " out of range for ", c, " classes");
  Tensor sc = scores.contiguous();
  const float* ps = sc.data<float>();
  Tensor out = Tensor::empty({n, k}, DType::i32);
  int32_t* po = out.data<int32_t>();
  std::vector<int32_t> idx(c);
  for (int64_t i = 0; i < n; ++i) {
    std::iota(idx.begin(), idx.end(), 0);
    const float* r = ps + i * c;
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [r](int32_t a, int32_t b) { return r[a] > r[b] || (r[a] == r[b] && a < b); });
    std::copy(idx.begin(), idx.begin() + k, po + i * k);
  }
  return out;
}

Tensor argmax(const Tensor& scores) { return topk_indices(scores, 1).view({scores.size(0)}); }

int64_t topk_correct(const Tensor& scores, const Tensor& target, int64_t k) {
  Tensor top = topk_indices(scores, k);
  QAT_CHECK(target.dtype() == DType::i32 && target.dim() == 1 && target.size(0) == scores.size(0),
            "topk_correct: expected int32 targets (", scores.size(0), "), got ", target.sizes());
  Tensor tc = target.contiguous();
  const int32_t* pt = tc.data<int32_t>();
  const int32_t* pk = top.data<int32_t>();
  int64_t correct = 0;
  for (int64_t i = 0; i < scores.size(0); ++i)
    for (int64_t j = 0; j < k; ++j)
      if (pk[i * k + j] == pt[i]) {
        ++correct;
        break;
      }
  return correct;
}

}  // namespace qat
