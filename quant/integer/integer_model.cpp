#include "quant/integer/integer_model.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/profiler.h"
#include "quant/integer/int_kernels.h"

namespace qat::quant {

namespace {

constexpr const char* kOpNames[] = {"quantize_input", "conv", "linear", "max_pool", "adaptive_avg_pool", "flatten",
                                    "relu"};

void check_u8(const IntLayer& l, const Tensor& x, int64_t dims) {
  QAT_CHECK(x.dtype() == DType::u8 && x.dim() == dims && x.is_contiguous(), "integer layer '", l.name, "' (",
            int_op_name(l.op), "): expects a contiguous ", dims, "-d uint8 tensor, got ", dtype_name(x.dtype()), " with ",
            x.dim(), " dims");
}

bool any_nonzero(const Tensor& t) {
  const int32_t* p = t.data<int32_t>();
  return std::any_of(p, p + t.numel(), [](int32_t v) { return v != 0; });
}

// The output stage shared by conv and linear: zero-point corrections, then
// requantization to u8 or (last layer) dequantization to float.
struct OutputStage {
  const IntLayer& l;
  int64_t K;
  std::vector<int32_t> bias;  // bias - z_x Σw + K z_x z_w
  bool weight_zero_points, weight_frac = false;
  std::vector<int64_t> frac_m0;  // round(f_w[c] M0[c]) (fractional weight zero points)
  std::vector<float> dequant;  // s_x s_w[c] (dequantize only)
  RequantParams rq{};
  RequantPlan plan;

  OutputStage(const IntLayer& layer, int64_t k) : l(layer), K(k) {
    const int64_t C = l.out_channels;
    const int32_t zx = l.in.zero_point + l.in.offset();
    const int32_t* zw = l.weight_zero_point.data<int32_t>();
    weight_zero_points = any_nonzero(l.weight_zero_point);
    bias.resize(C);
    for (int64_t c = 0; c < C; ++c)
      bias[c] = l.bias.data<int32_t>()[c] - zx * l.weight_row_sums[c] + static_cast<int32_t>(K) * zx * zw[c];
    if (l.dequantize) {
      dequant.resize(C);
      for (int64_t c = 0; c < C; ++c)
        dequant[c] = static_cast<float>(static_cast<double>(l.in.scale) * l.weight_scale.data<float>()[c]);
    } else {
      const int32_t off = l.out.offset();
      rq = {bias.data(), l.multiplier.data<int32_t>(), l.shift.data<int32_t>(), l.bias_residual.data<int32_t>(),
            l.out.zero_point + off,
            (l.relu ? std::max(l.out.qmin(), l.out.zero_point) : l.out.qmin()) + off, l.out.qmax() + off};
      plan = make_requant_plan(rq, C);
    }
    const float* fw = l.weight_zero_frac.data<float>();
    weight_frac = std::any_of(fw, fw + C, [](float f) { return f != 0.f; });
    if (weight_frac && !l.dequantize) {
      frac_m0.resize(C);
      for (int64_t c = 0; c < C; ++c) frac_m0[c] = std::llround(static_cast<double>(fw[c]) * rq.m0[c]);
    }
  }

