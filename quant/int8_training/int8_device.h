#pragma once
// INT8 training's stages on an executor (DeviceStages; int8_layer.h runs the
// layer's steps on them, Note [INT8 training over executors]; what an
// executor provides: quant/integer/int_forward.h). The CUDA twin runs them on
// the device (int8_ops.cu), the [math] tests on the host (tests/host_exec.h)
// against the CPU's stages.
//
// Same integers as the CPU's stages, and the same float results (Note [INT8
// training doubles]): the input's integers, the weight's, the forward GEMM
// and its dequantization, G and Gx (the same counter-based noise), the
// weight gradient (its sum over m in int64), the input gradient (col2im as
// a gather, int64 sums), the bias gradient and the cosine sums (in the CPU's
// chunks and order, Note [INT8 training sums in chunks]; the tests see the
// cosine sums through the float distances the state keeps).
// What runs on the host: the gradient quantizers' state (Int8GradState), the
// clip search when one is due (on a copy of the gradient: every `period`
// steps, or every step under max clipping), the errors' messages.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "core/autograd.h"
#include "core/ops/common.h"
#include "core/tensor.h"
#include "quant/int8_training/int8_layer.h"
#include "quant/int8_training/int8_math.h"
#include "quant/int8_training/int8_ops.h"

namespace qat::quant::int8_device {

using int8_math::Geometry;

// ---------------------------------------------------------------- bodies
// Slot s of `slots` visits the elements s, s + slots, ...: per-slot partial
// results, folded on the host in slot order.
constexpr int64_t kSlots = 4096;

// The input's integers; the first element off the grid per slot (or -1).
struct InputIntegers {
  const float* x;
  uint8_t* u;
  int64_t* first_bad;
  int64_t n, slots;
  double inv, zero;
  int32_t levels;
  QAT_HOST_DEVICE void operator()(int64_t s) const {
    int64_t bad = -1;
    for (int64_t i = s; i < n; i += slots) {
      const int32_t r = int8_math::input_integer(x[i], inv, zero, levels);
      u[i] = r < 0 ? uint8_t{0} : static_cast<uint8_t>(r);
      if (r < 0 && bad < 0) bad = i;
    }
    first_bad[s] = bad;
  }
};

// Row o of the weight's integers, its sum and whether it is on the grid.
struct WeightIntegers {
  const float* wq;
  const float* scale;  // per channel, or one
  int8_t* w;
  int64_t* rowsum;
  int32_t* row_ok;
  int64_t k;
  bool per_channel;
  QAT_HOST_DEVICE void operator()(int64_t o) const {
    const float inv = 1.f / scale[per_channel ? o : 0];
    bool ok = true;
    int64_t sum = 0;
    for (int64_t kk = 0; kk < k; ++kk) {
      const int8_t v = int8_math::weight_code(wq[o * k + kk], inv, &ok);
      w[o * k + kk] = v;
      sum += v;
    }
    rowsum[o] = sum;
    row_ok[o] = ok ? 1 : 0;
  }
};

// The forward's per-channel doubles: s_x s_w[o] and z sum_k W[o][k].
struct ForwardConstants {
  const float* w_scale;
  const int64_t* rowsum;
  double* s;
  double* corr;
  float x_scale;
  double zero;
  bool per_channel;
  QAT_HOST_DEVICE void operator()(int64_t o) const {
    s[o] = static_cast<double>(x_scale) * static_cast<double>(w_scale[per_channel ? o : 0]);
    corr[o] = zero * static_cast<double>(rowsum[o]);
  }
};

// max |v| of a slot (a NaN never wins, it is flagged), and its first
// non-finite value (index and value) for the messages; v = dY, or dY s_w[o].
struct MaxAbs {
  const float* dy;
  const float* w_scale;  // null: dY itself; else per channel (dY's dim 1)
  float* max;
  int32_t* has_nan;
  int64_t* first_nonfinite;
  int64_t n, slots, channels, positions;
  QAT_HOST_DEVICE void operator()(int64_t s) const {
    float m = 0;
    int32_t nan = 0;
    int64_t first = -1;
    for (int64_t i = s; i < n; i += slots) {
      const float v = w_scale ? dy[i] * w_scale[(i / positions) % channels] : dy[i];
      const float a = fabsf(v);
      m = a > m ? a : m;
      nan |= a != a ? 1 : 0;
      if (first < 0 && !(a <= 3.402823466e38f)) first = i;  // inf or NaN
    }
    max[s] = m, has_nan[s] = nan, first_nonfinite[s] = first;
  }
};

// G (O x M): element i = o M + m.
struct QuantizeG {
  const float* dy;
  int8_t* G;
  Geometry g;
  int8_math::GradQuantizer q;
  QAT_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t M = g.M();
    G[i] = q(int8_math::grad_at(dy, g, i % M, i / M), i);
  }
};

