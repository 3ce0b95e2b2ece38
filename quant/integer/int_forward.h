#pragma once
// The integer model's layers written once over an executor: the CPU
// (cpu_exec.h: IntegerModel::forward), the GPU (integer_model.cu:
// CudaIntegerModel) and the host tests' emulation of the GPU's launches
// (tests/host_exec.h) run this code.
//
// Note [integer ops over executors]
// An op's generic code (run_generic_layer) is written once against an
// executor's two primitives, per-index bodies and a tiled GEMM of operand
// sources into an output stage, with the per-element rules of int_math.h.
// An executor may replace an op's generic code by a tuned kernel of its own
// (tuned_kernel): the CPU does where its kernels are faster (the GEMM ops on
// packed weights and AMX / VNNI / AVX2, the pools, the input quantization:
// IntOpDef::cpu_kernel), and runs the generic code for the rest (ReLU,
// flatten, and any new op until it earns a kernel). Every tuned kernel
// equals the generic code bit for bit (tests/quant/integer/test_int_forward.cpp).
//
// An executor provides:
//   static constexpr Device device;                where its tensors live
//   template <class T> static T* ptr(const Tensor&); their memory
//   template <class Body> void each(int64_t n, const Body& body);   body(i) for i < n
//   template <class A, class B, class Stage>
//   void gemm(const A&, const B&, int64_t m, int64_t n, int64_t k, const Stage&);
//     the tiled GEMM of int_math.h (Note [device int8 GEMM]) of operand
//     sources a (m rows) and b (n rows) over k into the stage
// and, found by argument-dependent lookup, may overload
//   Tensor tuned_kernel(Exec&, const IntLayer&, const Tensor& x)
//     a layer's output from a kernel of its own, or an undefined tensor.
// The layers take the activations' layouts of the CPU ops (int_kernels.h):
// NHWC u8 images, (N, features) u8 rows, float logits at the end.
#include <vector>

#include "core/tensor.h"
#include "quant/integer/int_math.h"
#include "quant/integer/integer_model.h"
#include "quant/integer/ops/common.h"

namespace qat::quant {

// One conv / linear layer's constants for int_math::OutputStage, on one device.
struct LayerConstants {
  Tensor weight;  // i8 (out_channels, K), the CPU layout (conv: (O, KH, KW, I))
  Tensor bias, m0, shift, residual, weight_zero;  // i32 (out_channels); weight_zero undefined when all 0
  Tensor frac_m0;                                 // int64 as i32 pairs (2 out_channels), or undefined
  Tensor frac_w, dequant;                         // f32 (out_channels), dequantize only
  bool row_sums = false;                          // a term needs Σ_k x per row
  int64_t k = 0;
  int32_t zx = 0, out_zero = 0, lo = 0, hi = 0;
};

// The constants of a conv / linear layer (a finalized one), on `device`.
LayerConstants layer_constants(const IntLayer& l, Device device);
// Those of every conv / linear layer of the model, in order.
std::vector<LayerConstants> model_constants(const IntegerModel& m, Device device);

namespace int_kernels {

struct QuantizeInput {
  const float* x;
  uint8_t* y;
  int_math::QuantizeInputGeometry g;
  QAT_HOST_DEVICE void operator()(int64_t i) const { y[i] = int_math::quantize_input_at(i, x, g); }
};
// Max pooling, or (average) adaptive average pooling.
struct U8Pool {
  const uint8_t* x;
  uint8_t* y;
  int_math::U8PoolGeometry g;
  bool average;
  QAT_HOST_DEVICE void operator()(int64_t i) const {
    y[i] = average ? int_math::adaptive_avg_pool_u8_at(i, x, g) : int_math::max_pool_u8_at(i, x, g);
  }
};
struct Flatten {
  const uint8_t* x;
  uint8_t* y;
  int64_t c, hw;
  QAT_HOST_DEVICE void operator()(int64_t i) const { y[i] = int_math::flatten_at(i, x, c, hw); }
};
struct Relu {
  const uint8_t* x;
  uint8_t* y;
  uint8_t z;
  QAT_HOST_DEVICE void operator()(int64_t i) const { y[i] = x[i] > z ? x[i] : z; }
};
template <class Rows>
struct RowSums {
  Rows rows;
  int64_t k;
  int32_t* out;
  QAT_HOST_DEVICE void operator()(int64_t r) const { out[r] = int_math::row_sum_at(r, rows, k); }
};

// Note [integer depthwise convolution]: output (r, c) of a depthwise layer
// sums its own channel's window, dot = Σ_t (x_t - 128) w[c][t] and xs =
// Σ_t x_t (outside the image: the input zero point), then takes the conv's
// output stage with xs as its input sum: the same integers as a dense
// convolution of the block-diagonal weight.
struct DepthwiseConv {
  int_math::ConvPatches patches;  // the layer's input; patches.c: its channels
  const int8_t* w;                // (C, taps)
  int64_t taps;
  int_math::OutputStage stage;
  QAT_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t c = i % patches.c, r = i / patches.c;
    int32_t dot = 0, xs = 0;
    for (int64_t t = 0; t < taps; ++t) {
      const uint8_t x = patches.at(r, t * patches.c + c);
      dot += static_cast<int32_t>(static_cast<int8_t>(x ^ 0x80u)) * w[c * taps + t];
      xs += x;
    }
    stage.finish(r, c, dot, xs);
  }
};

}  // namespace int_kernels

