// Integer convolution: u8 NHWC in, u8 NHWC out (or float logits NCHW when
// it dequantizes); u8 im2row in L2-sized chunks + int8 GEMM + output stage.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "core/aligned_vector.h"
#include "core/cpu_features.h"
#include "quant/integer/int_op.h"
#include "quant/integer/ops/common.h"
#include "quant/integer/ops/fused.h"
#include "quant/integer/ops/matmul.h"

namespace qat::quant::ops {

namespace {

// Note [integer depthwise convolution] on the CPU: an output row's channels
// side by side (NHWC), each tap adding its run of C inputs times its C
// weights less their zero points, in int32 (|acc| <= taps 255 255 < 2^30);
// padding taps add nothing (x = z_x). The rows are then requantized as a
// dense convolution's, or output by output where fractional weight zero
// points (LSQ+) add a term that depends on the window's input sum.
//
// Without the LSQ+ term, with AVX2 or AVX-512, one output position's
// channels go in blocks of 4 vectors held in registers across all its taps
// (depthwise_lanes.inc); the accumulators are stored once per position, not
// loaded and stored once per tap. That suits wide rows (4 vectors and more);
// the interior of a row, where every horizontal tap is inside the image,
// goes several outputs at a time for each vector of channels instead, each
// tap's weights loaded once for them and no tap list built per position
// (MobileNetV2's 32-channel layer at 64x64, batch 32: 2.17 -> 0.99 ms). The
// row's edges keep the per-position kernel.
//
// The products are 16-bit multiplies (Note [16-bit depthwise products]).

// Note [16-bit depthwise products]: an int32 lane holding w - z_w in its low
// 16 bits and zeros above (|w - z_w| <= 255) times a lane holding x or
// x - z_x (|.| <= 255: the high 16 bits are its sign) is, under vpmaddwd
// (or AVX-512 VNNI's vpdpwssd, which adds it in the same instruction), the
// exact product: the high halves' product is 0. One instruction a vector,
// where vpmulld is two on Intel's cores, and with VNNI the add is free.
// The row interior also leaves z_x out of the sum,
//   sum (x - z_x) w = sum x w - z_x sum w,
// the second term once a row for each vector of channels (every tap is
// present there), saving a subtraction a tap.

// The taps of one output position that fall inside the image: each one's
// first input byte and its weight row (w - z_w, (tap, channel), in the low
// 16 bits of each int32).
struct DepthwiseTaps {
  const uint8_t* x[64];
  const int32_t* w[64];
  int count = 0;
};

// One output row's taps by rows: each tap row inside the image, its first
// input byte (column 0) and its weights (as DepthwiseTaps', (kj, channel));
// the horizontal geometry in positions. The interior kernel takes the
// outputs whose every horizontal tap is inside.
struct DepthwiseRow {
  const uint8_t* x[64];
  const int32_t* w[64];
  int rows = 0;
  int64_t C, kw, stride, pad, dil;
  int64_t W;   // the input row's width
  int32_t zx;  // the padding's value
};

// Whether the interior kernel takes whole rows, edges included (a 3-wide
// kernel at dilation 1, stride 1 or 2: depthwise_lanes.inc's outputs_3).
inline bool takes_whole_rows(int64_t kw, int64_t stride, int64_t dil) {
  return kw == 3 && dil == 1 && (stride == 1 || stride == 2);
}

// A weight as its 16-bit lane of DepthwiseTaps::w, and back.
inline int32_t weight_lane(int32_t w) { return static_cast<int32_t>(static_cast<uint16_t>(w)); }
inline int32_t lane_weight(int32_t lane) { return static_cast<int16_t>(lane); }

namespace avx512 {
#define QAT_DW_TARGET __attribute__((target("avx512f,avx512bw")))
struct Lanes {
  using I = __m512i;
  static constexpr int64_t kWidth = 16;
  QAT_DW_TARGET static I broadcast(int32_t v) { return _mm512_set1_epi32(v); }
  QAT_DW_TARGET static I zero() { return _mm512_setzero_si512(); }
  QAT_DW_TARGET static I sub(I a, I b) { return _mm512_sub_epi32(a, b); }
  QAT_DW_TARGET static void store(int32_t* p, I v) { _mm512_storeu_si512(p, v); }
  QAT_DW_TARGET static I weights(const int32_t* w) { return _mm512_loadu_si512(w); }
  QAT_DW_TARGET static I widen(const uint8_t* x) {
    // (the zero-masked form with every lane live: GCC 12 warns about the plain one's undefined operand)
    return _mm512_maskz_cvtepu8_epi32(0xFFFF, _mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
  }
  QAT_DW_TARGET static I dot_add(I sum, I x, I w) { return _mm512_add_epi32(sum, _mm512_madd_epi16(x, w)); }
};
#include "quant/integer/ops/depthwise_lanes.inc"
#undef QAT_DW_TARGET
}  // namespace avx512

namespace avx512_vnni {
#define QAT_DW_TARGET __attribute__((target("avx512f,avx512bw,avx512vnni")))
struct Lanes : avx512::Lanes {
  QAT_DW_TARGET static I dot_add(I sum, I x, I w) { return _mm512_dpwssd_epi32(sum, x, w); }
};
#include "quant/integer/ops/depthwise_lanes.inc"
#undef QAT_DW_TARGET
}  // namespace avx512_vnni

namespace avx2 {
#define QAT_DW_TARGET __attribute__((target("avx2")))
struct Lanes {
  using I = __m256i;
  static constexpr int64_t kWidth = 8;
  QAT_DW_TARGET static I broadcast(int32_t v) { return _mm256_set1_epi32(v); }
  QAT_DW_TARGET static I zero() { return _mm256_setzero_si256(); }
  QAT_DW_TARGET static I sub(I a, I b) { return _mm256_sub_epi32(a, b); }
  QAT_DW_TARGET static void store(int32_t* p, I v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
  QAT_DW_TARGET static I weights(const int32_t* w) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w)); }
  QAT_DW_TARGET static I widen(const uint8_t* x) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(x)));
  }
  QAT_DW_TARGET static I dot_add(I sum, I x, I w) { return _mm256_add_epi32(sum, _mm256_madd_epi16(x, w)); }
};
#include "quant/integer/ops/depthwise_lanes.inc"
#undef QAT_DW_TARGET
}  // namespace avx2