// Gx (M x O): element i = m O + o, of dY s_w[o].
struct QuantizeGx {
  const float* dy;
  const float* w_scale;  // per channel
  int8_t* Gx;
  Geometry g;
  int8_math::GradQuantizer q;
  QAT_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t o = i % g.o, m = i / g.o;
    Gx[i] = q(int8_math::grad_at(dy, g, m, o) * w_scale[o], i);
  }
};

// Chunk c of row o of G (Note [INT8 training sums in chunks]): its cosine
// sums over m in order, and its sum of G. Index i = o chunks + c.
struct GRowStats {
  const float* dy;
  const int8_t* G;
  double* stats;  // 3 per (row, chunk): dot, qq, gg
  int64_t* gsum;  // per (row, chunk)
  Geometry g;
  int64_t chunks;
  QAT_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t M = g.M(), o = i / chunks, m0 = (i % chunks) * int8_math::kSumChunk;
    const int64_t m1 = m0 + int8_math::kSumChunk < M ? m0 + int8_math::kSumChunk : M;
    double dot = 0, qq = 0, gg = 0;
    int64_t sum = 0;
    for (int64_t m = m0; m < m1; ++m) {
      const int8_t q = G[o * M + m];
      int8_math::add_grad_stats(&dot, &qq, &gg, int8_math::grad_at(dy, g, m, o), q);
      sum += q;
    }
    stats[3 * i] = dot, stats[3 * i + 1] = qq, stats[3 * i + 2] = gg;
    gsum[i] = sum;
  }
};

// Chunk c of image n's (p, o) sequence of Gx: its cosine sums in order.
struct GxImageStats {
  const float* dy;
  const float* w_scale;
  const int8_t* Gx;
  double* stats;
  Geometry g;
  int64_t chunks;
  QAT_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t n = i / chunks, len = g.P() * g.o, j0 = (i % chunks) * int8_math::kSumChunk;
    const int64_t j1 = j0 + int8_math::kSumChunk < len ? j0 + int8_math::kSumChunk : len;
    double dot = 0, qq = 0, gg = 0;
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t m = n * g.P() + j / g.o, o = j % g.o;
      int8_math::add_grad_stats(&dot, &qq, &gg, int8_math::grad_at(dy, g, m, o) * w_scale[o], Gx[m * g.o + o]);
    }
    stats[3 * i] = dot, stats[3 * i + 1] = qq, stats[3 * i + 2] = gg;
  }
};

// (128 - z) sum_m G[o][m] (the chunks' sums added), the weight gradient's correction.
struct WeightGradCorrection {
  const int64_t* gsum;  // per (row, chunk)
  double* corr;
  double shift;  // 128 - z
  int64_t chunks;
  QAT_HOST_DEVICE void operator()(int64_t o) const {
    int64_t sum = 0;
    for (int64_t c = 0; c < chunks; ++c) sum += gsum[o * chunks + c];
    corr[o] = shift * static_cast<double>(sum);
  }
};

// The bias gradient, chunk c of channel o: the sum over its (n, p) in
// double, in order; then BiasFold adds channel o's chunks in order.
struct BiasGradChunk {
  const float* dy;
  double* part;
  Geometry g;
  int64_t chunks;
  QAT_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t o = i / chunks, M = g.M(), m0 = (i % chunks) * int8_math::kSumChunk;
    const int64_t m1 = m0 + int8_math::kSumChunk < M ? m0 + int8_math::kSumChunk : M;
    double acc = 0;
    for (int64_t m = m0; m < m1; ++m) acc += int8_math::grad_at(dy, g, m, o);
    part[i] = acc;
  }
};
struct BiasFold {
  const double* part;
  float* db;
  int64_t chunks;
  QAT_HOST_DEVICE void operator()(int64_t o) const {
    double acc = 0;
    for (int64_t c = 0; c < chunks; ++c) acc += part[o * chunks + c];
    db[o] = static_cast<float>(acc);
  }
};

