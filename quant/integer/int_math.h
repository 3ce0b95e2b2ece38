#pragma once
// Per-element rules of the integer model's kernels (int_kernels.h, ops/),
// shared by the CPU ops and the device forward (int_forward.h), so that the
// CPU tests cover the arithmetic both run. Pure functions of integers, and of
// floats only at the network's two ends (input quantization, dequantized
// logits); no state.
#include <cmath>
#include <cstdint>

#include "core/host_device.h"
#include "core/window.h"

// Fully unrolled on the device (keeps the 4 x 4 accumulators in registers).
#if defined(__CUDA_ARCH__)
#define QAT_UNROLL _Pragma("unroll")
#else
#define QAT_UNROLL
#endif

namespace qat::quant::int_math {

QAT_HOST_DEVICE inline int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : (v > hi ? hi : v); }

// requantize_value64 (int_kernels.h): floor((acc * m0 + extra) / 2^t + 1/2),
// t = 31 + shift, from the exact 64-bit value (|acc * m0| < 2^62): a
// rounding right shift, ties upwards, saturated to int32.
QAT_HOST_DEVICE inline int32_t requantize_value64(int32_t acc, int32_t m0, int32_t shift, int64_t extra) {
  const int t = 31 + shift;
  const int64_t p = static_cast<int64_t>(acc) * m0 + extra;
  int64_t r;
  if (t <= 0) r = p * (int64_t{1} << -t);  // cannot occur for valid multipliers (shift >= -31)
  else if (t >= 63) r = 0;
  else r = (p + (int64_t{1} << (t - 1))) >> t;
  return static_cast<int32_t>(clamp64(r, INT32_MIN, INT32_MAX));
}

// Round half to even (std::nearbyint under the default rounding mode), on
// the host and the device.
// (float or double: CUDA's device nearbyint has both overloads.)
template <class T>
QAT_HOST_DEVICE inline T round_half_even(T x) {
#if defined(__CUDA_ARCH__)
  return nearbyint(x);
#else
  return std::nearbyint(x);
#endif
}

// One input value onto the first layer's grid (int_kernels.h: quantize_input):
// clamp(nearbyint(x * inv + frac) + z, lo, hi) + offset, NaN to z. x * inv + frac
// is one fused multiply-add (core/ops/math.h, Note [pinned fused
// multiply-add]): what GCC makes of the CPU loop on an FMA CPU, and nvcc's
// default, pinned so that every build rounds alike (with frac = 0 it is the
// plain product).
QAT_HOST_DEVICE inline uint8_t quantize_input_value(float x, float inv, float frac, float z, float lo, float hi,
                                                    int32_t offset) {
  float q = round_half_even(fmaf(x, inv, frac)) + z;
  q = q < lo ? lo : (hi < q ? hi : q);
  return static_cast<uint8_t>(static_cast<int32_t>(q != q ? z : q) + offset);
}

// Dequantized logit of the last layer (ops/matmul.h, OutputStage):
// (acc + bias - f_w * centred) * s_x s_w, the subtraction fused (one rounding).
QAT_HOST_DEVICE inline float dequantize_value(int32_t acc_bias, float frac_w, float centred, float dequant) {
  return fmaf(-frac_w, centred, static_cast<float>(acc_bias)) * dequant;
}

// ---------------------------------------------------------------- layouts
// One NCHW float batch to NHWC: output index i of (n, h, w, c) reads x there.
struct QuantizeInputGeometry {
  int64_t c, h, w;
  float inv, frac, z, lo, hi;
  int32_t offset;
};
QAT_HOST_DEVICE inline uint8_t quantize_input_at(int64_t i, const float* x, const QuantizeInputGeometry& g) {
  const int64_t ch = i % g.c, pix = i / g.c, hw = g.h * g.w;
  const int64_t n = pix / hw, p = pix % hw;
  return quantize_input_value(x[(n * g.c + ch) * hw + p], g.inv, g.frac, g.z, g.lo, g.hi, g.offset);
}

// NHWC u8 geometry of a pool: input h x w, output oh x ow, c channels.
struct U8PoolGeometry {
  int64_t h, w, c, kh, kw, stride_h, stride_w, pad_h, pad_w, out_h, out_w;
};
// fn(ih, iw) for each tap of output (oh, ow)'s max-pooling window that lies
// inside the image (padding is never counted); G: any pooling geometry.
template <class G, class Fn>
QAT_HOST_DEVICE inline void each_pool_tap(int64_t oh, int64_t ow, const G& g, Fn fn) {
  for (int64_t a = 0; a < g.kh; ++a) {
    const int64_t ih = oh * g.stride_h - g.pad_h + a;
    if (ih < 0 || ih >= g.h) continue;
    for (int64_t b = 0; b < g.kw; ++b) {
      const int64_t iw = ow * g.stride_w - g.pad_w + b;
      if (iw >= 0 && iw < g.w) fn(ih, iw);
    }
  }
}

