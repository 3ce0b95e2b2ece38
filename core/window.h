#pragma once
// The geometry of sliding-window ops (convolution, pooling): their parameters
// and output sizes. No tensors, no autograd: shared by the float ops in
// core/ops/ and the integer kernels of quant/integer/.
#include <cstdint>

#include "core/host_device.h"

namespace qat {

// Window i of adaptive pooling from `in` values to `out`: [begin, end)
// (PyTorch's rule: floor(i in / out) to ceil((i + 1) in / out)). Host and
// device (the CUDA pools, core/ops/pool_math.h).
struct AdaptiveWindow {
  int64_t begin, end;
  QAT_HOST_DEVICE int64_t size() const { return end - begin; }
};
QAT_HOST_DEVICE inline AdaptiveWindow adaptive_window(int64_t i, int64_t in, int64_t out) {
  return {i * in / out, ((i + 1) * in + out - 1) / out};
}

struct Conv2dParams {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dil_h = 1, dil_w = 1;
  int64_t groups = 1;
};

struct Pool2dParams {
  int64_t kernel_h, kernel_w;
  int64_t stride_h, stride_w;
  int64_t pad_h = 0, pad_w = 0;
};

// Output size along one dimension; every size product checked, an error
// naming `op` when the geometry is invalid or the output would be < 1.
int64_t conv_out_size(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil, const char* op);

}  // namespace qat