struct Col2im {
  const int32_t* acc;
  float* dx;
  Geometry g;
  double s;
  QAT_HOST_DEVICE void operator()(int64_t i) const { dx[i] = int8_math::col2im_at(i, acc, g, s); }
};

// ---------------------------------------------------------------- buffers
// int64 and double arrays live in i32 tensors (no 64-bit dtype; the storage
// is 64-byte aligned on the host, 256 on the device).
template <class Exec>
Tensor words64(int64_t n) {
  return Tensor::empty({2 * std::max<int64_t>(n, 1)}, DType::i32, Exec::device);
}
template <class T, class Exec>
T* as64(const Tensor& t) {
  return reinterpret_cast<T*>(Exec::template ptr<int32_t>(t));
}
// A host copy of n 64-bit values.
template <class T>
std::vector<T> host64(const Tensor& t, int64_t n) {
  const Tensor h = t.to(Device::cpu);
  std::vector<T> v(static_cast<size_t>(n));
  std::memcpy(v.data(), h.data<int32_t>(), v.size() * sizeof(T));
  return v;
}

// Per-channel weight scales (O) on the executor's device, from (O) or (1).
template <class Exec>
Tensor channel_scales(const Tensor& w_scale, int64_t o) {
  const Tensor h = w_scale.to(Device::cpu).contiguous();
  std::vector<float> v(static_cast<size_t>(o));
  for (int64_t c = 0; c < o; ++c) v[c] = h.data<float>()[h.numel() == 1 ? 0 : c];
  return Tensor::from_vector(v, {o}).to(Exec::device);
}

// The cosine sums from per-(row, chunk) partials: each row's chunks added
// in order, then the rows in order (Note [INT8 training sums in chunks]).
inline GradQuantStats fold_stats(const std::vector<double>& s, int64_t rows, int64_t chunks) {
  GradQuantStats total;
  for (int64_t r = 0; r < rows; ++r) {
    GradQuantStats row;
    for (int64_t c = 0; c < chunks; ++c) {
      const size_t i = static_cast<size_t>(3 * (r * chunks + c));
      row.add({s[i], s[i + 1], s[i + 2]});
    }
    total.add(row);
  }
  return total;
}

// max |dY| (or |dY s_w[o]|, w_scale given) with the CPU's rules: nan_wins,
// any NaN gives NaN (max_abs: dW's tracking and every refresh); else the
// first non-finite value in index order (dX's tracking).
template <class Exec>
float max_abs_on(Exec& ex, const Tensor& dy, const Tensor* w_scale, const Geometry& g, bool nan_wins) {
  const int64_t n = dy.numel(), slots = std::min(kSlots, std::max<int64_t>(n, 1));
  Tensor max = Tensor::empty({slots}, DType::f32, Exec::device), nan = Tensor::empty({slots}, DType::i32, Exec::device);
  Tensor first = words64<Exec>(slots);
  ex.each(slots, MaxAbs{Exec::template ptr<float>(dy), w_scale ? Exec::template ptr<float>(*w_scale) : nullptr,
                        Exec::template ptr<float>(max), Exec::template ptr<int32_t>(nan), as64<int64_t, Exec>(first), n,
                        slots, g.o, g.P()});
  const std::vector<float> hm = max.to(Device::cpu).to_vector();
  const Tensor hn = nan.to(Device::cpu);
  const std::vector<int64_t> hf = host64<int64_t>(first, slots);
  if (nan_wins) {
    float m = 0;
    for (int64_t s = 0; s < slots; ++s) {
      if (hn.data<int32_t>()[s]) return std::numeric_limits<float>::quiet_NaN();
      m = std::max(m, hm[s]);
    }
    return m;
  }
  int64_t bad = -1;
  for (const int64_t f : hf)
    if (f >= 0 && (bad < 0 || f < bad)) bad = f;
  if (bad >= 0) {
    const float v = dy.view({-1}).narrow(0, bad, 1).to(Device::cpu).data<float>()[0];
    const float s = w_scale->to(Device::cpu).data<float>()[(bad / g.P()) % g.o];
    return std::fabs(v * s);
  }
  float m = 0;
  for (const float v : hm) m = std::max(m, v);
  return m;
}