// The vector kernels this CPU runs (none without AVX2: the tap-by-tap loop).
struct DepthwiseKernels {
  void (*position)(const DepthwiseTaps&, int32_t, int64_t, int32_t*) = nullptr;
  void (*interior)(const DepthwiseRow&, int32_t, int64_t, int64_t, int32_t*) = nullptr;
};
DepthwiseKernels best_depthwise_kernels() {
  static const DepthwiseKernels best =
      cpu_has_avx512_vnni() ? DepthwiseKernels{&avx512_vnni::position, &avx512_vnni::interior}
      : cpu_has_avx512bw()  ? DepthwiseKernels{&avx512::position, &avx512::interior}
      : cpu_has_avx2()      ? DepthwiseKernels{&avx2::position, &avx2::interior}
                            : DepthwiseKernels{};
  return best;
}

// The outputs [begin, end) of a row whose every horizontal tap is inside an
// image of width W (begin = end where none is).
std::pair<int64_t, int64_t> interior_outputs(int64_t W, int64_t OW, int64_t kw, int64_t stride, int64_t pad,
                                             int64_t dil) {
  const int64_t begin = std::min((pad + stride - 1) / stride, OW);
  // the rightmost tap inside: ow stride - pad + (kw - 1) dil <= W - 1, so ow stride <= last
  const int64_t last = W - 1 - (kw - 1) * dil + pad;
  const int64_t end = last < 0 ? begin : std::clamp(last / stride + 1, begin, OW);
  return {begin, end};
}