  // Rows of accumulators (C each) for the input rows A (K each): zero-point
  // corrections, then the output: u8 rows to `out` (C per row), or float
  // logits to fout[r * fstep + c * fstride].
  void finish(int32_t* acc, const uint8_t* A, int64_t rows, uint8_t* out, float* fout, int64_t fstep,
              int64_t fstride) const {
    if (!weight_zero_points && !weight_frac && !l.dequantize) return requantize_rows(acc, rows, plan, out);
    const int64_t C = l.out_channels;
    const int32_t* zw = l.weight_zero_point.data<int32_t>();
    const int32_t zx = l.in.zero_point + l.in.offset();
    for (int64_t r = 0; r < rows; ++r) {
      int32_t* a = acc + r * C;
      int64_t centred = 0;  // Σ_k (x_k - z_x)
      if (weight_zero_points || weight_frac) {
        int64_t xs = 0;
        for (int64_t k = 0; k < K; ++k) xs += A[r * K + k];
        if (weight_zero_points)
          for (int64_t c = 0; c < C; ++c) a[c] -= zw[c] * static_cast<int32_t>(xs);
        centred = xs - K * zx;
      }
      if (l.dequantize) {
        const float* fw = l.weight_zero_frac.data<float>();
        for (int64_t c = 0; c < C; ++c)
          fout[r * fstep + c * fstride] =
              (static_cast<float>(a[c] + bias[c]) - fw[c] * static_cast<float>(centred)) * dequant[c];
      } else if (weight_frac) {
        for (int64_t c = 0; c < C; ++c) {
          const int64_t extra = rq.residual[c] - frac_m0[c] * centred;
          const int32_t v = rq.out_zero + requantize_value64(a[c] + bias[c], rq.m0[c], rq.shift[c], extra);
          out[r * C + c] = static_cast<uint8_t>(std::clamp(v, rq.lo, rq.hi));
        }
      } else {
        requantize_rows(a, 1, plan, out + r * C);
      }
    }
  }
};

// acc (M x out_channels) = rows (M x K) . weights^T; the packed broadcast
// kernel where the layer has one (same integers as every other kernel).
void gemm(const IntLayer& l, GemmKernel kernel, int64_t M, const uint8_t* rows, int32_t* acc) {
  const int64_t K = l.weight.numel() / l.out_channels;
  if (kernel == GemmKernel::avx512_vnni && !l.packed_weight.empty())
    return gemm_u8s8s32_packed(M, rows, K, l.packed_weight, acc, l.out_channels);
  gemm_u8s8s32(kernel, M, l.out_channels, K, rows, K, l.weight.data<int8_t>(), K, acc, l.out_channels);
}

Tensor run_conv(const IntLayer& l, const Tensor& x, GemmKernel kernel) {
  check_u8(l, x, 4);
  const int64_t N = x.size(0), H = x.size(1), W = x.size(2), C = x.size(3);
  QAT_CHECK(C == l.in_channels, "integer conv '", l.name, "': input has ", C, " channels, the layer expects ",
            l.in_channels);
  const auto& p = l.conv;
  const int64_t OH = conv_out_size(H, l.kernel_h, p.stride_h, p.pad_h, p.dil_h, "integer conv");
  const int64_t OW = conv_out_size(W, l.kernel_w, p.stride_w, p.pad_w, p.dil_w, "integer conv");
  const int64_t K = l.kernel_h * l.kernel_w * C, P = OH * OW, CO = l.out_channels;
  const Im2RowShape shape{H, W, C, l.kernel_h, l.kernel_w, p.stride_h, p.stride_w, p.pad_h, p.pad_w,
                          p.dil_h, p.dil_w, OH, OW};
  const bool direct = l.kernel_h == 1 && l.kernel_w == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_h == 0 &&
                      p.pad_w == 0;
  const OutputStage stage(l, K);
  const uint8_t pad = static_cast<uint8_t>(l.in.zero_point + l.in.offset());
  Tensor y = l.dequantize ? Tensor::empty({N, CO, OH, OW}, DType::f32) : Tensor::empty({N, OH, OW, CO}, DType::u8);
  const uint8_t* xd = x.data<uint8_t>();
  // Whole images per thread when the batch can keep every thread busy (the
  // GEMM inside then runs on one thread); otherwise the GEMM is parallel.
  const bool per_image_threads = N >= omp_get_max_threads() && N > 1;
  // Output positions in chunks whose patches and accumulators stay in L2
  // (a whole 224 px conv1 image is ~2 MB of them).
  const int64_t chunk = direct ? P : std::clamp<int64_t>((256 * 1024) / (K + 4 * CO), 16, P);
  auto one_image = [&](int64_t n, std::vector<uint8_t>& rows, std::vector<int32_t>& acc) {
    const uint8_t* img = xd + n * H * W * C;
    for (int64_t p0 = 0; p0 < P; p0 += chunk) {
      const int64_t np = std::min(chunk, P - p0);
      if (!direct) im2row_u8_range(img, shape, pad, p0, np, rows.data());
      const uint8_t* A = direct ? img + p0 * K : rows.data();
      gemm(l, kernel, np, A, acc.data());
      if (l.dequantize) stage.finish(acc.data(), A, np, nullptr, y.data<float>() + n * CO * P + p0, 1, P);
      else stage.finish(acc.data(), A, np, y.data<uint8_t>() + (n * P + p0) * CO, nullptr, 0, 0);
    }
  };

  // No enclosing parallel region in the per-GEMM case: the GEMM's own team
  // must not be nested inside one (that cost 20x at batch 1).
  if (!per_image_threads) {
    std::vector<uint8_t> rows(direct ? 0 : static_cast<size_t>(chunk * K));
    std::vector<int32_t> acc(static_cast<size_t>(chunk * CO));
    for (int64_t n = 0; n < N; ++n) one_image(n, rows, acc);
    return y;
  }
#pragma omp parallel
  {
    std::vector<uint8_t> rows(direct ? 0 : static_cast<size_t>(chunk * K));
    std::vector<int32_t> acc(static_cast<size_t>(chunk * CO));
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) one_image(n, rows, acc);
  }
  return y;
}

Tensor run_linear(const IntLayer& l, const Tensor& x, GemmKernel kernel) {
  check_u8(l, x, 2);
  const int64_t N = x.size(0), K = x.size(1), CO = l.out_channels;
  QAT_CHECK(K == l.in_channels, "integer linear '", l.name, "': input has ", K, " features, the layer expects ",
            l.in_channels);
  const OutputStage stage(l, K);
  std::vector<int32_t> acc(static_cast<size_t>(N * CO));
  gemm(l, kernel, N, x.data<uint8_t>(), acc.data());
  Tensor y = l.dequantize ? Tensor::empty({N, CO}, DType::f32) : Tensor::empty({N, CO}, DType::u8);
  if (l.dequantize) stage.finish(acc.data(), x.data<uint8_t>(), N, nullptr, y.data<float>(), CO, 1);
  else stage.finish(acc.data(), x.data<uint8_t>(), N, y.data<uint8_t>(), nullptr, 0, 0);
  return y;
}

Tensor run_max_pool(const IntLayer& l, const Tensor& x) {
  check_u8(l, x, 4);
  const int64_t N = x.size(0), H = x.size(1), W = x.size(2), C = x.size(3);
  const auto& p = l.pool;
  const int64_t OH = conv_out_size(H, p.kernel_h, p.stride_h, p.pad_h, 1, "integer max_pool");
  const int64_t OW = conv_out_size(W, p.kernel_w, p.stride_w, p.pad_w, 1, "integer max_pool");
  Tensor y = Tensor::empty({N, OH, OW, C}, DType::u8);
  max_pool_u8(x.data<uint8_t>(), {N, H, W, C, p.kernel_h, p.kernel_w, p.stride_h, p.stride_w, p.pad_h, p.pad_w, OH, OW},
              y.data<uint8_t>());
  return y;
}

Tensor run_flatten(const IntLayer& l, const Tensor& x) {
  check_u8(l, x, 4);
  const int64_t N = x.size(0), H = x.size(1), W = x.size(2), C = x.size(3);
  Tensor y = Tensor::empty({N, C * H * W}, DType::u8);
  const uint8_t* s = x.data<uint8_t>();
  uint8_t* d = y.data<uint8_t>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t p = 0; p < H * W; ++p)
      for (int64_t c = 0; c < C; ++c) d[(n * C + c) * H * W + p] = s[(n * H * W + p) * C + c];
  return y;
}

}  // namespace

