#pragma once
// The observers' per-channel min/max as the two per-index bodies of the
// slots split (channel_geometry.h), shared by the CUDA twin of reduce_minmax
// (minmax.cu) and the host test that runs them on every index. min/max are
// exact, so the result is the CPU scan's whatever the order (but for the
// sign of a zero). NaN never wins, as on the CPU: `v < m ? v : m` keeps m
// when v is NaN.
#include <cmath>
#include <cstdint>

#include "core/host_device.h"
#include "quant/observe/channel_geometry.h"

namespace qat::quant::minmax_math {

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

}  // namespace qat::quant::minmax_math
