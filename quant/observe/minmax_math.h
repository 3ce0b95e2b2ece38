#pragma once
// The observers' per-channel min/max as two per-index bodies, shared by the
// CUDA twin of reduce_minmax (minmax.cu) and the host test that runs them on
// every index: (1) slot s of channel c reduces the channel's elements
// s, s + S, s + 2S, ... (S slots per channel; consecutive slots read
// consecutive addresses, so a GPU warp's loads coalesce); (2) channel c folds
// its S slot partials. min/max are exact, so the result is the CPU scan's
// whatever the order (but for the sign of a zero). NaN never wins, as on the
// CPU: `v < m ? v : m` keeps m when v is NaN.
#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace qat::quant::minmax_math {

// A contiguous tensor seen as (outer, channels, inner) (Note [channel layout]).
struct ChannelGeometry {
  int64_t outer = 1, channels = 1, inner = 1;
  QAT_HOST_DEVICE int64_t per_channel() const { return outer * inner; }
  // Element k (< per_channel()) of channel c.
  QAT_HOST_DEVICE int64_t offset(int64_t c, int64_t k) const {
    return ((k / inner) * channels + c) * inner + k % inner;
  }
};

QAT_HOST_DEVICE inline void fold_min_max(float v_min, float v_max, float& mn, float& mx) {
  mn = v_min < mn ? v_min : mn;
  mx = v_max > mx ? v_max : mx;
}

// (1): +inf / -inf when the slot saw nothing but NaN (or nothing).
QAT_HOST_DEVICE inline void slot_min_max(const float* x, const ChannelGeometry& g, int64_t c, int64_t slot,
                                         int64_t slots, float& mn, float& mx) {
  mn = INFINITY;
  mx = -INFINITY;
  const int64_t n = g.per_channel();
  for (int64_t k = slot; k < n; k += slots) {
    const float v = x[g.offset(c, k)];
    fold_min_max(v, v, mn, mx);
  }
}

// (2): partials laid out [channel][slot].
QAT_HOST_DEVICE inline void channel_min_max(const float* slot_min, const float* slot_max, int64_t c, int64_t slots,
                                            float& mn, float& mx) {
  mn = INFINITY;
  mx = -INFINITY;
  for (int64_t s = 0; s < slots; ++s) fold_min_max(slot_min[c * slots + s], slot_max[c * slots + s], mn, mx);
}

// Slots per channel: enough threads to fill a GPU (about 2^20 in all), at
// most one per element, at least a warp.
inline int64_t slots_for(const ChannelGeometry& g) {
  int64_t s = (int64_t{1} << 20) / g.channels;
  if (s > g.per_channel()) s = g.per_channel();
  if (s > 65536) s = 65536;
  return s < 32 ? 32 : s;
}

}  // namespace qat::quant::minmax_math