const char* int_op_name(IntOp op) { return kOpNames[static_cast<int>(op)]; }

IntOp int_op_from_name(const std::string& name) {
  for (int i = 0; i < static_cast<int>(std::size(kOpNames)); ++i)
    if (name == kOpNames[i]) return static_cast<IntOp>(i);
  throw Error("unknown integer layer kind '" + name +
              "' (known: quantize_input, conv, linear, max_pool, adaptive_avg_pool, flatten, relu)");
}

void IntLayer::finalize() {
  if (op == IntOp::adaptive_avg_pool) {
    QAT_CHECK(out.scale == in.scale && out.zero_point == in.zero_point && out.zero_frac == 0.f, "layer '", name,
              "': average pooling keeps its input's grid (less the zero point's fraction)");
    round_q16 = static_cast<int32_t>(std::lround((0.5 - static_cast<double>(in.zero_frac)) * 65536.0));
  }
  if (op != IntOp::conv && op != IntOp::linear) return;
  const int64_t K = kernel_h * kernel_w * in_channels;
  const Shape wshape = op == IntOp::conv ? Shape{out_channels, kernel_h, kernel_w, in_channels}
                                         : Shape{out_channels, in_channels};
  auto check = [&](const Tensor& t, const char* field, DType dt, const Shape& shape) {
    QAT_CHECK(t.defined() && t.dtype() == dt && t.sizes() == shape, "layer '", name, "': ", field, " must be ",
              dtype_name(dt), " of shape ", shape_str(shape), ", got ",
              t.defined() ? std::string(dtype_name(t.dtype())) + " " + shape_str(t.sizes()) : std::string("nothing"));
  };
  check(weight, "weight", DType::i8, wshape);
  check(weight_scale, "weight_scale", DType::f32, {out_channels});
  check(weight_zero_point, "weight_zero_point", DType::i32, {out_channels});
  if (!weight_zero_frac.defined()) weight_zero_frac = Tensor::zeros({out_channels});
  check(weight_zero_frac, "weight_zero_frac", DType::f32, {out_channels});
  for (int64_t c = 0; c < out_channels; ++c)
    QAT_CHECK(std::abs(weight_zero_frac.data<float>()[c]) <= 0.5f, "layer '", name, "': weight_zero_frac of channel ",
              c, " is ", weight_zero_frac.data<float>()[c], ", outside [-1/2, 1/2]");
  check(bias, "bias", DType::i32, {out_channels});
  if (!dequantize) {
    check(multiplier, "multiplier", DType::i32, {out_channels});
    check(shift, "shift", DType::i32, {out_channels});
    check(bias_residual, "bias_residual", DType::i32, {out_channels});
    for (int64_t c = 0; c < out_channels; ++c) {
      const int32_t m = multiplier.data<int32_t>()[c], s = shift.data<int32_t>()[c];
      const int32_t r = bias_residual.data<int32_t>()[c];
      QAT_CHECK((m == 0 || m >= (1 << 30)) && s >= -31 && s <= 31, "layer '", name, "': channel ", c,
                " has an invalid fixed-point multiplier (m0 ", m, ", shift ", s, "): m0 must be in [2^30, 2^31)");
      QAT_CHECK(std::abs(static_cast<int64_t>(r)) <= m / 2 + 1, "layer '", name, "': channel ", c, ": bias residual ",
                r, " exceeds half the multiplier ", m);
    }
  }
  QAT_CHECK(conv.groups == 1, "layer '", name, "': grouped convolution has no integer kernel (groups ", conv.groups, ")");
  // |acc| <= K * 255 * 255 ((x - z_x) and (w - z_w) within 255) must stay
  // below 2^30 so that adding the bias never overflows int32.
  QAT_CHECK(K <= 16384, "layer '", name, "': ", K, " products per output could overflow the int32 accumulator (at most 16384)");
  packed_weight = can_use_packed_vnni(out_channels) ? pack_b_vnni(weight.data<int8_t>(), out_channels, K, K) : PackedB{};
  weight_row_sums.assign(static_cast<size_t>(out_channels), 0);
  const int8_t* w = weight.data<int8_t>();
  for (int64_t c = 0; c < out_channels; ++c)
    for (int64_t k = 0; k < K; ++k) weight_row_sums[c] += w[c * K + k];
}