namespace exec_detail {

template <class Exec>
Tensor empty_on(const Shape& shape, DType dtype) {
  return Tensor::empty(shape, dtype, Exec::device);
}

// The output stage over the layer's constants; `out` or `fout` by dequantize.
template <class Exec>
int_math::OutputStage output_stage(const LayerConstants& k, const int32_t* row_sums, int64_t positions, uint8_t* out,
                                   float* fout) {
  const bool deq = k.dequant.defined();
  auto p32 = [](const Tensor& t) { return t.defined() ? Exec::template ptr<int32_t>(t) : nullptr; };
  return {p32(k.bias),
          deq ? nullptr : p32(k.m0),
          deq ? nullptr : p32(k.shift),
          deq ? nullptr : p32(k.residual),
          p32(k.weight_zero),
          k.frac_m0.defined() ? reinterpret_cast<const int64_t*>(Exec::template ptr<int32_t>(k.frac_m0)) : nullptr,
          deq ? Exec::template ptr<float>(k.frac_w) : nullptr,
          deq ? Exec::template ptr<float>(k.dequant) : nullptr,
          row_sums,
          out,
          fout,
          k.weight.size(0),
          k.k,
          positions,
          k.zx,
          k.out_zero,
          k.lo,
          k.hi};
}

// rows (m x k) . weights^T through the output stage; `positions` output rows
// per image (the dequantized logits are (image, channel, position)).
template <class Exec, class Rows>
Tensor matmul_layer(Exec& ex, const LayerConstants& k, const Rows& rows, int64_t m, int64_t positions,
                    const Shape& u8_shape, const Shape& f32_shape) {
  Tensor sums;
  if (k.row_sums) {
    sums = empty_on<Exec>({m}, DType::i32);
    ex.each(m, int_kernels::RowSums<Rows>{rows, k.k, Exec::template ptr<int32_t>(sums)});
  }
  const int32_t* ps = k.row_sums ? Exec::template ptr<int32_t>(sums) : nullptr;
  const bool deq = k.dequant.defined();
  Tensor y = deq ? empty_on<Exec>(f32_shape, DType::f32) : empty_on<Exec>(u8_shape, DType::u8);
  const int_math::OutputStage stage = output_stage<Exec>(k, ps, positions, deq ? nullptr : Exec::template ptr<uint8_t>(y),
                                                         deq ? Exec::template ptr<float>(y) : nullptr);
  ex.gemm(int_math::ShiftedRows<Rows>{rows}, int_math::S8Rows{Exec::template ptr<int8_t>(k.weight), k.k}, m,
          k.weight.size(0), k.k, stage);
  return y;
}

inline int_math::U8PoolGeometry pool_geometry(const Tensor& x, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                                              int64_t ph, int64_t pw, const ActShape& out) {
  return {x.size(1), x.size(2), x.size(3), kh, kw, sh, sw, ph, pw, out.h, out.w};
}

// A concat (Note [integer concat]): the images x and `more`, (N, H, W, C_k)
// u8 each, joined on channels into (N, H, W, out.c), one pass per input.
template <class Exec>
Tensor concat_layer(Exec& ex, const IntLayer& l, const Tensor& x, const MoreInputs& more, const ActShape& out) {
  QAT_CHECK(more.size() + 1 == l.concat_requant.size(), "integer layer '", l.name, "' (concat): joins ",
            l.concat_requant.size(), " inputs, got ", more.size() + 1);
  Tensor y = empty_on<Exec>({x.size(0), out.h, out.w, out.c}, DType::u8);
  int64_t offset = 0;
  for (size_t k = 0; k < l.concat_requant.size(); ++k) {
    const Tensor part = (k == 0 ? x : *more[k - 1]).contiguous();
    QAT_CHECK(part.dtype() == DType::u8 && part.dim() == 4 && part.size(0) == x.size(0) && part.size(1) == out.h &&
                  part.size(2) == out.w && offset + part.size(3) <= out.c,
              "integer layer '", l.name, "' (concat): input ", k, " is ", dtype_name(part.dtype()), " ", part.sizes(),
              ", not uint8 images of ", out.h, "x", out.w, " within ", out.c, " channels");
    ex.each(part.numel(), ConcatSlice{Exec::template ptr<uint8_t>(part), Exec::template ptr<uint8_t>(y), part.size(3),
                                      out.c, offset, l.concat_in[k] == l.out, l.concat_requant[k]});
    offset += part.size(3);
  }
  QAT_CHECK(offset == out.c, "integer layer '", l.name, "' (concat): inputs hold ", offset, " channels, expected ",
            out.c);
  return y;
}

}  // namespace exec_detail