// Output i of max pooling: the largest value in the window (the CPU starts
// from 0, the lowest u8).
QAT_HOST_DEVICE inline uint8_t max_pool_u8_at(int64_t i, const uint8_t* x, const U8PoolGeometry& g) {
  const int64_t ch = i % g.c, pix = i / g.c;
  const int64_t ow = pix % g.out_w, oh = (pix / g.out_w) % g.out_h, n = pix / (g.out_w * g.out_h);
  const uint8_t* img = x + n * g.h * g.w * g.c;
  uint8_t m = 0;
  each_pool_tap(oh, ow, g, [&](int64_t ih, int64_t iw) {
    const uint8_t v = img[(ih * g.w + iw) * g.c + ch];
    m = v > m ? v : m;
  });
  return m;
}

// A window's mean of u8 values rounded half up: floor(sum / count + 1/2)
// (both >= 0, so the integer division is the floor).
QAT_HOST_DEVICE inline uint8_t mean_half_up(int64_t sum, int64_t count) {
  return static_cast<uint8_t>(clamp64((2 * sum + count) / (2 * count), 0, 255));
}

// Output i of adaptive average pooling (PyTorch's bins): the window's mean
// rounded half up (kh, kw, strides and padding unused).
QAT_HOST_DEVICE inline uint8_t adaptive_avg_pool_u8_at(int64_t i, const uint8_t* x, const U8PoolGeometry& g) {
  const int64_t ch = i % g.c, pix = i / g.c;
  const int64_t ow = pix % g.out_w, oh = (pix / g.out_w) % g.out_h, n = pix / (g.out_w * g.out_h);
  const AdaptiveWindow wh = adaptive_window(oh, g.h, g.out_h), ww = adaptive_window(ow, g.w, g.out_w);
  int64_t sum = 0;
  for (int64_t a = wh.begin; a < wh.end; ++a)
    for (int64_t b = ww.begin; b < ww.end; ++b) sum += x[((n * g.h + a) * g.w + b) * g.c + ch];
  return mean_half_up(sum, wh.size() * ww.size());
}

// Output i of flatten: NHWC (n, p, c) to (n, c * hw + p), PyTorch's (c, h, w) order.
QAT_HOST_DEVICE inline uint8_t flatten_at(int64_t i, const uint8_t* x, int64_t c, int64_t hw) {
  const int64_t n = i / (c * hw), rest = i % (c * hw);
  return x[(n * hw + rest % hw) * c + rest / hw];
}

// ---------------------------------------------------------------- GEMM rows
// The rows a conv / linear GEMM multiplies, read on the fly: at(r, k) is the
// stored u8 input k of output row r.
struct DenseRows {  // linear: the input matrix (rows x k)
  const uint8_t* x;
  int64_t k;
  QAT_HOST_DEVICE uint8_t at(int64_t r, int64_t kk) const { return x[r * k + kk]; }
};

// conv: row r = (image n, output position p) is that position's KH x KW x C
// patch of the NHWC input in (kh, kw, c) order (int_kernels.h: im2row_u8),
// `pad` (the input zero point) outside the image: an implicit im2row.
struct ConvPatches {
  const uint8_t* x;
  int64_t h, w, c, kh, kw, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, out_h, out_w;
  uint8_t pad;
  QAT_HOST_DEVICE uint8_t at(int64_t r, int64_t k) const {
    const int64_t positions = out_h * out_w, n = r / positions, p = r % positions;
    const int64_t ch = k % c, tap = k / c, j = tap % kw, i = tap / kw;
    const int64_t ih = (p / out_w) * stride_h - pad_h + i * dil_h, iw = (p % out_w) * stride_w - pad_w + j * dil_w;
    if (ih < 0 || ih >= h || iw < 0 || iw >= w) return pad;
    return x[((n * h + ih) * w + iw) * c + ch];
  }
};

// Σ_k of row r's stored inputs (the zero-point corrections need it).
template <class Rows>
QAT_HOST_DEVICE inline int32_t row_sum_at(int64_t r, const Rows& rows, int64_t k) {
  int32_t s = 0;  // k <= kMaxProducts values <= 255: < 2^22
  for (int64_t kk = 0; kk < k; ++kk) s += rows.at(r, kk);
  return s;
}

