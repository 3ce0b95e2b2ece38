#pragma once
// Note [channel layout]
// Every per-channel quantization kernel (observers, fake quant, LSQ) sees its
// contiguous tensor as (outer, channels, inner) around the channel axis; a
// per-tensor one as (1, 1, numel). Row r = (o, c) is `inner` contiguous
// elements of channel c = r % channels. Two ways to split the work:
//   runs:   each row cut into pieces of at most `piece` elements; the
//           (row, piece) pairs are the parallel work items, so that one big
//           per-tensor quantizer gets its parallelism from the pieces.
//   blocks: when the channels are innermost (inner == 1, channels > 1, e.g.
//           (N, C) activations) a row is one element, so items are blocks of
//           whole outer rows of `channels` elements instead (about `piece`
//           elements each), vectorised across channels.
// A kernel whose per-channel partial sums are rounded per piece fixes its
// piece size: it decides the result bits.
#include <algorithm>
#include <cstdint>

#include "core/error.h"
#include "core/tensor.h"

namespace qat::quant {

struct ChannelLayout {
  int64_t outer = 1, channels = 1, inner = 1;

  // x: any shape; per_channel: axis must be one of x's dims.
  static ChannelLayout of(const Tensor& x, bool per_channel, int64_t axis) {
    ChannelLayout l;
    if (!per_channel) {
      l.inner = x.numel();
      return l;
    }
    QAT_CHECK(axis >= 0 && axis < x.dim(), "channel axis ", axis, " out of range for shape ", x.sizes());
    for (int64_t d = 0; d < axis; ++d) l.outer *= x.size(d);
    l.channels = x.size(axis);
    for (int64_t d = axis + 1; d < x.dim(); ++d) l.inner *= x.size(d);
    return l;
  }

  int64_t numel() const { return outer * channels * inner; }
  int64_t rows() const { return outer * channels; }
  bool channels_innermost() const { return inner == 1 && channels > 1; }

  // runs: item -> (first element, length, channel)
  struct Run {
    int64_t offset, length, channel;
  };
  int64_t pieces_per_row(int64_t piece) const { return (inner + piece - 1) / piece; }
  int64_t run_count(int64_t piece) const { return rows() * pieces_per_row(piece); }
  Run run(int64_t item, int64_t piece) const {
    const int64_t per_row = pieces_per_row(piece);
    const int64_t row = item / per_row, start = (item % per_row) * piece;
    return {row * inner + start, std::min(piece, inner - start), row % channels};
  }

  // blocks (channels innermost): item -> outer rows [first, last)
  int64_t rows_per_block(int64_t piece) const { return std::max<int64_t>(1, piece / channels); }
  int64_t block_count(int64_t piece) const { return (outer + rows_per_block(piece) - 1) / rows_per_block(piece); }
  std::pair<int64_t, int64_t> block(int64_t item, int64_t piece) const {
    const int64_t per = rows_per_block(piece);
    return {item * per, std::min(outer, (item + 1) * per)};
  }
};

}  // namespace qat::quant