Tensor run_depthwise(const IntLayer& l, const Tensor& x) {
  const int64_t N = x.size(0), H = x.size(1), W = x.size(2), C = x.size(3), KH = l.kernel_h, KW = l.kernel_w;
  const auto& p = l.conv;
  const int64_t OH = conv_out_size(H, KH, p.stride_h, p.pad_h, p.dil_h, "integer conv");
  const int64_t OW = conv_out_size(W, KW, p.stride_w, p.pad_w, p.dil_w, "integer conv");
  const int64_t taps = KH * KW;
  const int8_t* w = l.weight.data<int8_t>();
  const int32_t* zw = l.weight_zero_point.data<int32_t>();
  // (tap, channel): w - z_w, and as the vector kernels' 16-bit lanes
  std::vector<int32_t> wt(static_cast<size_t>(taps * C)), lanes(wt.size());
  bool narrow = true;  // every w - z_w within 16 bits (always, for zero points on the weights' grid)
  for (int64_t c = 0; c < C; ++c)
    for (int64_t t = 0; t < taps; ++t) {
      const int32_t v = w[c * taps + t] - zw[c];
      wt[t * C + c] = v, lanes[t * C + c] = weight_lane(v);
      narrow = narrow && v == lane_weight(weight_lane(v));
    }
  const int32_t zx = l.in.zero_point + l.in.offset();
  const RequantParams rq = requant_params(l, l.bias.data<int32_t>());
  const RequantPlan plan = make_requant_plan(rq, C);
  const std::vector<int64_t> frac_m0 = fractional_weight_m0(l);
  const bool frac = !frac_m0.empty();
  const DepthwiseKernels kernels = best_depthwise_kernels();
  const bool blocked = !frac && taps <= 64 && kernels.position != nullptr && narrow && zx >= 0 && zx <= 255;
  // (plain variables: Clang cannot capture structured bindings into an OpenMP region)
  const bool whole_rows = takes_whole_rows(KW, p.stride_w, p.dil_w);
  const std::pair<int64_t, int64_t> inner =
      whole_rows ? std::pair<int64_t, int64_t>{0, OW} : interior_outputs(W, OW, KW, p.stride_w, p.pad_w, p.dil_w);
  const int64_t inner_begin = inner.first, inner_end = inner.second;
  Tensor y = Tensor::empty({N, OH, OW, C}, DType::u8);
  const uint8_t* xd = x.data<uint8_t>();
  uint8_t* yd = y.data<uint8_t>();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oh = 0; oh < OH; ++oh) {
      thread_local std::vector<int32_t> acc, sums;
      // (the vector kernel writes every accumulator of a position: no zeros needed)
      if (blocked)
        acc.resize(static_cast<size_t>(OW * C));
      else
        acc.assign(static_cast<size_t>(OW * C), 0);
      if (frac) sums.assign(acc.size(), 0);
      if (blocked) {
        DepthwiseRow g{{}, {}, 0, C, KW, p.stride_w, p.pad_w, p.dil_w, W, zx};
        for (int64_t ki = 0; ki < KH; ++ki) {
          const int64_t ih = oh * p.stride_h - p.pad_h + ki * p.dil_h;
          if (ih < 0 || ih >= H) continue;
          g.x[g.rows] = xd + (n * H + ih) * W * C, g.w[g.rows] = lanes.data() + ki * KW * C, ++g.rows;
        }
        kernels.interior(g, zx, inner_begin, inner_end, acc.data());
      }
      for (int64_t ow = 0; ow < OW; ++ow) {
        if (blocked && ow == inner_begin && inner_end > inner_begin) ow = inner_end;  // (done above)
        if (ow >= OW) break;
        int32_t* a = acc.data() + ow * C;
        DepthwiseTaps in;
        for (int64_t ki = 0; ki < KH; ++ki) {
          const int64_t ih = oh * p.stride_h - p.pad_h + ki * p.dil_h;
          if (ih < 0 || ih >= H) continue;
          for (int64_t kj = 0; kj < KW; ++kj) {
            const int64_t iw = ow * p.stride_w - p.pad_w + kj * p.dil_w;
            if (iw < 0 || iw >= W) continue;
            const uint8_t* xr = xd + ((n * H + ih) * W + iw) * C;
            const int64_t tap = (ki * KW + kj) * C;  // the tap's weight row in wt and lanes
            if (blocked) {
              in.x[in.count] = xr, in.w[in.count] = lanes.data() + tap, ++in.count;
              continue;
            }
            const int32_t* wr = wt.data() + tap;
            for (int64_t c = 0; c < C; ++c) a[c] += (static_cast<int32_t>(xr[c]) - zx) * wr[c];
            if (frac)
              for (int64_t c = 0; c < C; ++c) sums[ow * C + c] += static_cast<int32_t>(xr[c]) - zx;
          }
        }
        if (blocked) kernels.position(in, zx, C, a);
      }
      uint8_t* out = yd + (n * OH + oh) * OW * C;
      if (!frac) {
        requantize_rows(acc.data(), OW, plan, out);
        continue;
      }
      for (int64_t i = 0; i < OW * C; ++i) {
        const int64_t c = i % C;
        const int64_t extra = rq.residual[c] - frac_m0[c] * sums[i];
        const int32_t v = rq.out_zero + requantize_value64(acc[i] + rq.bias[c], rq.m0[c], rq.shift[c], extra);
        out[i] = static_cast<uint8_t>(std::clamp(v, rq.lo, rq.hi));
      }
    }
  return y;
}