// No tuned kernel: the generic code runs (an executor's overload says otherwise).
template <class Exec>
Tensor tuned_kernel(Exec&, const IntLayer&, const Tensor&) {
  return Tensor();
}

// The activation shape of one image of x, as infer() takes it: the float
// images (N, C, H, W) of the first layer, u8 images (N, H, W, C), or (N, features).
inline ActShape activation_shape(const IntLayer& l, const Tensor& x) {
  if (int_op_def(l.op).has(kFloatInput) && x.dim() == 4) return {x.size(2), x.size(3), x.size(1), false};
  if (x.dim() == 4) return {x.size(1), x.size(2), x.size(3), false};
  QAT_CHECK(x.dim() == 2, "integer layer '", l.name, "' (", int_op_name(l.op),
            "): expects images (N, H, W, C) or features (N, K), got ", x.dim(), " dims");
  return {1, 1, x.size(1), true};
}

// One layer's generic code on the executor: x is the layer's input on
// Exec's device (the float images for quantize_input), `out` its output
// shape per image (infer), `k` the layer's constants (conv / linear only).
template <class Exec>
Tensor run_generic_layer(Exec& ex, const IntLayer& l, const LayerConstants* k, const Tensor& x, const ActShape& out,
                         const MoreInputs& more = {}) {
  const int64_t n = x.size(0);
  switch (l.op) {
    case IntOp::add: {
      const Tensor* x2 = more.size() == 1 ? more[0] : nullptr;
      QAT_CHECK(x2 && x.dtype() == DType::u8 && x2->dtype() == DType::u8 && x.sizes() == x2->sizes(),
                "integer layer '", l.name, "' (add): expects two uint8 tensors of one shape, got ", x.sizes(), " and ",
                x2 ? x2->sizes() : Shape{});
      return integer_add(ex, x.contiguous(), x2->contiguous(), l.add);
    }
    case IntOp::concat: return exec_detail::concat_layer(ex, l, x, more, out);
    case IntOp::quantize_input: {
      Tensor y = exec_detail::empty_on<Exec>({n, out.h, out.w, out.c}, DType::u8);
      const int_math::QuantizeInputGeometry g{x.size(1),
                                              x.size(2),
                                              x.size(3),
                                              1.0f / l.out.scale,
                                              l.out.zero_frac,
                                              static_cast<float>(l.out.zero_point),
                                              static_cast<float>(l.out.qmin()),
                                              static_cast<float>(l.out.qmax()),
                                              l.out.offset()};
      ex.each(y.numel(), int_kernels::QuantizeInput{Exec::template ptr<float>(x), Exec::template ptr<uint8_t>(y), g});
      return y;
    }
    case IntOp::conv: {
      const auto& p = l.conv;
      const int_math::ConvPatches rows{Exec::template ptr<uint8_t>(x),
                                       x.size(1), x.size(2), x.size(3), l.kernel_h, l.kernel_w, p.stride_h, p.stride_w,
                                       p.pad_h, p.pad_w, p.dil_h, p.dil_w, out.h, out.w,
                                       static_cast<uint8_t>(l.in.zero_point + l.in.offset())};
      const int64_t positions = out.h * out.w;
      if (l.depthwise()) {
        Tensor y = exec_detail::empty_on<Exec>({n, out.h, out.w, out.c}, DType::u8);
        const int_math::OutputStage stage =
            exec_detail::output_stage<Exec>(*k, nullptr, positions, Exec::template ptr<uint8_t>(y), nullptr);
        ex.each(y.numel(), int_kernels::DepthwiseConv{rows, Exec::template ptr<int8_t>(k->weight), k->k, stage});
        return y;
      }
      return exec_detail::matmul_layer(ex, *k, rows, n * positions, positions, {n, out.h, out.w, out.c},
                                  {n, out.c, out.h, out.w});
    }
    case IntOp::linear: {
      const int_math::DenseRows rows{Exec::template ptr<uint8_t>(x), x.size(1)};
      return exec_detail::matmul_layer(ex, *k, rows, n, 1, {n, out.c}, {n, out.c});
    }
    case IntOp::max_pool: {
      Tensor y = exec_detail::empty_on<Exec>({n, out.h, out.w, out.c}, DType::u8);
      const auto& p = l.pool;
      ex.each(y.numel(), int_kernels::U8Pool{Exec::template ptr<uint8_t>(x), Exec::template ptr<uint8_t>(y),
                                             exec_detail::pool_geometry(x, p.kernel_h, p.kernel_w, p.stride_h,
                                                                        p.stride_w, p.pad_h, p.pad_w, out),
                                             false});
      return y;
    }
    case IntOp::adaptive_avg_pool: {
      Tensor y = exec_detail::empty_on<Exec>({n, out.h, out.w, out.c}, DType::u8);
      ex.each(y.numel(), int_kernels::U8Pool{Exec::template ptr<uint8_t>(x), Exec::template ptr<uint8_t>(y),
                                             exec_detail::pool_geometry(x, 1, 1, 1, 1, 0, 0, out), true});
      return y;
    }
    case IntOp::flatten: {
      ops::check_u8(l, x, 4);
      Tensor y = exec_detail::empty_on<Exec>({n, out.c}, DType::u8);
      ex.each(y.numel(), int_kernels::Flatten{Exec::template ptr<uint8_t>(x), Exec::template ptr<uint8_t>(y),
                                              x.size(3), x.size(1) * x.size(2)});
      return y;
    }
    case IntOp::relu: {
      QAT_CHECK(x.dtype() == DType::u8, "integer relu '", l.name, "': expects uint8");
      const Tensor xc = x.contiguous();
      Tensor y = exec_detail::empty_on<Exec>(x.sizes(), DType::u8);
      ex.each(y.numel(), int_kernels::Relu{Exec::template ptr<uint8_t>(xc), Exec::template ptr<uint8_t>(y),
                                           static_cast<uint8_t>(l.in.zero_point + l.in.offset())});
      return y;
    }
    case IntOp::count_: break;
  }
  QAT_FAIL("integer layer '", l.name, "': op ", static_cast<int>(l.op), " has no generic code");
}

