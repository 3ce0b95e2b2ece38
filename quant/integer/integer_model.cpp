#include "quant/integer/integer_model.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/profiler.h"
#include "quant/integer/cpu_exec.h"
#include "quant/integer/ops/fused.h"

namespace qat::quant {

int64_t IntLayer::products_per_output() const {
  QAT_CHECK(in_channels >= 1 && out_channels >= 1 && kernel_h >= 1 && kernel_w >= 1, "layer '", name,
            "': in_channels, out_channels and kernel must be >= 1, got ", in_channels, ", ", out_channels, ", ",
            kernel_h, "x", kernel_w);
  QAT_CHECK(conv.groups >= 1 && in_channels % conv.groups == 0, "layer '", name, "': ", in_channels,
            " input channels in ", conv.groups, " groups");
  const int64_t per_group = in_channels / conv.groups;
  int64_t k = 0;
  const bool wraps = __builtin_mul_overflow(kernel_h, kernel_w, &k) || __builtin_mul_overflow(k, per_group, &k);
  QAT_CHECK(!wraps && k <= kMaxProducts, "layer '", name, "': ", kernel_h, "x", kernel_w, "x", per_group,
            " products per output could overflow the int32 accumulator (at most ", kMaxProducts, ")");
  return k;
}

void IntLayer::finalize() {
  const IntOpDef& def = int_op_def(op);
  if (def.finalize) def.finalize(*this);
}

const ActQuant& IntLayer::input_grid(size_t k) const {
  if (k == 0) return in;
  if (int_op_def(op).has(kManyInputs)) {
    QAT_CHECK(k < concat_in.size(), "layer '", name, "' (concat): no grid for input ", k);
    return concat_in[k];
  }
  return in2;
}

std::vector<int64_t> layer_inputs(const std::vector<IntLayer>& layers, size_t i) {
  const IntLayer& l = layers[i];
  const IntOpDef& def = int_op_def(l.op);
  const size_t want = def.has(kTwoInputs) ? 2 : def.has(kManyInputs) ? std::max<size_t>(l.concat_in.size(), 2) : 1;
  if (l.inputs.empty()) {
    QAT_CHECK(want == 1, "integer model: layer '", l.name, "' (", int_op_name(l.op), ") reads ",
              want == 2 ? std::string("two") : std::to_string(want), " inputs; it names none");
    return {static_cast<int64_t>(i) - 1};
  }
  QAT_CHECK(l.inputs.size() == want, "integer model: layer '", l.name, "' (", int_op_name(l.op), ") reads ", want,
            " input(s), it names ", l.inputs.size());
  for (const int64_t p : l.inputs)
    QAT_CHECK(p >= 0 && static_cast<size_t>(p) < i, "integer model: layer '", l.name, "' reads layer ", p,
              ", which does not come before it (it is layer ", i, ")");
  return l.inputs;
}

ActShape next_shape(const std::vector<IntLayer>& layers, const std::vector<ActShape>& shapes, ActShape input) {
  const size_t i = shapes.size();
  const std::vector<int64_t> in = layer_inputs(layers, i);
  auto shape_of = [&](int64_t p) { return p < 0 ? input : shapes[static_cast<size_t>(p)]; };
  ActShape a = shape_of(in[0]);
  const bool joins = int_op_def(layers[i].op).has(kManyInputs);  // on channels; an add: one shape
  for (size_t k = 1; k < in.size(); ++k) {
    const ActShape b = shape_of(in[k]);
    QAT_CHECK(a.h == b.h && a.w == b.w && (joins || a.c == b.c) && a.flat == b.flat, "integer model: layer '",
              layers[i].name, "' ", joins ? "concatenates" : "adds", " ", a.h, "x", a.w, "x", a.c, " and ", b.h, "x",
              b.w, "x", b.c, " activations");
    if (joins) a.c += b.c;
  }
  return int_op_def(layers[i].op).infer(layers[i], a);
}

std::vector<ActShape> layer_shapes(const std::vector<IntLayer>& layers, ActShape input) {
  std::vector<ActShape> shapes;
  while (shapes.size() < layers.size()) shapes.push_back(next_shape(layers, shapes, input));
  return shapes;
}

ActShape infer_shapes(const std::vector<IntLayer>& layers, ActShape input) {
  const std::vector<ActShape> shapes = layer_shapes(layers, input);
  return shapes.empty() ? input : shapes.back();
}

// On the CPU executor (Note [integer ops over executors]): the op's tuned
// kernel, which sizes its output from x, else its generic code.
namespace {
// The input shape infer() takes: x's, with a concat's other inputs' channels added.
ActShape joined_shape(const IntLayer& l, const Tensor& x, const MoreInputs& more) {
  ActShape s = activation_shape(l, x);
  if (int_op_def(l.op).has(kManyInputs))
    for (const Tensor* t : more) s.c += activation_shape(l, *t).c;
  return s;
}
}  // namespace

Tensor IntegerModel::run_layer(const IntLayer& l, const Tensor& x, const MoreInputs& more) const {
  QAT_PROFILE(l.name.c_str());
  CpuExec ex{kernel};
  if (Tensor y = more.empty() ? tuned_kernel(ex, l, x) : Tensor(); y.defined()) return y;
  return run_generic_layer(ex, l, nullptr, x, int_op_def(l.op).infer(l, joined_shape(l, x, more)), more);
}

// Note [AMX and short sums]
// An AMX tile multiplies K in groups of 64 bytes: a sum of 16, 24 or 32
// products fills a quarter to a half of each, and its rows are copied into
// zero-padded panels first. AVX-512 VNNI, which every AMX CPU has, takes
// the 1x1 convolutions with such sums faster: MobileNetV2's 16 -> 96,
// 24 -> 144 and 32 -> 16 at 128 px, batch 32, on an Emerald Rapids Xeon,
// 4.7, 1.6 and 1.8 ms on AMX against 3.9, 1.4 and 0.9 ms. Its 3x3 stem
// (K = 27, patches copied anyway) stays on AMX: 2.5 against 2.9 ms.
GemmKernel layer_gemm_kernel(const IntLayer& l, GemmKernel k) {
  const bool pointwise = l.op == IntOp::linear || (l.kernel_h == 1 && l.kernel_w == 1);
  const int64_t K = l.weight.numel() / std::max<int64_t>(l.out_channels, 1);
  if (k == GemmKernel::amx && pointwise && K < 64 && gemm_kernel_runs_here(GemmKernel::avx512_vnni))
    return GemmKernel::avx512_vnni;
  return k;
}

bool runs_packed(const IntLayer& l, GemmKernel k) {
  return !l.packed_weight.empty() && can_use_packed(k, packed_columns(l.out_channels));
}

bool ActQuant::valid() const {
  return scale > 0.f && std::isfinite(scale) && bits >= 2 && bits <= 8 && zero_point >= qmin() &&
         zero_point <= qmax() && std::abs(zero_frac) <= 0.5f;
}

GemmRanges gemm_ranges(const IntLayer& l) {
  return {l.in.qmax() + l.in.offset(), std::max(-l.weight_qmin(), l.weight_qmax())};
}

std::string IntegerModel::layer_kernel(const IntLayer& l) const {
  if (!int_op_def(l.op).has(kMatmul)) return "";
  if (l.depthwise()) return "direct depthwise";
  const GemmKernel k = layer_gemm_kernel(l, kernel);
  std::string name = gemm_kernel_name(k);
  if (runs_packed(l, k)) name += ", packed weights";
  if (runs_maddubs(k, gemm_ranges(l))) name += ", vpmaddubsw (pair sums fit int16)";
  return name;
}

namespace {
// Each layer reads the grid the one before writes (the file reader checks
// it; so does this, for a model built in code): the kernels rely on it, the
// bounded GEMM (gemm_ranges) among them.
std::string grid_str(const ActQuant& q) {
  return detail::cat(q.bits, "-bit ", q.is_signed ? "signed" : "unsigned", ", scale ", q.scale, ", zero point ",
                     q.zero_point, q.zero_frac != 0.f ? detail::cat(" + ", q.zero_frac) : std::string());
}

void check_grid_chain(const std::vector<IntLayer>& layers) {
  QAT_CHECK(!layers.empty() && int_op_def(layers.front().op).has(kFloatInput),
            "integer model: the first layer must be quantize_input");
  for (size_t i = 1; i < layers.size(); ++i) {
    const IntLayer& l = layers[i];
    QAT_CHECK(!int_op_def(l.op).has(kFloatInput), "integer model: layer ", i, " '", l.name, "' is ",
              int_op_name(l.op), ", which reads the float images: only the first layer may be");
    const std::vector<int64_t> in = layer_inputs(layers, i);
    for (size_t k = 0; k < in.size(); ++k) {
      QAT_CHECK(in[k] >= 0, "integer model: layer '", l.name, "' reads the float images: only the first layer may");
      const ActQuant& grid = l.input_grid(k);
      const IntLayer& from = layers[in[k]];
      QAT_CHECK(grid == from.out, "integer model: layer '", l.name, "' reads another grid than layer '", from.name,
                "' writes (", grid_str(grid), " vs ", grid_str(from.out), ")");
      // (the zero point is also the padding byte and the first layer's NaN)
      QAT_CHECK(grid.valid(), "integer model: layer '", l.name, "' reads an invalid grid (", grid_str(grid),
                "): the zero point must lie on the grid, bits in 2..8, scale > 0");
    }
  }
  // The last grid, read by no layer (unless the last layer dequantizes).
  const IntLayer& last = layers.back();
  QAT_CHECK(last.dequantize || last.out.valid(), "integer model: layer '", last.name, "' writes an invalid grid (",
            grid_str(last.out), ")");
}
}  // namespace

// With Note [conv then max pool]'s pairs run together: the conv's own
// output is never made (no layer reads it but the pool), the pool's is
// the pair's.
Tensor IntegerModel::forward(const Tensor& x) const {
  check_grid_chain(layers);
  const std::vector<size_t> last_read = last_readers(layers);
  const int64_t images = x.dim() == 4 ? x.size(0) : 0;
  Tensor pooled;  // the pair's output, for the pool's turn
  return run_layer_graph(layers, x, false, [&](size_t i, const Tensor& a, const MoreInputs& more) {
           if (pooled.defined()) return std::exchange(pooled, Tensor());
           if (!ops::fuses_conv_max_pool(layers, i, last_read, images)) return run_layer(layers[i], a, more);
           QAT_PROFILE(layers[i].name.c_str());  // (the pair's time under the conv's name; the pool's is none)
           pooled = ops::run_conv_max_pool(layers[i], layers[i + 1], a, kernel);
           return Tensor();
         }).back();
}

std::vector<Tensor> IntegerModel::forward_trace(const Tensor& x) const {
  check_grid_chain(layers);
  return run_layer_graph(layers, x, true, [&](size_t i, const Tensor& a, const MoreInputs& more) {
    return run_layer(layers[i], a, more);
  });
}

int64_t IntegerModel::num_classes() const {
  QAT_CHECK(!layers.empty(), "integer model: no layers");
  return layers.back().out_channels;
}

namespace {
// dst[o][b][c][d] = src[o][...] with the three inner axes permuted: `to` maps
// (i, h, w) of OIHW to the flat inner index of the destination.
template <class Index>
Tensor permute_inner(const Tensor& src, const Shape& dst_shape, int64_t I, int64_t KH, int64_t KW, Index to) {
  QAT_CHECK(src.dtype() == DType::i8 && src.is_contiguous() && src.dim() == 4,
            "weight layout: expects a contiguous 4-d int8 tensor");
  Tensor dst = Tensor::empty(dst_shape, DType::i8);
  const int8_t* s = src.data<int8_t>();
  int8_t* d = dst.data<int8_t>();
  const int64_t O = src.size(0), per = I * KH * KW;
  for (int64_t o = 0; o < O; ++o)
    for (int64_t i = 0; i < I; ++i)
      for (int64_t h = 0; h < KH; ++h)
        for (int64_t w = 0; w < KW; ++w) to(d + o * per, s + o * per, i, h, w);
  return dst;
}
}  // namespace

Tensor weight_ohwi_from_oihw(const Tensor& t) {
  const int64_t I = t.size(1), KH = t.size(2), KW = t.size(3);
  return permute_inner(t, {t.size(0), KH, KW, I}, I, KH, KW,
                       [&](int8_t* d, const int8_t* s, int64_t i, int64_t h, int64_t w) {
                         d[(h * KW + w) * I + i] = s[(i * KH + h) * KW + w];
                       });
}

Tensor weight_oihw_from_ohwi(const Tensor& t) {
  const int64_t KH = t.size(1), KW = t.size(2), I = t.size(3);
  return permute_inner(t, {t.size(0), I, KH, KW}, I, KH, KW,
                       [&](int8_t* d, const int8_t* s, int64_t i, int64_t h, int64_t w) {
                         d[(i * KH + h) * KW + w] = s[(h * KW + w) * I + i];
                       });
}

Tensor activation_values_nchw(const Tensor& s, const ActQuant& q) {
  QAT_CHECK(s.dtype() == DType::u8, "activation_values_nchw: expects uint8");
  const uint8_t* d = s.data<uint8_t>();
  if (s.dim() == 2) {
    Tensor y = Tensor::empty(s.sizes(), DType::i32);
    for (int64_t i = 0; i < s.numel(); ++i) y.data<int32_t>()[i] = d[i] - q.offset();
    return y;
  }
  const int64_t N = s.size(0), H = s.size(1), W = s.size(2), C = s.size(3);
  Tensor y = Tensor::empty({N, C, H, W}, DType::i32);
  int32_t* o = y.data<int32_t>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t p = 0; p < H * W; ++p)
      for (int64_t c = 0; c < C; ++c) o[(n * C + c) * H * W + p] = d[(n * H * W + p) * C + c] - q.offset();
  return y;
}

}  // namespace qat::quant