// How a convolution's rows, its N P (image, position) pairs image-major,
// go to the threads:
// - In chunks that may span images: ResNet-18's layer 4 at 128 px has 16
//   positions an image, and an image a GEMM streamed its 2.4 MB of weights
//   for 16 rows.
// - Sized for L2 (patches and accumulators), a 1x1 convolution's too
//   (MobileNetV2's 16 -> 96 expansion at 64 x 64 px wrote 1.5 MB of
//   accumulators an image). On AMX, weights beyond that budget get chunks
//   four times larger: the kernel then passes a chunk's rows under each
//   block of weight columns (column-major), so the weights stream once a
//   chunk.
// - Each thread a contiguous share of the rows (a multiple of 16: an AMX
//   tile) cut into chunks, patches and output stage included; the chunks a
//   multiple of 16 rows where each thread has at least 4, else the share
//   cut evenly: 49 rows on 2 threads go 25 + 24, not 32 + 17. (Chunks dealt
//   out in turn left a thread one chunk more in 2: MobileNetV2's 96 -> 576
//   at 8 x 8 px, batch 32, 19 chunks of 112 rows, 1120 + 928.)
// - Under kMinChunkRows rows a thread, one parallel GEMM at a time instead
//   (ResNet-18 at batch 1 with the floor at 64, 32 and 8 positions: 1.03,
//   0.99 and 0.88-1.00 ms; even its layer 4, 8 positions a thread, gains).
struct ConvWork {
  int64_t chunk;  // the most rows a chunk
  bool chunks_on_threads;
  bool shares_of_16;  // each thread's share a multiple of 16 rows
  // Thread t's rows of a team of `threads`.
  std::pair<int64_t, int64_t> share(int64_t rows, int64_t t, int64_t threads) const {
    int64_t each = (rows + threads - 1) / threads;
    if (shares_of_16) each = (each + 15) / 16 * 16;
    const int64_t begin = std::min(rows, t * each);
    return {begin, std::min(rows, begin + each)};
  }
};
constexpr int64_t kMinChunkRows = 8;
constexpr int64_t kL2Budget = 256 * 1024;  // bytes of patches and accumulators a chunk

// The most rows a chunk takes: the patches (K bytes a row; a 1x1
// convolution's, read in place, are its input's rows) and accumulators (CO
// int32) within the budget.
int64_t max_chunk_rows(int64_t K, int64_t CO, GemmKernel kernel) {
  const int64_t budget = kernel == GemmKernel::amx && K * CO > kL2Budget ? 4 * kL2Budget : kL2Budget;
  return std::max<int64_t>(budget / (K + 4 * CO), 16);
}

