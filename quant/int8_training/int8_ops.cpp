#include "quant/int8_training/int8_ops.h"

#include <algorithm>
#include <cmath>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/profiler.h"
#include "quant/int8_training/int8_cpu.h"
#include "quant/int8_training/int8_layer.h"
#include "quant/int8_training/int8_math.h"
#if QAT_WITH_CUDA
#include "quant/int8_training/cuda_twins.h"
#endif

namespace qat::quant {

namespace {

using int8_cpu::Geom;
using int8_cpu::int_forward_who;
using int8_cpu::packed_weight_grad;

// The CPU stages' saved state before the forward: the geometry, the grid and
// the weight's integers `wi`.
int8_cpu::CpuStages::Saved cpu_saved(const ActGrid& grid, std::shared_ptr<const QuantCodes> wi, const Geom& g,
                                     const std::string& who) {
  QAT_CHECK(wi->rows == g.o && wi->cols == g.K(), who, ": weight codes of ", wi->rows, " x ", wi->cols,
            " for a weight of ", g.o, " x ", g.K());
  int8_cpu::CpuStages::Saved sv;
  sv.g = g, sv.grid = grid, sv.wi = std::move(wi);
  return sv;
}

// The layer on integer weights `wi`. w: the autograd input the weight
// gradient goes to: wq itself (wi recovered from it), or the unquantized
// weight (wi from forward_codes: the clipped STE applied to its gradient).
Tensor int8_layer(const Tensor& x, const ActGrid& grid, const Tensor& w, std::shared_ptr<const QuantCodes> wi,
                  bool apply_ste, const Tensor& bias, const Geom& g, const std::shared_ptr<Int8GradState>& state) {
  int8_cpu::CpuStages::Saved sv = cpu_saved(grid, std::move(wi), g, int8_training_who(state->layer()));
  sv.apply_ste = apply_ste;
  sv.keep_rows = packed_weight_grad(g) && w.requires_grad();
  return int8_steps::layer(int8_cpu::CpuStages{}, std::move(sv), x, w, bias, state);
}
void check_k(const Geom& g, const std::string& who) {
  QAT_CHECK(g.K() <= (int64_t{1} << 16) && g.o <= (int64_t{1} << 16), who, ": K = ", g.K(), " and ", g.o,
            " outputs must be <= 65536 (int32 accumulators)");
}

Geom conv_geom(const Tensor& x, const Tensor& w, const Conv2dParams& p, const std::string& who) {
  const bool depthwise = p.groups > 1 && x.dim() == 4 && p.groups == x.size(1) && w.dim() == 4 &&
                         w.size(0) == p.groups && w.size(1) == 1;
  QAT_CHECK(x.dim() == 4 && w.dim() == 4 && (depthwise || (p.groups == 1 && x.size(1) == w.size(1))), who,
            ": expected input (N,C,H,W) and weight (O,C,KH,KW) with groups 1, or a depthwise weight (C,1,KH,KW) "
            "with groups C, got ",
            x.sizes(), " and ", w.sizes(), " groups ", p.groups);
  Geom g{x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2), w.size(3), 0,          0,
         p.stride_h, p.stride_w, p.pad_h,   p.pad_w,   p.dil_h,   p.dil_w,   p.groups};
  g.oh = conv_out_size(g.h, g.kh, p.stride_h, p.pad_h, p.dil_h, "int8_conv2d");
  g.ow = conv_out_size(g.w, g.kw, p.stride_w, p.pad_w, p.dil_w, "int8_conv2d");
  check_k(g, who);
  return g;
}

// A linear layer is a 1x1 convolution of an (N, K, 1, 1) image.
Geom linear_geom(const Tensor& x, const Tensor& w, const std::string& who) {
  QAT_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1), who,
            ": expected input (N,K) and weight (O,K), got ", x.sizes(), " and ", w.sizes());
  Geom g{x.size(0), x.size(1), 1, 1, w.size(0), 1, 1, 1, 1, 1, 1, 0, 0, 1, 1};
  check_k(g, who);
  return g;
}