// ---------------------------------------------------------------- output stage
// Note [device output stage]: the GEMM multiplies (x - 128) as signed bytes
// (one signed 4-way dot product per word), so its sum is acc - 128 Σ_k w[c][k];
// `bias` holds the CPU's corrected bias (ops/matmul.h, OutputStage) plus
// 128 Σ_k w[c][k]. The int32 sums wrap as the CPU's do (computed unsigned
// here: the same bits, no signed overflow), and the end value, which the
// CPU computes without overflow, is the same integer.
struct OutputStage {
  using Acc = int32_t;
  const int32_t* bias;          // per channel: CPU bias + 128 Σ_k w
  const int32_t* m0;            // requantization (not when dequantize)
  const int32_t* shift;
  const int32_t* residual;
  const int32_t* weight_zero;   // z_w per channel, or null when all are 0
  const int64_t* frac_m0;       // round(f_w M0) per channel, or null (no fractional weight zero points)
  const float* frac_w;          // f_w per channel (dequantize only)
  const float* dequant;         // s_x s_w per channel, or null (requantize)
  const int32_t* row_sums;      // Σ_k x per row, or null when no term needs it
  uint8_t* out;                 // u8 rows (rows x channels)
  float* fout;                  // dequantize: logits (image, channel, position)
  int64_t channels, k, positions;  // positions per image (1 for linear)
  int32_t zx, out_zero, lo, hi;

  QAT_HOST_DEVICE void operator()(int64_t r, int64_t c, int32_t dot) const {
    if (row_sums) return finish(r, c, dot, row_sums[r]);
    finish_without_sums(r, c, dot);
  }
  // Output (r, c) from its dot and xs = Σ_k x_k of its own inputs (a
  // depthwise output's window: its own channel's, not the row's).
  QAT_HOST_DEVICE void finish(int64_t r, int64_t c, int32_t dot, int32_t xs) const {
    uint32_t a = static_cast<uint32_t>(dot) + static_cast<uint32_t>(bias[c]);
    if (weight_zero) a -= static_cast<uint32_t>(weight_zero[c]) * static_cast<uint32_t>(xs);
    store(r, c, static_cast<int32_t>(a), xs - k * zx);
  }
  QAT_HOST_DEVICE void finish_without_sums(int64_t r, int64_t c, int32_t dot) const {
    store(r, c, static_cast<int32_t>(static_cast<uint32_t>(dot) + static_cast<uint32_t>(bias[c])), 0);
  }
  // ab: the corrected sum plus bias; centred = Σ_k (x_k - z_x).
  QAT_HOST_DEVICE void store(int64_t r, int64_t c, int32_t ab, int64_t centred) const {
    if (dequant) {
      const int64_t n = r / positions, p = r % positions;
      fout[(n * channels + c) * positions + p] =
          dequantize_value(ab, frac_w[c], static_cast<float>(centred), dequant[c]);
      return;
    }
    const int64_t extra = frac_m0 ? residual[c] - frac_m0[c] * centred : residual[c];
    const int32_t v = out_zero + requantize_value64(ab, m0[c], shift[c], extra);
    out[r * channels + c] = static_cast<uint8_t>(v < lo ? lo : (v > hi ? hi : v));
  }
};

// ---------------------------------------------------------------- tiled GEMM
// Note [device int8 GEMM]: dot(r, c) = Σ_k a.s8(r, k) b.s8(c, k) over signed
// bytes, a and b operand sources (below: u8 rows enter as x - 128, the weights
// as they are, INT8 training's gradients and transposed reads). Blocks of
// kTileM x kTileN outputs take kTileK bytes of K at a time, staged as 32-bit
// words (4 bytes each, zero beyond K and beyond the matrix edges) in the
// block's shared tile; kGemmThreads threads, each owning a 4 x 4 grid of
// outputs strided by 16 (rows tr + 16 i, columns tc + 16 j). A block runs in
// phases separated by barriers: every thread loads its words, then every
// thread accumulates, per K step; then every thread writes its outputs. The
// phases are the functions below; the device kernel calls them between
// __syncthreads(), and the tests' host executor calls them in the same order,
// thread after thread, so the host tests run the kernel's own indexing.
// The output stage's Acc is the accumulator: int32_t, or int64_t for sums too
// long for 32 bits (each K step's words are summed in int32, at most 32
// products of 2^14, then added). Integer sums: the order of the additions
// does not change the result.
constexpr int kTileM = 64, kTileN = 64, kTileK = 32, kTileWords = kTileK / 4, kGemmThreads = 256;
constexpr int kMicro = 4, kThreadGrid = 16;
static_assert(kTileM == kTileN, "gemm_load stages one row of A and of B per index");
static_assert(kThreadGrid * kThreadGrid == kGemmThreads && kThreadGrid * kMicro == kTileM, "4 x 4 outputs per thread");
static_assert(kTileK % 4 == 0, "whole 32-bit words of K");

