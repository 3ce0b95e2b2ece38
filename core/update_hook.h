#pragma once
// Note [update hooks]
// A parameter (a leaf tensor on the CPU) may carry a RowUpdateHook
// (Tensor::set_update_hook). An optimizer that can update a parameter a block
// of rows at a time (rows: its first dimension) hands each block to the hook
// right after writing it, while the block is still in cache, so that work the
// next forward would do on the new values (a weight's fake quantization: a
// read of the whole weight) is done in the same pass over memory
// (quant/sim/weight_lookahead.h). The optimizer's arithmetic is the same with
// or without a hook.
//
// Order, for one step of one parameter p:
//   begin(p): false and nothing more is called (the optimizer updates p as if
//             there were no hook);
//   rows(r0, r1, data): rows [r0, r1) of p hold their new values, data points
//             at row r0 (row length p.numel() / p.size(0)); called from the
//             optimizer's threads, concurrently for disjoint blocks, and must
//             not throw;
//   end(p):   after the last block, once p's version counter has been bumped.
#include <cstdint>

#include "core/tensor.h"

namespace qat {

class RowUpdateHook {
 public:
  virtual ~RowUpdateHook() = default;
  virtual bool begin(const Tensor& p) = 0;
  virtual void rows(int64_t r0, int64_t r1, const float* data) = 0;
  virtual void end(const Tensor& p) = 0;
};

}  // namespace qat