// The device layers' operands: all on x's device.
void check_one_device(const Tensor& x, const Tensor& wq, const Tensor& bias, const std::string& who) {
  QAT_CHECK(wq.device() == x.device() && (!bias.defined() || bias.device() == x.device()), who,
            ": the input is on ", device_name(x.device()), ", the weight on ", device_name(wq.device()),
            bias.defined() ? std::string(" and the bias on ") + device_name(bias.device()) : std::string());
#if !QAT_WITH_CUDA
  QAT_FAIL(who, ": the input is on ", device_name(x.device()), " but this qat was built without CUDA");
#endif
}

// The layer on the device (x on cuda): the CUDA twin (int8_device.h), after
// the CPU op's checks.
Tensor on_device(const Tensor& x, const ActGrid& grid, const Tensor& wq, const Tensor& w_scale, const Tensor& bias,
                 const Geom& g, const std::shared_ptr<Int8GradState>& state) {
  const std::string who = int8_training_who(state->layer());
  check_one_device(x, wq, bias, who);
#if QAT_WITH_CUDA
  // The padding's integer is checked after the weight and the input, as the CPU op does.
  return cuda_twin::int8_layer(x, grid, wq, w_scale, bias, g, state);
#else
  return Tensor();  // (check_one_device refused it)
#endif
}

// The codes form on the device: the layers pass the fake-quantized weight
// there (qat_modules.cpp: weight_codes), so this is a caller's mistake.
void refuse_codes_on_device(const Tensor& x, const std::string& layer) {
  QAT_CHECK(x.device() == Device::cpu, int8_training_who(layer),
            ": weight codes are a CPU form; on cuda pass the fake-quantized weight and its scales");
}

std::shared_ptr<const QuantCodes> integers_of(const Tensor& wq, const Tensor& w_scale, const Geom& g,
                                              const std::string& who) {
  return int8_cpu::weight_integers(wq.contiguous(), w_scale.contiguous(), g.o, g.K(), who);
}

// Y of the integer forward (Note [integer forward of QAT layers]) on x's device.
Tensor integer_forward_values(const Tensor& x, const ActGrid& grid, const Tensor& wq, const Tensor& w_scale,
                              const Tensor& bias, const Geom& g, const std::string& who) {
  if (x.device() == Device::cpu) {
    int8_cpu::CpuStages s;
    int8_cpu::CpuStages::Saved sv = cpu_saved(grid, integers_of(wq, w_scale, g, who), g, who);
    sv.forward_only = true;
    return int8_steps::forward(s, sv, x, bias, who);
  }
  check_one_device(x, wq, bias, who);
#if QAT_WITH_CUDA
  return cuda_twin::int_forward_values(x, grid, wq, w_scale, bias, g, who);
#else
  return Tensor();  // (check_one_device refused it)
#endif
}

}  // namespace

std::string int8_training_who(const std::string& layer) { return "int8 training: layer " + layer; }

void check_weight_scales(const std::string& who, int64_t scales, int64_t out_channels) {
  QAT_CHECK(scales == out_channels || scales == 1, who, ": ", scales, " weight scales for ", out_channels,
            " output channels");
}

void fail_input_off_grid(const std::string& who, float value, int64_t index, const ActGrid& grid) {
  QAT_FAIL(who, ": input value ", value, " at index ", index, " is not on its quantizer's grid (scale ", grid.scale,
           ", zero point ", grid.zero, ", ", grid.levels,
           " levels); only quantizers, max pooling, dropout, flatten and ReLU may sit between a quantizer and an "
           "integer layer");
}

void fail_weight_row_off_grid(const std::string& who, const float* row, int64_t k, int64_t o, double s) {
  for (int64_t i = 0; i < k; ++i) {
    const double t = static_cast<double>(row[i]) / s, q = std::nearbyint(t);
    QAT_CHECK(std::abs(t - q) <= 1e-3 && q >= -128 && q <= 127, who, ": weight ", row[i], " (row ", o,
              ") is not on its int8 grid of scale ", s);
  }
  // (off in float only: at the 1e-3 edge, or 1 / s not finite)
  QAT_FAIL(who, ": row ", o, " of the weight is not on its int8 grid of scale ", s);
}

void set_int8_training_kernel(std::optional<GemmKernel> kernel) {
  QAT_CHECK(!kernel || gemm_kernel_runs_here(*kernel), "set_int8_training_kernel: this CPU cannot run ",
            kernel ? enum_name(*kernel) : "");
  int8_cpu::kernel_override() = kernel;
}