Tensor IntegerModel::run_layer(const IntLayer& l, const Tensor& x) const {
  QAT_PROFILE(l.name.c_str());
  switch (l.op) {
    case IntOp::quantize_input: {
      QAT_CHECK(x.dtype() == DType::f32 && x.dim() == 4, "integer model input: expects float images (N, C, H, W), got ",
                dtype_name(x.dtype()), " with ", x.dim(), " dims");
      const Tensor xc = x.contiguous();
      const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
      Tensor y = Tensor::empty({N, H, W, C}, DType::u8);
      quantize_input(xc.data<float>(), N, C, H, W, l.out.scale, l.out.zero_point, l.out.zero_frac, l.out.qmin(),
                     l.out.qmax(), l.out.offset(), y.data<uint8_t>());
      return y;
    }
    case IntOp::conv: return run_conv(l, x, kernel);
    case IntOp::linear: return run_linear(l, x, kernel);
    case IntOp::max_pool: return run_max_pool(l, x);
    case IntOp::adaptive_avg_pool: {
      check_u8(l, x, 4);
      Tensor y = Tensor::empty({x.size(0), l.out_h, l.out_w, x.size(3)}, DType::u8);
      adaptive_avg_pool_u8(x.data<uint8_t>(), x.size(0), x.size(1), x.size(2), x.size(3), l.out_h, l.out_w,
                           l.round_q16, y.data<uint8_t>());
      return y;
    }
    case IntOp::flatten: return run_flatten(l, x);
    case IntOp::relu: {
      QAT_CHECK(x.dtype() == DType::u8, "integer relu '", l.name, "': expects uint8");
      Tensor y = x.clone();
      const uint8_t z = static_cast<uint8_t>(l.in.zero_point + l.in.offset());
      uint8_t* d = y.data<uint8_t>();
      for (int64_t i = 0; i < y.numel(); ++i) d[i] = std::max(d[i], z);
      return y;
    }
  }
  throw Error("integer model: unknown layer kind");
}