// One layer on the executor: its tuned kernel there, else its generic code
// (arguments as run_generic_layer's).
template <class Exec>
Tensor run_int_layer(Exec& ex, const IntLayer& l, const LayerConstants* k, const Tensor& x, const ActShape& out,
                     const MoreInputs& more = {}) {
  if (more.empty())
    if (Tensor y = tuned_kernel(ex, l, x); y.defined()) return y;
  return run_generic_layer(ex, l, k, x, out, more);
}

// The last layer that reads each layer's output (0 where none does).
inline std::vector<size_t> last_readers(const std::vector<IntLayer>& layers) {
  std::vector<size_t> last_read(layers.size(), 0);
  for (size_t i = 0; i < layers.size(); ++i)
    for (int64_t p : layer_inputs(layers, i))
      if (p >= 0) last_read[p] = i;
  return last_read;
}

// Note [integer model graph]: layer i reads the outputs of the layers its
// `inputs` name (earlier ones), or of layer i - 1 when it names none (the
// first layer: the model's input). run(i, a, b) computes layer i from its
// first input a and the others, `more` (an add's second, a concat's). Every output is
// kept (keep_all: a trace) or dropped after its last reader.
template <class Run>
std::vector<Tensor> run_layer_graph(const std::vector<IntLayer>& layers, const Tensor& x, bool keep_all, Run run) {
  const size_t L = layers.size();
  const std::vector<size_t> last_read = last_readers(layers);
  std::vector<Tensor> outs(L);
  for (size_t i = 0; i < L; ++i) {
    const std::vector<int64_t> in = layer_inputs(layers, i);
    const Tensor& a = in[0] < 0 ? x : outs[in[0]];
    MoreInputs more;
    for (size_t k = 1; k < in.size(); ++k) more.push_back(&outs[static_cast<size_t>(in[k])]);
    outs[i] = run(i, a, more);
    if (!keep_all)
      for (int64_t p : in)
        if (p >= 0 && last_read[p] == i && static_cast<size_t>(p) + 1 < L) outs[p] = Tensor();
  }
  return outs;
}

