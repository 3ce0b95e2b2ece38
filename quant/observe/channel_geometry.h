#pragma once
// Note [channel layout] in a form device code can use: a contiguous tensor
// seen as (outer, channels, inner), and the "slots" split of the per-channel
// reductions of the CUDA twins (observers' min/max, LSQ's step sums): slot s
// of channel c visits the channel's elements s, s + S, s + 2S, ... (S slots
// per channel; consecutive slots read consecutive addresses, so a GPU warp's
// loads coalesce), then one fold per channel adds up its S partials. The
// bodies are per-index functions that host tests run over every index.
#include <cstdint>

#include "core/host_device.h"
#include "core/ops/math.h"

namespace qat::quant {

struct ChannelGeometry {
  int64_t outer = 1, channels = 1, inner = 1;
  QAT_HOST_DEVICE int64_t per_channel() const { return outer * inner; }
  // Element k (< per_channel()) of channel c.
  QAT_HOST_DEVICE int64_t offset(int64_t c, int64_t k) const { return op_math::channel_element(c, k, channels, inner); }
  // The channel of element i.
  QAT_HOST_DEVICE int64_t channel_of(int64_t i) const { return op_math::channel_of(i, channels, inner); }
};

// Slots per channel: enough threads to fill a GPU (about 2^20 in all), at
// most one per element, at least a warp.
inline int64_t slots_for(const ChannelGeometry& g) {
  int64_t s = (int64_t{1} << 20) / g.channels;
  if (s > g.per_channel()) s = g.per_channel();
  if (s > 65536) s = 65536;
  return s < 32 ? 32 : s;
}

}  // namespace qat::quant