ConvWork conv_work(int64_t rows, int64_t max_chunk, int64_t threads) {
  max_chunk = std::min(max_chunk, rows);
  const int64_t share = (rows + threads - 1) / threads;
  if (threads <= 1 || share < kMinChunkRows) return {max_chunk, false, false};
  const int64_t chunks = (share + max_chunk - 1) / max_chunk;  // a thread's
  if (chunks < 4) return {(share + chunks - 1) / chunks, true, false};
  return {std::max<int64_t>(max_chunk / 16 * 16, 16), true, true};
}

// A thread's buffers for a convolution's chunks; rows aligned: the AMX
// kernel reads whole rows of 64 bytes in place. Kept from call to call,
// grown and never shrunk: a fresh zeroed set a layer was about 1% of
// MobileNetV2's integer pass. Only AMX's zero-padded rows need zeros (K to
// lda), so only they are cleared, every call (another layer's rows may lie
// there).
struct ConvBuffers {
  AlignedVector<uint8_t> rows;
  AlignedVector<int32_t> acc;
  std::vector<uint8_t> pimg;
  int64_t pimg_of = -1;  // the image pimg holds (none at a call's start)
};
template <class V>
void grow(V& v, size_t n) {
  if (v.size() < n) v.resize(n);
}
ConvBuffers& thread_conv_buffers(size_t rows_bytes, size_t acc_count, size_t padded_bytes, bool zero_rows) {
  thread_local ConvBuffers b;
  grow(b.rows, rows_bytes), grow(b.acc, acc_count), grow(b.pimg, padded_bytes);
  if (zero_rows) std::memset(b.rows.data(), 0, rows_bytes);
  b.pimg_of = -1;
  return b;
}

// Note [convolution windows]
// Where the packed AVX-512 VNNI or AVX-VNNI tiles multiply a layer whose
// output stage needs no input row sums, and the input's channels are a
// multiple of 4, the GEMM reads each output's patch from the padded image
// itself (WindowRows): a kernel tap's C channels are contiguous there, so a
// patch is kh kw runs of C bytes, each a fixed offset from the window's
// corner. The sums are the same integers as on im2row's copies, so the
// outputs are the same bytes; what goes is the copy (ResNet-18's 3x3
// convolutions wrote 9 bytes of patches for each input byte). Without
// padding the image is read where it lies (ResNet's stride-2 1x1
// downsampling).
struct WindowGeometry {
  int64_t out_w = 0, step_y = 0, step_x = 0, run = 0;
  std::vector<int64_t> tap_offset;
  WindowRows rows(const uint8_t* image, int64_t first) const {
    return {image, first, out_w, step_y, step_x, tap_offset.data(), static_cast<int64_t>(tap_offset.size()), run};
  }
};
WindowGeometry window_geometry(const Im2RowShape& s) {
  const int64_t row_bytes = (s.w + 2 * s.pad_w) * s.c;  // of the padded image
  WindowGeometry g{s.out_w, s.stride_h * row_bytes, s.stride_w * s.c, s.c, {}};
  for (int64_t ky = 0; ky < s.kh; ++ky)
    for (int64_t kx = 0; kx < s.kw; ++kx) g.tap_offset.push_back(ky * s.dil_h * row_bytes + kx * s.dil_w * s.c);
  return g;
}

// A dense convolution's work for one call, set up once: the geometry, the
// GEMM and output stage, how the rows go to the threads, and the output.
// Its rows are the N P (image, position) pairs, image-major.
class DenseConv {
 public:
  // own_output: allocate y (else the caller gives chunk() its buffers)
  DenseConv(const IntLayer& l, const Tensor& x, GemmKernel kernel, bool own_output = true);
  const IntLayer& l;
  const int64_t N, H, W, C, OH, OW, P, CO;
  Tensor y;  // the layer's output (run_conv_max_pool writes elsewhere)
  ConvWork work{};
  // This thread's buffers.
  ConvBuffers& buffers() const {
    return thread_conv_buffers(rows_bytes_, static_cast<size_t>(work.chunk * CO), padded_bytes_, zero_tail_);
  }
  // Rows [r0, r0 + count): patches, GEMM, output stage; u8 rows to out (row
  // r0 first), or (a dequantizing layer) the float logits into y.
  void chunk(int64_t r0, int64_t count, ConvBuffers& b, uint8_t* out) const;
  // Rows [begin, end) in chunks of at most work.chunk.
  void rows_in_chunks(int64_t begin, int64_t end, ConvBuffers& b, uint8_t* out) const {
    for (int64_t r0 = begin; r0 < end; r0 += work.chunk)
      chunk(r0, std::min(work.chunk, end - r0), b, out ? out + (r0 - begin) * CO : nullptr);
  }