struct GemmTile {
  int32_t a[kTileM][kTileWords + 1];  // +1: column reads of b hit distinct banks
  int32_t b[kTileN][kTileWords + 1];
};

// Operand sources: s8(r, k), the signed byte of row r at depth k.
template <class Rows>
struct ShiftedRows {  // u8 rows (DenseRows, ConvPatches) as x - 128
  Rows rows;
  QAT_HOST_DEVICE int8_t s8(int64_t r, int64_t k) const { return static_cast<int8_t>(rows.at(r, k) ^ 0x80u); }
};
struct S8Rows {  // row-major int8, leading dimension ld
  const int8_t* p;
  int64_t ld;
  QAT_HOST_DEVICE int8_t s8(int64_t r, int64_t k) const { return p[r * ld + k]; }
};
struct S8Columns {  // the transpose of a row-major int8 matrix: row r is its column r
  const int8_t* p;
  int64_t ld;
  QAT_HOST_DEVICE int8_t s8(int64_t r, int64_t k) const { return p[k * ld + r]; }
};

// c + the four signed byte products of a and b (the device's __dp4a).
QAT_HOST_DEVICE inline int32_t dot4_s8(int32_t a, int32_t b, int32_t c) {
#if defined(__CUDA_ARCH__)
  return __dp4a(a, b, c);
#else
  for (int j = 0; j < 4; ++j)
    c += static_cast<int8_t>(static_cast<uint32_t>(a) >> (8 * j)) * static_cast<int8_t>(static_cast<uint32_t>(b) >> (8 * j));
  return c;
#endif
}

// Phase 1: thread t stages its words of the A (m rows) and B (n rows) tiles
// at (m0, n0, k0).
template <class A, class B>
QAT_HOST_DEVICE inline void gemm_load(const A& a, const B& b, int64_t m, int64_t n, int64_t k, int64_t m0, int64_t n0,
                                      int64_t k0, int t, GemmTile& tile) {
  for (int idx = t; idx < kTileM * kTileWords; idx += kGemmThreads) {
    const int row = idx / kTileWords, word = idx % kTileWords;
    uint32_t va = 0, vb = 0;
    for (int j = 0; j < 4; ++j) {
      const int64_t kk = k0 + word * 4 + j;
      if (kk >= k) break;
      if (m0 + row < m) va |= static_cast<uint32_t>(static_cast<uint8_t>(a.s8(m0 + row, kk))) << (8 * j);
      if (n0 + row < n) vb |= static_cast<uint32_t>(static_cast<uint8_t>(b.s8(n0 + row, kk))) << (8 * j);
    }
    tile.a[row][word] = static_cast<int32_t>(va);
    tile.b[row][word] = static_cast<int32_t>(vb);
  }
}

// Phase 2: thread t adds one K step of its 4 x 4 outputs.
template <class Acc>
QAT_HOST_DEVICE inline void gemm_accumulate(const GemmTile& tile, int t, Acc (&acc)[kMicro][kMicro]) {
  const int tr = t / kThreadGrid, tc = t % kThreadGrid;
  QAT_UNROLL
  for (int i = 0; i < kMicro; ++i)
    QAT_UNROLL
    for (int j = 0; j < kMicro; ++j) {
      int32_t part = 0;  // |part| <= kTileK * 2^14
      QAT_UNROLL
      for (int word = 0; word < kTileWords; ++word)
        part = dot4_s8(tile.a[tr + kThreadGrid * i][word], tile.b[tc + kThreadGrid * j][word], part);
      // (int32: the same bits as one long int32 sum, wrapping as the CPU's)
      acc[i][j] = static_cast<Acc>(static_cast<uint64_t>(acc[i][j]) + static_cast<uint64_t>(static_cast<int64_t>(part)));
    }
}

// Phase 3: thread t hands its outputs inside the matrix to the output stage.
template <class Stage, class Acc>
QAT_HOST_DEVICE inline void gemm_store(const Stage& stage, int64_t m, int64_t n, int64_t m0, int64_t n0, int t,
                                       const Acc (&acc)[kMicro][kMicro]) {
  const int tr = t / kThreadGrid, tc = t % kThreadGrid;
  QAT_UNROLL
  for (int i = 0; i < kMicro; ++i)
    QAT_UNROLL
    for (int j = 0; j < kMicro; ++j) {
      const int64_t r = m0 + tr + kThreadGrid * i, c = n0 + tc + kThreadGrid * j;
      if (r < m && c < n) stage(r, c, acc[i][j]);
    }
}

}  // namespace qat::quant::int_math
