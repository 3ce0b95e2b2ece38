#include "quant/sim/fq_channel_rows.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "core/autograd.h"
#include "core/ops/common.h"
#include "core/profiler.h"

namespace qat::quant {

namespace {

// The bits of word k of a row that lie inside the row.
inline unsigned word_tail(const RowBits& m, int64_t k) {
  return m.len - 16 * k >= 16 ? 0xFFFFu : (1u << (m.len - 16 * k)) - 1;
}

// The words of rows [r0, r1) with a stopped element (a bit 0 within the
// row): their indices r * words + k appended to `out`.
void stopped_words(const RowBits& m, int64_t r0, int64_t r1, std::vector<int64_t>& out) {
  for (int64_t r = r0; r < r1; ++r) {
    const uint16_t* w = m.bits.data() + r * m.words;
    for (int64_t k = 0; k < m.words; ++k) {
      if (k + 4 <= m.words - 1) {  // four full words at once: almost always all set
        uint64_t four;
        std::memcpy(&four, w + k, sizeof four);
        if (four == ~uint64_t{0}) {
          k += 3;
          continue;
        }
      }
      if ((~unsigned{w[k]} & word_tail(m, k)) != 0) out.push_back(r * m.words + k);
    }
  }
}

// Streamed stores for a weight beyond the last-level cache.
constexpr int64_t kStreamBytes = int64_t{64} << 20;  // above any 2-core share of an L3

}  // namespace

// The clipped STE on a bit mask: dx = dy with the stopped elements times 0
// (NaN or inf times 0 is NaN, as dy * mask). A weight row has few stopped
// elements (its extremes, more while an averaging observer lags the
// weights), each a cache miss in a gradient far larger than the caches: the
// words holding them are gathered a block of rows at a time and their lines
// fetched together before they are written, not one miss after another.
Tensor with_ste_bits(Tensor out, const Tensor& x, std::shared_ptr<const RowBits> m) {
  return record(out, "fake_quantize", {&x}, [m](const Tensor& g, const NeedGrad&) {
    QAT_PROFILE("fake_quantize.backward");
    Tensor dx = exclusively_owned(g) && g.is_contiguous() ? g : g.contiguous().clone();
    float* pd = dx.data<float>();
    constexpr int64_t kBlock = 64;  // rows
    const int64_t blocks = (m->rows + kBlock - 1) / kBlock;
#pragma omp parallel if (m->rows * m->len > detail::kParallelGrain)
    {
      std::vector<int64_t> at;
#pragma omp for schedule(static)
      for (int64_t b = 0; b < blocks; ++b) {
        at.clear();
        stopped_words(*m, b * kBlock, std::min(m->rows, (b + 1) * kBlock), at);
        // Word wi = r * words + k covers elements r * len + 16 k onwards.
        auto first = [&](int64_t wi) { return pd + (wi / m->words) * m->len + 16 * (wi % m->words); };
        for (const int64_t wi : at) __builtin_prefetch(first(wi), 1);
        for (const int64_t wi : at) {
          float* base = first(wi);
          for (unsigned stop = ~unsigned{m->bits[wi]} & word_tail(*m, wi % m->words); stop != 0; stop &= stop - 1)
            base[std::countr_zero(stop)] *= 0.f;
        }
      }
    }
    return TensorList{dx};
  });
}

ChannelRows::ChannelRows(const QuantSpec& spec, const Shape& sizes, bool mask)
    : spec_(spec),
      rows_(sizes.at(0)),
      len_(rows_ > 0 ? shape_numel(sizes) / rows_ : 0),
      qmin_(static_cast<float>(spec.qmin())),
      qmax_(static_cast<float>(spec.qmax())),
      out_(Tensor::empty(sizes)),
      q_{Tensor::empty({rows_}), Tensor::empty({rows_}, DType::i32)},
      bits_(mask ? std::make_shared<RowBits>(rows_, len_) : nullptr),
      // Rows that all start on a cache line (Tensor storage is 64-byte aligned).
      stream_(rows_ * len_ * 4 > kStreamBytes && len_ % 16 == 0 &&
              reinterpret_cast<uintptr_t>(out_.data<float>()) % 64 == 0),
      kernel_(best_fq_rows_kernel()) {}

void ChannelRows::row(int64_t c, const float* row, float lo, float hi) {
  float sc;
  int32_t zp;
  qparams_from_range(spec_, lo, hi, sc, zp);
  q_.scale.data<float>()[c] = sc;
  q_.zero_point.data<int32_t>()[c] = zp;
  const float z = static_cast<float>(zp);
  float* y = out_.data<float>() + c * len_;
  if (bits_)
    fq_row_bits(kernel_, stream_, row, y, len_, {sc, 1.0f / sc, z, qmin_, qmax_}, bits_->bits.data() + c * bits_->words);
  else
    fq_span<false>(row, y, nullptr, len_, sc, 1.0f / sc, z, qmin_, qmax_);
}

Tensor ChannelRows::finish(const Tensor& x, SteKind ste) {
  const bool need_mask = ste == SteKind::clipped && any_requires_grad({&x});
  QAT_CHECK(!need_mask || bits_, "ChannelRows::finish: the clipped STE needs the mask, which was not kept");
  if (!need_mask) return with_ste_backward(out_, x, Tensor(), ste);
  return with_ste_bits(out_, x, bits_);
}

}  // namespace qat::quant