// The whole model: float images (N, C, H, W), contiguous on Exec's device, to
// float logits there; `consts` from model_constants on that device. Every
// layer's shape is checked first (infer_shapes), naming the layer.
template <class Exec>
Tensor run_int_model(Exec& ex, const IntegerModel& m, const std::vector<LayerConstants>& consts, const Tensor& x) {
  QAT_CHECK(!m.layers.empty() && m.layers.front().op == IntOp::quantize_input,
            "integer model: the first layer must be quantize_input");
  QAT_CHECK(x.dtype() == DType::f32 && x.dim() == 4 && x.is_contiguous(),
            "integer model input: expects contiguous float images (N, C, H, W), got ", dtype_name(x.dtype()), " with ",
            x.dim(), " dims");
  const std::vector<ActShape> shapes = layer_shapes(m.layers, {x.size(2), x.size(3), x.size(1), false});
  std::vector<const LayerConstants*> k(m.layers.size(), nullptr);
  size_t next = 0;
  for (size_t i = 0; i < m.layers.size(); ++i)
    if (int_op_def(m.layers[i].op).has(kMatmul)) {
      QAT_CHECK(next < consts.size(), "integer model: no constants for layer '", m.layers[i].name, "'");
      k[i] = &consts[next++];
    }
  return run_layer_graph(m.layers, x, false, [&](size_t i, const Tensor& a, const MoreInputs& more) {
           return run_int_layer(ex, m.layers[i], k[i], a, shapes[i], more);
         }).back();
}

}  // namespace qat::quant
