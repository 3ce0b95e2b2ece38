// INT8 training's depthwise layers on the CPU: the per-index bodies of
// int8_math.h (Note [INT8 training of depthwise layers]) on the OpenMP
// threads, with the constants computed as the dense layers compute them.
//
// Note [INT8 training of depthwise layers]
// A depthwise convolution (groups = C = O, one KH x KW window per channel)
// has K = KH KW products per output: its three GEMMs of Note [INT8 training
// GEMMs] are per-channel dot products, which a dense GEMM would run on a
// block-diagonal weight C times larger. They run as per-index bodies
// (int8_math.h: DepthwiseForward, DepthwiseWeightGrad, DepthwiseInputGrad),
// written once for the CPU here and every executor (int8_device.h), on the
// same integers and with the same double expressions as the dense layers,
// so every value is again one rounding of the exact result:
//   forward   Y[n][c][p]  = float(s_x s_w[c] (sum_t u W[c][t] - zx sum_t W[c][t])) + b[c]
//   weight    dWq[c][t]   = float(s_G s_x (sum_(n,p) G[c][m] (u - 128) + (128 - zx) gsum[c]))
//   input     dXq[n][c][y][x] = float(s_Gx sum G_x[m][c] W[c][t]) over the (position, tap)
//             pairs whose window reads that pixel
// (t a tap (ki, kj), m = (n, p), u the input integer the tap reads, zx
// where it reads the padding). The sums are exact in int32 (forward: at most
// KH KW 255 128) and int64 (the gradients). The gradient quantization and
// the clips are the dense layers' (they see only dY and s_w).
#include <vector>

#include "core/profiler.h"
#include "quant/int8_training/int8_cpu.h"

namespace qat::quant::int8_cpu {

namespace {
// Always on the threads (CpuExec::each runs short loops serially): an index
// of the weight gradient sums over all N x OH x OW outputs of its channel.
template <class Body>
void each(int64_t n, const Body& body) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) body(i);
}
}  // namespace

Tensor depthwise_forward(const std::vector<uint8_t>& u, uint8_t pad, const ActGrid& grid, const QuantCodes& wi,
                         const Tensor& bias, const Geom& g) {
  QAT_PROFILE("int8_train.depthwise_forward");
  std::vector<double> s(static_cast<size_t>(g.c)), corr(static_cast<size_t>(g.c));
  for (int64_t c = 0; c < g.c; ++c) {
    s[c] = static_cast<double>(grid.scale) * static_cast<double>(wi.scale[c]);
    corr[c] = grid.zero * static_cast<double>(wi.rowsum[c]);
  }
  Tensor y = Tensor::empty({g.n, g.c, g.oh, g.ow});
  each(y.numel(), int8_math::DepthwiseForward{u.data(), wi.q.get(), s.data(), corr.data(),
                                              bias.defined() ? bias.data<float>() : nullptr, y.data<float>(), g, pad});
  return y;
}

Tensor depthwise_weight_grad(const std::vector<uint8_t>& u, uint8_t pad, const ActGrid& grid, const int8_t* G,
                             const int64_t* gsum, float scale_g, const Geom& g) {
  QAT_PROFILE("int8_train.depthwise_weight_grad");
  std::vector<double> corr(static_cast<size_t>(g.c));
  for (int64_t c = 0; c < g.c; ++c) corr[c] = (128.0 - grid.zero) * static_cast<double>(gsum[c]);
  Tensor dw = Tensor::empty({g.c, g.K()});
  each(dw.numel(), int8_math::DepthwiseWeightGrad{u.data(), G, corr.data(),
                                                  static_cast<double>(scale_g) * static_cast<double>(grid.scale),
                                                  dw.data<float>(), g, pad});
  return dw;
}

Tensor depthwise_input_grad(const int8_t* Gx, float scale_gx, const QuantCodes& wi, const Geom& g) {
  QAT_PROFILE("int8_train.depthwise_input_grad");
  Tensor dx = Tensor::empty({g.n, g.c, g.h, g.w});
  each(dx.numel(), int8_math::DepthwiseInputGrad{Gx, wi.q.get(), dx.data<float>(), g, static_cast<double>(scale_gx)});
  return dx;
}

}  // namespace qat::quant::int8_cpu