// ---------------------------------------------------------------- the stages
// INT8 training's stages on an executor (int8_layer.h, Note [INT8 training
// over executors]): the bodies above on its threads, and its GEMM.
template <class Exec>
struct DeviceStages {
  Exec ex;
  static constexpr Device device = Exec::device;
  struct Saved {
    Tensor u;       // u8 (the input's integers, NCHW)
    Tensor w;       // i8 (O, K)
    Tensor rowsum;  // int64 (O): sum_k W[o][k]
    Tensor scales;  // f32 (O): s_w per channel
    ActGrid grid;
    Geometry g;
    uint8_t pad = 0;
  };
  struct Codes {
    Tensor q;     // G (O, M) or Gx (M, O)
    Tensor gsum;  // int64 per (row, chunk) of G
    int64_t chunks = 0;
    GradQuantStats stats;
  };
  template <class T>
  static T* ptr(const Tensor& t) {
    return Exec::template ptr<T>(t);
  }

  // The weight's integers (before the forward): wq (O, ...) fake-quantized
  // with w_scale (O) or (1) (either device).
  void weight_integers(Saved& sv, const Tensor& wq, const Tensor& w_scale, const std::string& who) {
    const int64_t O = sv.g.o, K = sv.g.K();
    check_weight_scales(who, w_scale.numel(), O);
    sv.scales = channel_scales<Exec>(w_scale, O);
    const Tensor wc = wq.contiguous();
    sv.w = Tensor::empty({O, K}, DType::i8, device);
    sv.rowsum = words64<Exec>(O);
    Tensor row_ok = Tensor::empty({O}, DType::i32, device);
    ex.each(O, WeightIntegers{ptr<float>(wc), ptr<float>(sv.scales), ptr<int8_t>(sv.w), as64<int64_t, Exec>(sv.rowsum),
                              ptr<int32_t>(row_ok), K, true});
    const Tensor ok = row_ok.to(Device::cpu);
    for (int64_t o = 0; o < O; ++o)
      if (!ok.data<int32_t>()[o]) {
        const std::vector<float> row = wc.view({O, K}).narrow(0, o, 1).to(Device::cpu).contiguous().to_vector();
        const Tensor scales = sv.scales.to(Device::cpu);
        fail_weight_row_off_grid(who, row.data(), K, o, scales.data<float>()[o]);
      }
  }

  void input_integers(Saved& sv, const Tensor& x, const std::string& who) {
    const Tensor xc = x.contiguous();
    const int64_t n = xc.numel(), slots = std::min(kSlots, std::max<int64_t>(n, 1));
    sv.u = Tensor::empty({n}, DType::u8, device);
    Tensor first_bad = words64<Exec>(slots);
    ex.each(slots, InputIntegers{ptr<float>(xc), ptr<uint8_t>(sv.u), as64<int64_t, Exec>(first_bad), n, slots,
                                 1.0 / static_cast<double>(sv.grid.scale), sv.grid.zero, sv.grid.levels});
    int64_t bad = -1;
    for (const int64_t b : host64<int64_t>(first_bad, slots))
      if (b >= 0 && (bad < 0 || b < bad)) bad = b;
    if (bad >= 0)
      fail_input_off_grid(who, xc.view({-1}).narrow(0, bad, 1).to(Device::cpu).data<float>()[0], bad, sv.grid);
  }