Tensor IntegerModel::forward(const Tensor& x) const {
  QAT_CHECK(!layers.empty() && layers.front().op == IntOp::quantize_input,
            "integer model: the first layer must be quantize_input");
  Tensor h = x;
  for (const auto& l : layers) h = run_layer(l, h);
  return h;
}

std::vector<Tensor> IntegerModel::forward_trace(const Tensor& x) const {
  std::vector<Tensor> out;
  Tensor h = x;
  for (const auto& l : layers) out.push_back(h = run_layer(l, h));
  return out;
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
  QAT_CHECK(src.dtype() == DType::i8 && src.is_contiguous() && src.dim() == 4, "weight layout: expects a contiguous 4-d int8 tensor");
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
  return permute_inner(t, {t.size(0), KH, KW, I}, I, KH, KW, [&](int8_t* d, const int8_t* s, int64_t i, int64_t h,
                                                                  int64_t w) { d[(h * KW + w) * I + i] = s[(i * KH + h) * KW + w]; });
}

Tensor weight_oihw_from_ohwi(const Tensor& t) {
  const int64_t KH = t.size(1), KW = t.size(2), I = t.size(3);
  return permute_inner(t, {t.size(0), I, KH, KW}, I, KH, KW, [&](int8_t* d, const int8_t* s, int64_t i, int64_t h,
                                                                  int64_t w) { d[(i * KH + h) * KW + w] = s[(h * KW + w) * I + i]; });
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