 private:
  // The (image, positions) pieces of rows [r0, r0 + count): f(n, p0, np, done), done the rows before.
  template <class F>
  void by_image(int64_t r0, int64_t count, F&& f) const {
    for (int64_t done = 0; done < count;) {
      const int64_t n = (r0 + done) / P, p0 = (r0 + done) % P, np = std::min(count - done, P - p0);
      f(n, p0, np, done);
      done += np;
    }
  }
  // Image n padded in this thread's buffer (or where it lies: in place).
  const uint8_t* image_of(int64_t n, ConvBuffers& b) const {
    const uint8_t* img = xd_ + n * H * W * C;
    if (in_place_) return img;
    if (b.pimg_of != n) pad_image_u8(img, shape_, pad_, b.pimg.data()), b.pimg_of = n;
    return b.pimg.data();
  }
  void windowed_chunk(int64_t r0, int64_t count, ConvBuffers& b, uint8_t* out) const;

  const uint8_t* xd_;
  Im2RowShape shape_{};
  GemmKernel gemm_kernel_;
  int64_t K_;
  bool direct_, zero_tail_, windowed_ = false, in_place_ = false, padded_ = false;
  int64_t lda_;
  OutputStage stage_;
  uint8_t pad_;
  WindowGeometry geometry_;
  size_t rows_bytes_ = 0, padded_bytes_ = 0;
  float* logits_ = nullptr;  // y's, where the layer dequantizes
};

DenseConv::DenseConv(const IntLayer& layer, const Tensor& x, GemmKernel kernel, bool own_output)
    : l(layer),
      N(x.size(0)),
      H(x.size(1)),
      W(x.size(2)),
      C(x.size(3)),
      OH(conv_out_size(H, l.kernel_h, l.conv.stride_h, l.conv.pad_h, l.conv.dil_h, "integer conv")),
      OW(conv_out_size(W, l.kernel_w, l.conv.stride_w, l.conv.pad_w, l.conv.dil_w, "integer conv")),
      P(OH * OW),
      CO(l.out_channels),
      xd_(x.data<uint8_t>()),
      gemm_kernel_(layer_gemm_kernel(l, kernel)),
      K_(l.kernel_h * l.kernel_w * C),
      direct_(l.kernel_h == 1 && l.kernel_w == 1 && l.conv.stride_h == 1 && l.conv.stride_w == 1 &&
              l.conv.pad_h == 0 && l.conv.pad_w == 0),
      // On AMX, patches whose K is not a multiple of 64 go in rows padded with
      // zeros to the next multiple (zeroed once: im2row leaves them), which the
      // tiles read in place instead of copying each panel of 32 rows into a
      // padded one first. The stems' share of integer inference at 128 px,
      // batch 32, AMX Xeon, two alternated runs: AlexNet's conv1 (K = 363)
      // 16.4/17.0% -> 13.7/12.0%, MobileNetV2's (27) 7.4/7.1% -> 6.4/6.2%,
      // ResNet-18's (147) 14.9/14.4% -> 14.0/13.5%.
      zero_tail_(!direct_ && is_amx(gemm_kernel_) && K_ % 64 != 0),
      lda_(zero_tail_ ? (K_ + 63) / 64 * 64 : K_),
      stage_(l, K_, lda_),
      pad_(static_cast<uint8_t>(l.in.zero_point + l.in.offset())) {
  const auto& p = l.conv;
  shape_ = {H, W, C, l.kernel_h, l.kernel_w, p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dil_h, p.dil_w, OH, OW};
  if (own_output)
    y = l.dequantize ? Tensor::empty({N, CO, OH, OW}, DType::f32) : Tensor::empty({N, OH, OW, CO}, DType::u8);
  if (l.dequantize) logits_ = y.data<float>();
  // Windowed: the GEMM reads each patch from the (padded) image in place,
  // no patch rows (Note [convolution windows]).
  windowed_ = !direct_ && !stage_.needs_rows() && runs_window(l, gemm_kernel_, C);
  in_place_ = windowed_ && p.pad_h == 0 && p.pad_w == 0;  // (the image itself)
  if (windowed_) geometry_ = window_geometry(shape_);
  // The N P rows in chunks whose patches and accumulators stay in L2 (a
  // whole 224 px conv1 image is ~2 MB of them).
  work = conv_work(N * P, max_chunk_rows(windowed_ ? 0 : lda_, CO, gemm_kernel_), omp_get_max_threads());
  // A padded copy of the image: for the windows (unless in place) and for
  // im2row's narrow kernel rows (conv1's 11 x 3 bytes).
  padded_ = !direct_ && (windowed_ ? !in_place_ : im2row_padded_applies(shape_));
  rows_bytes_ = direct_ || windowed_ ? 0 : static_cast<size_t>(work.chunk * lda_ + (padded_ ? kIm2RowSlack : 0));
  padded_bytes_ = padded_ ? static_cast<size_t>(padded_image_bytes(shape_)) : 0;
}