  Tensor forward_gemm(Saved& sv, const Tensor& bias) {
    const Geometry& g = sv.g;
    const int64_t O = g.o;
    Tensor s = words64<Exec>(O), corr = words64<Exec>(O);
    ex.each(O, ForwardConstants{ptr<float>(sv.scales), as64<int64_t, Exec>(sv.rowsum), as64<double, Exec>(s),
                                as64<double, Exec>(corr), sv.grid.scale, sv.grid.zero, true});
    Tensor y = Tensor::empty({g.n, O, g.oh, g.ow}, DType::f32, device);
    if (g.depthwise()) {  // Note [INT8 training of depthwise layers]
      ex.each(y.numel(), int8_math::DepthwiseForward{ptr<uint8_t>(sv.u), ptr<int8_t>(sv.w), as64<double, Exec>(s),
                                                     as64<double, Exec>(corr), bias.defined() ? ptr<float>(bias) : nullptr,
                                                     ptr<float>(y), g, sv.pad});
      return y;
    }
    const int8_math::NchwPatches patches{ptr<uint8_t>(sv.u), g, sv.pad};
    ex.gemm(int_math::ShiftedRows<int8_math::NchwPatches>{patches}, int_math::S8Rows{ptr<int8_t>(sv.w), g.K()},
            g.M(), O, g.K(),
            int8_math::ForwardStage{as64<int64_t, Exec>(sv.rowsum), as64<double, Exec>(s), as64<double, Exec>(corr),
                                    bias.defined() ? ptr<float>(bias) : nullptr, ptr<float>(y), O, g.P()});
    return y;
  }

  float max_abs(const Saved& sv, const Tensor& dy, int which, bool nan_wins) {
    return max_abs_on(ex, dy, which == 1 ? &sv.scales : nullptr, sv.g, nan_wins);
  }

  // The search on a host copy of dY (which 0) or dY s_w[o] (which 1).
  void refresh_clip(const Saved& sv, const Tensor& dy, int which, Int8GradState& st) {
    std::vector<float> v = dy.to(Device::cpu).contiguous().to_vector();
    if (which == 1) {
      const std::vector<float> s = sv.scales.to(Device::cpu).to_vector();
      for (size_t i = 0; i < v.size(); ++i) v[i] *= s[(static_cast<int64_t>(i) / sv.g.P()) % sv.g.o];
    }
    st.refresh_clip(which, v.data(), static_cast<int64_t>(v.size()));
  }

  Codes quantize(const Saved& sv, const Tensor& dy, int which, const int8_math::GradQuantizer& q) {
    const Geometry& g = sv.g;
    const int64_t O = g.o, M = g.M();
    const float* pdy = ptr<float>(dy);
    Codes c;
    c.q = Tensor::zeros({O * M}, DType::i8, device);
    if (which == 0) {
      ex.each(O * M, QuantizeG{pdy, ptr<int8_t>(c.q), g, q});
      c.chunks = int8_math::sum_chunks(M);
      Tensor rs = words64<Exec>(3 * O * c.chunks);
      c.gsum = words64<Exec>(O * c.chunks);
      ex.each(O * c.chunks, GRowStats{pdy, ptr<int8_t>(c.q), as64<double, Exec>(rs), as64<int64_t, Exec>(c.gsum), g,
                                      c.chunks});
      c.stats = fold_stats(host64<double>(rs, 3 * O * c.chunks), O, c.chunks);
    } else {
      const float* ps = ptr<float>(sv.scales);
      ex.each(M * O, QuantizeGx{pdy, ps, ptr<int8_t>(c.q), g, q});
      const int64_t chunks = int8_math::sum_chunks(g.P() * O);
      Tensor rs = words64<Exec>(3 * g.n * chunks);
      ex.each(g.n * chunks, GxImageStats{pdy, ps, ptr<int8_t>(c.q), as64<double, Exec>(rs), g, chunks});
      c.stats = fold_stats(host64<double>(rs, 3 * g.n * chunks), g.n, chunks);
    }
    return c;
  }

  Tensor weight_grad(const Saved& sv, const Codes& c, float scale) {
    const Geometry& g = sv.g;
    const int64_t O = g.o, K = g.K();
    Tensor corr = words64<Exec>(O);
    ex.each(O, WeightGradCorrection{as64<int64_t, Exec>(c.gsum), as64<double, Exec>(corr), 128.0 - sv.grid.zero,
                                    c.chunks});
    Tensor dw = Tensor::empty({O, K}, DType::f32, device);
    const double s = static_cast<double>(scale) * static_cast<double>(sv.grid.scale);
    if (g.depthwise()) {
      ex.each(dw.numel(), int8_math::DepthwiseWeightGrad{ptr<uint8_t>(sv.u), ptr<int8_t>(c.q), as64<double, Exec>(corr),
                                                         s, ptr<float>(dw), g, sv.pad});
      return dw;
    }
    const int8_math::NchwPatches patches{ptr<uint8_t>(sv.u), g, sv.pad};
    ex.gemm(int_math::S8Rows{ptr<int8_t>(c.q), g.M()}, int8_math::PatchColumns{patches}, O, K, g.M(),
            int8_math::WeightGradStage{as64<double, Exec>(corr), s, ptr<float>(dw), K});
    return dw;
  }