Tensor int8_conv2d(const Tensor& x, const ActGrid& grid, const Tensor& wq, const Tensor& w_scale, const Tensor& bias,
                   const Conv2dParams& p, const std::shared_ptr<Int8GradState>& state) {
  QAT_PROFILE("int8_conv2d");
  const std::string who = int8_training_who(state->layer());
  const Geom g = conv_geom(x, wq, p, who);
  if (x.device() != Device::cpu) return on_device(x, grid, wq, w_scale, bias, g, state);
  return int8_layer(x, grid, wq, integers_of(wq, w_scale, g, who), false, bias, g, state);
}

Tensor int8_conv2d(const Tensor& x, const ActGrid& grid, const Tensor& w, std::shared_ptr<const QuantCodes> codes,
                   const Tensor& bias, const Conv2dParams& p, const std::shared_ptr<Int8GradState>& state) {
  QAT_PROFILE("int8_conv2d");
  refuse_codes_on_device(x, state->layer());
  const Geom g = conv_geom(x, w, p, int8_training_who(state->layer()));
  return int8_layer(x, grid, w, std::move(codes), true, bias, g, state);
}

Tensor int8_linear(const Tensor& x, const ActGrid& grid, const Tensor& wq, const Tensor& w_scale, const Tensor& bias,
                   const std::shared_ptr<Int8GradState>& state) {
  QAT_PROFILE("int8_linear");
  const std::string who = int8_training_who(state->layer());
  const Geom g = linear_geom(x, wq, who);
  Tensor y = x.device() != Device::cpu
                 ? on_device(x, grid, wq, w_scale, bias, g, state)
                 : int8_layer(x, grid, wq, integers_of(wq, w_scale, g, who), false, bias, g, state);
  return reshape(y, {g.n, g.o});
}

Tensor int8_linear(const Tensor& x, const ActGrid& grid, const Tensor& w, std::shared_ptr<const QuantCodes> codes,
                   const Tensor& bias, const std::shared_ptr<Int8GradState>& state) {
  QAT_PROFILE("int8_linear");
  refuse_codes_on_device(x, state->layer());
  const Geom g = linear_geom(x, w, int8_training_who(state->layer()));
  Tensor y = int8_layer(x, grid, w, std::move(codes), true, bias, g, state);
  return reshape(y, {g.n, g.o});
}

Tensor int_forward_conv2d(const Tensor& x, const ActGrid& grid, const Tensor& wq, const Tensor& w_scale,
                          const Tensor& bias, const Conv2dParams& p, const std::string& layer) {
  QAT_PROFILE("int_forward_conv2d");
  const std::string who = int_forward_who(layer);
  const Geom g = conv_geom(x, wq, p, who);
  Tensor y = integer_forward_values(x, grid, wq, w_scale, bias, g, who);
  return record(y, "int_forward_conv2d", {&x, &wq, &bias},
                [sx = Saved(x.contiguous()), sw = Saved(wq.contiguous()), p](const Tensor& gy, const NeedGrad& need) {
                  return conv2d_backward(gy, sx.get("int_forward_conv2d"), sw.get("int_forward_conv2d"), p, need);
                });
}

Tensor int_forward_linear(const Tensor& x, const ActGrid& grid, const Tensor& wq, const Tensor& w_scale,
                          const Tensor& bias, const std::string& layer) {
  QAT_PROFILE("int_forward_linear");
  const std::string who = int_forward_who(layer);
  const Geom g = linear_geom(x, wq, who);
  Tensor y = reshape(integer_forward_values(x, grid, wq, w_scale, bias, g, who), {g.n, g.o}).detach();
  const bool need_x = any_requires_grad({&x}), need_w = any_requires_grad({&wq});
  return record(y, "int_forward_linear", {&x, &wq, &bias},
                [sx = Saved(need_w ? x.contiguous() : Tensor()), sw = Saved(need_x ? wq.contiguous() : Tensor())](
                    const Tensor& gy, const NeedGrad& need) {
                  return linear_backward(gy, need[1] ? sx.get("int_forward_linear") : Tensor(),
                                         need[0] ? sw.get("int_forward_linear") : Tensor(), need);
                });
}

}  // namespace qat::quant