void DenseConv::windowed_chunk(int64_t r0, int64_t count, ConvBuffers& b, uint8_t* out) const {
  by_image(r0, count, [&](int64_t n, int64_t p0, int64_t np, int64_t done) {
    gemm_window(l, gemm_kernel_, np, geometry_.rows(image_of(n, b), p0), b.acc.data() + done * CO);
  });
  stage_.finish(b.acc.data(), nullptr, count, out, nullptr, 0, 0);
}

void DenseConv::chunk(int64_t r0, int64_t count, ConvBuffers& b, uint8_t* out) const {
  if (windowed_) return windowed_chunk(r0, count, b, out);
  if (!direct_)
    by_image(r0, count, [&](int64_t n, int64_t p0, int64_t np, int64_t done) {
      const uint8_t* img = xd_ + n * H * W * C;
      uint8_t* patches = b.rows.data() + done * lda_;
      if (!padded_) return im2row_u8_range(img, shape_, pad_, p0, np, patches, lda_);
      im2row_u8_padded_range(image_of(n, b), shape_, p0, np, patches, lda_);
    });
  const uint8_t* A = direct_ ? xd_ + r0 * K_ : b.rows.data();  // (direct: the NHWC input's rows are the patches)
  gemm(l, gemm_kernel_, count, A, b.acc.data(), lda_, zero_tail_);
  if (!l.dequantize) return stage_.finish(b.acc.data(), A, count, out, nullptr, 0, 0);
  by_image(r0, count, [&](int64_t n, int64_t p0, int64_t np, int64_t done) {
    stage_.finish(b.acc.data() + done * CO, A + done * lda_, np, nullptr, logits_ + n * CO * P + p0, 1, P);
  });
}

void check_conv_input(const IntLayer& l, const Tensor& x) {
  check_u8(l, x, 4);
  QAT_CHECK(x.size(3) == l.in_channels, "integer conv '", l.name, "': input has ", x.size(3),
            " channels, the layer expects ", l.in_channels);
}

Tensor run_conv(const IntLayer& l, const Tensor& x, GemmKernel kernel) {
  check_conv_input(l, x);
  if (l.depthwise()) return run_depthwise(l, x);
  DenseConv conv(l, x, kernel);
  uint8_t* out = l.dequantize ? nullptr : conv.y.data<uint8_t>();
  const int64_t rows = conv.N * conv.P;
  // No enclosing parallel region in the per-GEMM case: the GEMM parallelises
  // itself only outside one (a nested team would run on one thread).
  if (!conv.work.chunks_on_threads) {
    conv.rows_in_chunks(0, rows, conv.buffers(), out);
    return conv.y;
  }
#pragma omp parallel
  {
    ConvBuffers& b = conv.buffers();
    const std::pair<int64_t, int64_t> mine = conv.work.share(rows, omp_get_thread_num(), omp_get_num_threads());
    conv.rows_in_chunks(mine.first, mine.second, b, out ? out + mine.first * conv.CO : nullptr);
  }
  return conv.y;
}

}  // namespace