  Tensor input_grad(const Saved& sv, const Codes& c, float scale) {
    const Geometry& g = sv.g;
    const int64_t K = g.K();
    if (g.depthwise()) {
      Tensor dx = Tensor::empty({g.n, g.c, g.h, g.w}, DType::f32, device);
      ex.each(dx.numel(), int8_math::DepthwiseInputGrad{ptr<int8_t>(c.q), ptr<int8_t>(sv.w), ptr<float>(dx), g,
                                                        static_cast<double>(scale)});
      return dx;
    }
    Tensor acc = Tensor::empty({g.M() * K}, DType::i32, device);
    ex.gemm(int_math::S8Rows{ptr<int8_t>(c.q), g.o}, int_math::S8Columns{ptr<int8_t>(sv.w), K}, g.M(), K, g.o,
            int8_math::StoreAcc{ptr<int32_t>(acc), K});
    Tensor dx = Tensor::empty({g.n, g.c, g.h, g.w}, DType::f32, device);
    ex.each(dx.numel(), Col2im{ptr<int32_t>(acc), ptr<float>(dx), g, static_cast<double>(scale)});
    return dx;
  }

  Tensor bias_grad(const Saved& sv, const Tensor& dy) {
    const int64_t chunks = int8_math::sum_chunks(sv.g.M());
    const Tensor part = words64<Exec>(sv.g.o * chunks);
    Tensor db = Tensor::empty(Shape{sv.g.o}, DType::f32, device);
    ex.each(sv.g.o * chunks, BiasGradChunk{ptr<float>(dy), as64<double, Exec>(part), sv.g, chunks});
    ex.each(sv.g.o, BiasFold{as64<double, Exec>(part), ptr<float>(db), chunks});
    return db;
  }

  std::vector<int8_t> host_codes(const Codes& c) {
    const Tensor h = c.q.to(Device::cpu);
    return std::vector<int8_t>(h.data<int8_t>(), h.data<int8_t>() + h.numel());
  }
};

// The saved state before the forward: the geometry, the grid and the weight's integers.
template <class Exec>
typename DeviceStages<Exec>::Saved weight_saved(DeviceStages<Exec>& s, const ActGrid& grid, const Tensor& wq,
                                                const Tensor& w_scale, const Geometry& g, const std::string& who) {
  typename DeviceStages<Exec>::Saved sv;
  sv.grid = grid, sv.g = g;
  s.weight_integers(sv, wq, w_scale, who);
  return sv;
}

// The forward of an integer layer: x (N, C, H, W) or (N, K) on `grid`, wq
// (O, ...) the fake-quantized weight with w_scale (O) or (1) (either
// device), bias (O) or undefined; all but w_scale on Exec's device. Returns
// Y (N, O, OH, OW) (a linear layer's OH = OW = 1), without autograd history:
// the forward of QAT layers under quant.integer_forward (int8_ops.h), whose
// backward is the float op's. Errors as the CPU op's, naming the layer (`who`).
template <class Exec>
Tensor integer_forward_values(Exec& ex, const Tensor& x, const ActGrid& grid, const Tensor& wq, const Tensor& w_scale,
                              const Tensor& bias, const Geometry& g, const std::string& who) {
  DeviceStages<Exec> s{ex};
  typename DeviceStages<Exec>::Saved sv = weight_saved(s, grid, wq, w_scale, g, who);
  return int8_steps::forward(s, sv, x, bias, who);
}

// INT8 training's layer: the integer forward, and the integer backward.
template <class Exec>
Tensor int8_layer(Exec& ex, const Tensor& x, const ActGrid& grid, const Tensor& wq, const Tensor& w_scale,
                  const Tensor& bias, const Geometry& g, const std::shared_ptr<Int8GradState>& state) {
  DeviceStages<Exec> s{ex};
  typename DeviceStages<Exec>::Saved sv = weight_saved(s, grid, wq, w_scale, g, int8_training_who(state->layer()));
  return int8_steps::layer(s, std::move(sv), x, wq, bias, state);
}

}  // namespace qat::quant::int8_device