bool fuses_conv_max_pool(const std::vector<IntLayer>& layers, size_t i, const std::vector<size_t>& last_read,
                         int64_t images) {
  if (i + 1 >= layers.size()) return false;
  const IntLayer &conv = layers[i], &pool = layers[i + 1];
  const bool reads_conv = pool.inputs.empty() || (pool.inputs.size() == 1 && pool.inputs[0] == static_cast<int64_t>(i));
  const int threads = omp_get_max_threads();
  return conv.op == IntOp::conv && !conv.depthwise() && !conv.dequantize && pool.op == IntOp::max_pool &&
         reads_conv && last_read[i] == i + 1 && threads >= 2 && !omp_in_parallel() &&
         (images % threads == 0 || images >= 4 * threads);  // (shares of whole images near equal)
}

Tensor run_conv_max_pool(const IntLayer& cl, const IntLayer& pl, const Tensor& x, GemmKernel kernel) {
  check_conv_input(cl, x);
  QAT_CHECK(!cl.depthwise() && !cl.dequantize && pl.op == IntOp::max_pool, "integer conv '", cl.name,
            "' and max pool '", pl.name, "': only a dense convolution writing integers runs with the pool after it");
  const DenseConv conv(cl, x, kernel, false);
  const PoolShape image = max_pool_shape(pl.pool, 1, conv.OH, conv.OW, conv.CO);
  Tensor y = Tensor::empty({conv.N, image.out_h, image.out_w, conv.CO}, DType::u8);
  uint8_t* yd = y.data<uint8_t>();
  const int64_t per_image = conv.P * conv.CO, pooled = image.out_h * image.out_w * conv.CO;
#pragma omp parallel
  {
    ConvBuffers& b = conv.buffers();
    thread_local AlignedVector<uint8_t> conv_out;
    grow(conv_out, static_cast<size_t>(per_image));
    // (the pool's own parallel loop runs on this thread alone in here)
#pragma omp for schedule(static)
    for (int64_t n = 0; n < conv.N; ++n) {
      conv.rows_in_chunks(n * conv.P, (n + 1) * conv.P, b, conv_out.data());
      max_pool_u8(conv_out.data(), image, yd + n * pooled);
    }
  }
  return y;
}

namespace {

// Padding up to the kernel size (beyond it an output sees only padding).
ActShape infer_conv(const IntLayer& l, const ActShape& in) {
  need_image(l, in);
  QAT_CHECK(in.c == l.in_channels, "integer conv '", l.name, "': input has ", in.c, " channels, the layer expects ",
            l.in_channels);
  const auto& p = l.conv;
  QAT_CHECK(p.pad_h <= l.kernel_h && p.pad_w <= l.kernel_w, "integer conv '", l.name, "': padding ", p.pad_h, "x",
            p.pad_w, " exceeds the kernel ", l.kernel_h, "x", l.kernel_w);
  const int64_t oh = conv_out_size(in.h, l.kernel_h, p.stride_h, p.pad_h, p.dil_h, "integer conv");
  const int64_t ow = conv_out_size(in.w, l.kernel_w, p.stride_w, p.pad_w, p.dil_w, "integer conv");
  return checked_shape(l, {oh, ow, l.out_channels, false});
}

}  // namespace

}  // namespace qat::quant::ops

namespace qat::quant {
extern constinit const IntOpDef kConvOp{IntOp::conv,          "conv",         kMatmul | kConvGeometry, ops::run_conv,
                                        ops::finalize_matmul, ops::infer_conv};
}  // namespace qat::quant
