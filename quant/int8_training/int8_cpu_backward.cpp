// INT8 training's backward on the CPU (int8_cpu.h): dY quantized into G and
// Gx (grad_rows.h), the weight- and input-gradient GEMMs, col2im, the bias
// gradient (Note [INT8 training GEMMs]).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "core/profiler.h"
#include "quant/int8_training/grad_rows.h"
#include "quant/int8_training/int8_cpu.h"
#include "quant/int8_training/int8_math.h"
#include "quant/integer/int8_gemm_packed.h"

namespace qat::quant::int8_cpu {

bool packed_weight_grad(const Geom& g) { return packed_backward() && !g.depthwise(); }

namespace {

// ---------------------------------------------------------------- backward
// A block of rows quantized in two passes (grad_rows.h), on this thread's
// buffers: each row copied contiguous into v, its integers into G (and as
// floats into qf), then the cosine sums of its kSumChunk-long chunks, eight
// at a time, folded per row in order (Note [INT8 training sums in chunks]).
struct RowBlock {
  std::vector<float> v, qf;
  std::vector<int64_t> start, len;
  std::vector<GradQuantStats> parts;
  void reset(int64_t rows, int64_t row_len) {
    v.resize(static_cast<size_t>(rows * row_len));
    qf.resize(v.size());
    start.clear(), len.clear();
  }
  // Row r's chunks as items.
  void add_row_items(int64_t r, int64_t row_len) {
    for (int64_t b = 0; b < row_len; b += int8_math::kSumChunk) {
      start.push_back(r * row_len + b);
      len.push_back(std::min(int8_math::kSumChunk, row_len - b));
    }
  }
  // The items' sums, then row r's fold (rows of equal length, in order).
  void stats(GradStatsKernel kernel, int64_t rows, int64_t row_len, GradQuantStats* per_row) {
    parts.resize(start.size());
    chunk_stats(kernel, v.data(), qf.data(), start.data(), len.data(), static_cast<int64_t>(start.size()),
                parts.data());
    const int64_t chunks = int8_math::sum_chunks(row_len);
    for (int64_t r = 0; r < rows; ++r) {
      GradQuantStats sum;
      for (int64_t c = 0; c < chunks; ++c) sum.add(parts[static_cast<size_t>(r * chunks + c)]);
      per_row[r] = sum;
    }
  }
};

// Rows per block: enough chunks to fill the eight lanes of chunk_stats.
int64_t rows_per_block(int64_t row_len, int64_t rows) {
  return std::clamp<int64_t>(8 / std::max<int64_t>(int8_math::sum_chunks(row_len), 1), 1, std::max<int64_t>(rows, 1));
}

// Quantizes dY (N, O, P) into G (O, M), row o holding the gradients of output
// channel o; stats summed per row, rows in order (thread-count independent).
GradQuantStats quantize_g(const float* dy, const Geom& g, const int8_math::GradQuantizer& q, int8_t* G, int64_t* gsum) {
  QAT_PROFILE("int8_train.quantize_g");
  const int64_t O = g.o, P = g.P(), M = g.M();
  const GradStatsKernel kernel = best_grad_stats_kernel();
  const int64_t B = rows_per_block(M, O), blocks = (O + B - 1) / B;
  std::vector<GradQuantStats> per(static_cast<size_t>(O));
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    thread_local RowBlock rb;
    const int64_t o0 = blk * B, rows = std::min(B, O - o0);
    rb.reset(rows, M);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t o = o0 + r;
      float* row = rb.v.data() + r * M;
      for (int64_t n = 0; n < g.n; ++n) std::copy_n(dy + (n * O + o) * P, P, row + n * P);
      gsum[o] = quantize_run(kernel, row, M, q.inv, q.qmax, q.rounding, q.mixed_key, static_cast<uint64_t>(o * M),
                             G + o * M, rb.qf.data() + r * M);
      rb.add_row_items(r, M);
    }
    rb.stats(kernel, rows, M, per.data() + o0);
  }
  GradQuantStats total;
  for (const GradQuantStats& s : per) total.add(s);
  return total;
}

// Quantizes dY * s_w[o] into Gx (M, O); stats per image n, in order.
GradQuantStats quantize_gx(const float* dy, const Geom& g, const std::vector<float>& ws,
                           const int8_math::GradQuantizer& q, int8_t* Gx) {
  QAT_PROFILE("int8_train.quantize_gx");
  const int64_t O = g.o, P = g.P(), L = P * O;  // image n's row: (p, o) in order
  const GradStatsKernel kernel = best_grad_stats_kernel();
  std::vector<GradQuantStats> per(static_cast<size_t>(g.n));
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < g.n; ++n) {
    thread_local RowBlock rb;
    rb.reset(1, L);
    float* row = rb.v.data();
    scaled_transpose(kernel, dy + n * O * P, O, P, ws.data(), row);
    quantize_run(kernel, row, L, q.inv, q.qmax, q.rounding, q.mixed_key, static_cast<uint64_t>(n * L), Gx + n * L,
                 rb.qf.data());
    rb.add_row_items(0, L);
    rb.stats(kernel, 1, L, per.data() + n);
  }
  GradQuantStats total;
  for (const GradQuantStats& s : per) total.add(s);
  return total;
}

// dWq (O, K) = s_G s_x (sum_m G[o][m] u[m][k] - zx gsum[o]) as one s8 x s8
// GEMM of G (O, M) and col = u - 128 (K, M): sum_m G u = C + 128 gsum[o].
// M is summed in chunks of 2^16 (int32 accumulators), chunks in int64. The
// GEMM's own correction (- 128 colsum[k], gemm_s8s8s32_shifted) is folded
// into the pass that reads its result: one pass over O x K, not two.
Tensor weight_grad_unpacked(const std::vector<uint8_t>& u, const ActGrid& grid, const int8_t* G, const int64_t* gsum,
                            float scale_g, const Geom& g, uint8_t pad, GemmKernel kernel) {
  const int64_t M = g.M(), K = g.K(), O = g.o;
  int8_t* col = scratch<int8_t>(kCol, K * M);
  im2col_nchw(u.data(), window_of(g), g.n, pad, col);
  constexpr int64_t kChunk = int64_t{1} << 16;
  int32_t* acc = scratch<int32_t>(kAcc, O * K);
  std::vector<int32_t> colsum(static_cast<size_t>(K));
  std::vector<int64_t> total;
  for (int64_t m0 = 0; m0 < M; m0 += kChunk) {
    const int64_t len = std::min(kChunk, M - m0);
    {
      QAT_PROFILE("int8_train.gemm_dw");
      gemm_s8s8s32_shifted(kernel, O, K, len, G + m0, M, col + m0, M, acc, K, colsum.data());
    }
    if (M <= kChunk) break;
    if (total.empty()) total.assign(static_cast<size_t>(K * O), 0);
    for (int64_t o = 0; o < O; ++o)
      for (int64_t k = 0; k < K; ++k) total[o * K + k] += int64_t{acc[o * K + k]} - 128 * int64_t{colsum[k]};
  }
  Tensor dw = Tensor::empty({O, K});
  float* pd = dw.data<float>();
  const double s = static_cast<double>(scale_g) * static_cast<double>(grid.scale);
#pragma omp parallel for schedule(static)
  for (int64_t o = 0; o < O; ++o) {
    const double corr = (128.0 - grid.zero) * static_cast<double>(gsum[o]);
    for (int64_t k = 0; k < K; ++k) {
      const int64_t c = total.empty() ? int64_t{acc[o * K + k]} - 128 * int64_t{colsum[k]} : total[o * K + k];
      const double a = static_cast<double>(c);
      pd[o * K + k] = static_cast<float>(s * (a + corr));
    }
  }
  return dw;
}

// Note [the weight gradient in blocks of M]: the kernel runs each 6 x 64
// tile of dW over all of M, so every tile of G's rows streams its 64 columns
// of the packed rows (64 M bytes: 2 MB for ResNet-18's layer 1 at 128 px)
// from L3. Where M is longer than kBlockM, the rows are packed and
// multiplied a block of M at a time (its columns then stay in L2 while the
// tiles pass), the blocks' int32 sums added in int64: the same integers,
// so the same floats as the unblocked kernel (whose int32 sums hold up to
// M = 2^16) and as weight_grad_unpacked (for any M: the stem of a network
// at 128 px has 2^17 rows).
//
// block(m0, len, sums): the packed rows [m0, m0 + len) (their N column
// sums of u - 128 into sums), blocks of `rows` rows. One block: the GEMM's
// tiles leave dW as floats; more: their int32 sums added in int64 first.
template <class Block>
Tensor weight_grad_in_blocks(int64_t rows, const int8_t* G, const double* corr, double scale, const Geom& g,
                             Block block) {
  const int64_t M = g.M(), K = g.K(), O = g.o, N = (K + 63) / 64 * 64;
  const GemmKernel kernel = int8_gemm_kernel();
  std::vector<int32_t> part_sums(static_cast<size_t>(N));
  Tensor dw = Tensor::empty({O, K});
  float* pd = dw.data<float>();
  if (M <= rows) {
    const PackedB& packed = block(0, M, part_sums.data());
    QAT_PROFILE("int8_train.gemm_dw");
    const DequantEpilogue e{K, part_sums.data(), corr, scale};
    gemm_s8s8_packed_dequant(kernel, O, G, M, packed, e, pd, K);
    return dw;
  }
  std::vector<int64_t> sums(static_cast<size_t>(N), 0), acc(static_cast<size_t>(O * N), 0);
  std::vector<int32_t> part(static_cast<size_t>(O * N));
  for (int64_t m0 = 0; m0 < M; m0 += rows) {
    const PackedB& packed = block(m0, std::min(rows, M - m0), part_sums.data());
    QAT_PROFILE("int8_train.gemm_dw");
    gemm_s8s8s32_packed_offset(kernel, O, G + m0, M, packed, part.data(), N);
    for (int64_t i = 0; i < O * N; ++i) acc[i] += part[i];
    for (int64_t n = 0; n < N; ++n) sums[n] += part_sums[n];
  }
#pragma omp parallel for schedule(static)
  for (int64_t o = 0; o < O; ++o)
    for (int64_t k = 0; k < K; ++k)  // (DequantEpilogue::value's operations, on the int64 sums)
      pd[o * K + k] = static_cast<float>(scale * (static_cast<double>(acc[o * N + k] - 128 * sums[k]) + corr[o]));
  return dw;
}

// The packed VNNI kernel: B = col is packed from its transpose, the im2row
// rows u (M x K; a linear layer's input itself), read as u - 128 with the
// column sums; G is read as G + 128 by the kernel: dWq = s (C - 128
// colsum[k] + (128 - zx) gsum[o]) with the same double operations as above.
// The rows as the forward left them: plain (packed here, kBlockM at a
// time), or packed (Note [the weight gradient's rows packed in the forward]).
Tensor weight_grad_packed(const uint8_t* rows, const PackedRows* pr, const ActGrid& grid, const int8_t* G,
                          const int64_t* gsum, float scale_g, const Geom& g) {
  const int64_t K = g.K(), O = g.o;
  std::vector<double> corr(static_cast<size_t>(O));
  for (int64_t o = 0; o < O; ++o) corr[o] = (128.0 - grid.zero) * static_cast<double>(gsum[o]);
  const double scale = static_cast<double>(scale_g) * static_cast<double>(grid.scale);
  if (pr) {
    PackedB view;
    const auto in_place = [&](int64_t m0, int64_t len, int32_t* sums) -> const PackedB& {
      view.N = pr->n, view.K = len, view.K4 = len / 4;
      view.view = reinterpret_cast<const int8_t*>(pr->bytes.data<uint8_t>() + m0 * pr->n);
      view.view_bytes = pr->bytes.numel() - m0 * pr->n;
      std::fill(sums, sums + pr->n, 0);
      for (int64_t s0 = m0; s0 < m0 + len; s0 += pr->segment)
        for (int64_t n = 0; n < pr->n; ++n) sums[n] += pr->sums[static_cast<size_t>(s0 / pr->segment * pr->n + n)];
      return view;
    };
    return weight_grad_in_blocks(pr->block, G, corr.data(), scale, g, in_place);
  }
  thread_local PackedB packed;
  const auto packed_here = [&](int64_t m0, int64_t len, int32_t* sums) -> const PackedB& {
    QAT_PROFILE("int8_train.pack_rows");
    pack_b_vnni_transposed(reinterpret_cast<const int8_t*>(rows + m0 * K), len, K, K, packed, sums, true,
                           int8_gemm_kernel());
    return packed;
  };
  return weight_grad_in_blocks(kBlockM, G, corr.data(), scale, g, packed_here);
}

// rows (or, packed, pr): the forward's im2row rows where packed_weight_grad(g).
Tensor weight_grad(const std::vector<uint8_t>& u, const uint8_t* rows, const PackedRows* pr, const ActGrid& grid,
                   const int8_t* G, const int64_t* gsum, float scale_g, const Geom& g, uint8_t pad) {
  QAT_PROFILE("int8_train.weight_grad_gemm");
  if (rows || pr) return weight_grad_packed(rows, pr, grid, G, gsum, scale_g, g);
  return weight_grad_unpacked(u, grid, G, gsum, scale_g, g, pad, int8_gemm_kernel());
}

// The GEMM result acc (M x K, row stride ldc; less 128 sums[k] when given)
// to dXq = s_Gx col2im(acc), image by image on the threads (each image's
// planes are its own). tile(n, acc_n): fills image n's rows of acc first
// where the GEMM runs per image (null: acc already holds every row).
template <class Tile>
Tensor col2im_scaled(const int32_t* acc, int64_t ldc, const int32_t* sums, float scale_gx, const Geom& g, Tile tile) {
  Tensor dx = Tensor::empty({g.n, g.c, g.h, g.w});
  float* pd = dx.data<float>();
  const int64_t pixels = g.c * g.h * g.w, P = g.P(), K = g.K();
  const Im2RowShape window = window_of(g);
  const int64_t padded = padded_planes_elems(window);
  const double s = static_cast<double>(scale_gx);
  std::vector<int64_t> off(sums ? static_cast<size_t>(K) : 0);
  for (int64_t k = 0; k < static_cast<int64_t>(off.size()); ++k) off[k] = 128 * int64_t{sums[k]};
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < g.n; ++n) {
    const int32_t* rows = tile(n, acc ? acc + n * P * ldc : nullptr);
    int64_t* planes = scratch<int64_t>(kSum, padded);
    col2im_nchw(rows, ldc, sums ? off.data() : nullptr, window, planes);
    planes_to_float(planes, window, s, pd + n * pixels);
  }
  return dx;
}

// dXq = s_Gx * col2im(Gx W) with the col2im sums in int64 (the unpacked
// kernels: W transposed, then gemm_s8s8s32_shifted, its correction applied
// by col2im).
Tensor input_grad_unpacked(const int8_t* Gx, float scale_gx, const QuantCodes& wi, const Geom& g, GemmKernel kernel) {
  const int64_t M = g.M(), K = g.K(), O = g.o;
  int8_t* wt = scratch<int8_t>(kWt, K * O);
  {
    QAT_PROFILE("int8_train.transpose_w");
    transpose_bytes(wi.q.get(), O, K, wt);
  }
  int32_t* acc = scratch<int32_t>(kAcc, M * K);
  std::vector<int32_t> sums(static_cast<size_t>(K));
  {
    QAT_PROFILE("int8_train.gemm_dx");
    gemm_s8s8s32_shifted(kernel, M, K, O, Gx, O, wt, O, acc, K, sums.data());
  }
  QAT_PROFILE("int8_train.col2im");  // (its pass applies the GEMM's correction, - 128 sums[k])
  return col2im_scaled(acc, K, sums.data(), scale_gx, g, [](int64_t, const int32_t* rows) { return rows; });
}

// The same on the packed VNNI kernel: W packed straight from its rows (no
// transpose) with its column sums, Gx read as Gx + 128 by the kernel itself
// (no shifted copy). Linear layers: one GEMM, then the scaling; convolutions:
// image by image on the threads, each image's GEMM rows turned into its input
// planes while they are in cache (no M x K buffer through memory).
Tensor input_grad_packed(const int8_t* Gx, float scale_gx, const QuantCodes& wi, const Geom& g) {
  const int64_t M = g.M(), K = g.K(), O = g.o, P = g.P();
  thread_local PackedB reused;  // the caller's, shared with the threads below
  PackedB& packed = reused;
  std::vector<int32_t> sums(static_cast<size_t>((K + 63) / 64 * 64));
  {
    QAT_PROFILE("int8_train.pack_w");
    pack_b_vnni_transposed(wi.q.get(), O, K, K, packed, sums.data(), false, int8_gemm_kernel());
  }
  const int64_t ldc = packed.N;
  if (is_1x1(g)) {
    int32_t* acc = scratch<int32_t>(kAcc, M * ldc);
    {
      QAT_PROFILE("int8_train.gemm_dx");
      gemm_s8s8s32_packed_offset(int8_gemm_kernel(), M, Gx, O, packed, acc, ldc);
    }
    QAT_PROFILE("int8_train.col2im");
    return col2im_scaled(acc, ldc, sums.data(), scale_gx, g, [](int64_t, const int32_t* rows) { return rows; });
  }
  QAT_PROFILE("int8_train.gemm_dx_col2im");
  const GemmKernel kernel = int8_gemm_kernel();
  return col2im_scaled(nullptr, ldc, sums.data(), scale_gx, g, [&](int64_t n, const int32_t*) {
    int32_t* acc = scratch<int32_t>(kAcc, P * ldc);  // this thread's
    gemm_s8s8s32_packed_offset(kernel, P, Gx + n * P * O, O, packed, acc, ldc);
    return static_cast<const int32_t*>(acc);
  });
}

// Note [the input gradient as a convolution]
// At stride 1, dX = s_Gx col2im(Gx W) is the convolution of Gx (O channels,
// oh x ow, NHWC: the GEMM's rows) with W's taps turned around and its
// channels swapped, padding d (k - 1) - p on each side:
//   dX[c][y][x] = sum over o and taps (i, j) of
//                 Gx[o][y + p - i d][x + p - j d] W[o][c][i][j]   (outside: 0)
// as one GEMM per image of Gx's windows (h w rows of kh kw O bytes) by B
// (c rows: B[c][(i', j', o)] = W[o][c][kh-1-i'][kw-1-j']). Its output is
// h w x c, not oh ow x c kh kw: no col2im, and the GEMM's sums run over
// kh kw O instead of O. The same integers (every sum exact: kh kw O 255 128
// < 2^31), so the same floats as the col2im form. The packed kernel reads
// Gx + 128 (padding: Gx = 0, read 128 as every other byte), hence
// - 128 sum_k B[c][k].
//
// Note [the strided input gradient in phases]: at stride s, Gx's row
// (y + p - i d) / s exists only where s divides y + p - i d. The input rows
// y = s a + py of one phase py (0 <= py < s) take the taps i of one residue
// class (the largest such i, then every s / gcd(s, d)-th below it) from
// Gx's rows a + off_i, off_i = (py + p - i d) / s, which step by
// d / gcd(s, d): a stride-1 convolution of Gx with those taps, as above. The s_h s_w phases
// hold every tap once between them: the GEMM's products, without its
// oh ow x c kh kw int32 sums and their col2im in int64 (ResNet's
// downsampling 3x3 convolutions). A phase no tap reaches (k < s, or a
// dilation sharing a factor with s) is 0. Where a phase's first tap would
// read below Gx's first row (its padding negative: p large against k and
// s), the layer takes the GEMM and col2im instead (phases_fit).

// One dimension of phase ph: its taps first, first - step, ... (`taps` of
// them; none where no tap reaches it), the window over Gx they make (its
// padding: the first tap's offset, negated; its dilation) and the input
// rows (or columns) it covers.
struct PhaseAxis {
  int64_t taps = 0, first = 0, step = 1, pad = 0, dil = 1, out = 0;
};

PhaseAxis phase_axis(int64_t ph, int64_t k, int64_t s, int64_t p, int64_t d, int64_t in) {
  PhaseAxis a;
  a.out = ph < in ? (in - ph + s - 1) / s : 0;
  a.step = s / std::gcd(s, d);
  a.dil = d / std::gcd(s, d);
  int64_t first = k - 1;  // (ph + p - i d may be negative: % keeps its sign, 0 either way)
  while (first >= 0 && (ph + p - first * d) % s != 0) --first;
  if (first < 0) return a;
  a.first = first;
  a.taps = first / a.step + 1;
  a.pad = -(ph + p - first * d) / s;
  return a;
}

bool phases_fit(const Geom& g) {
  for (int64_t py = 0; py < g.stride_h; ++py)
    if (phase_axis(py, g.kh, g.stride_h, g.pad_h, g.dil_h, g.h).pad < 0) return false;
  for (int64_t px = 0; px < g.stride_w; ++px)
    if (phase_axis(px, g.kw, g.stride_w, g.pad_w, g.dil_w, g.w).pad < 0) return false;
  return true;
}

// Phase (py, px)'s B (c rows of its taps x O) packed, with - 128 each row's
// sum, and, at stride > 1, where its output rows go in an input plane (at
// stride 1 the one phase's rows are the plane's positions in order).
struct Phase {
  PhaseAxis y, x;
  PackedB packed;
  std::vector<int64_t> corr, at;
};

// wt: the weight's codes transposed (K x O), so that each tap's O bytes are one row.
Phase make_phase(const int8_t* wt, const Geom& g, int64_t py, int64_t px) {
  Phase ph;
  ph.y = phase_axis(py, g.kh, g.stride_h, g.pad_h, g.dil_h, g.h);
  ph.x = phase_axis(px, g.kw, g.stride_w, g.pad_w, g.dil_w, g.w);
  const int64_t O = g.o, C = g.c, KK = g.kh * g.kw, KB = ph.y.taps * ph.x.taps * O;
  if (g.stride_h * g.stride_w > 1)
    for (int64_t a = 0; a < ph.y.out; ++a)
      for (int64_t b = 0; b < ph.x.out; ++b) ph.at.push_back((a * g.stride_h + py) * g.w + b * g.stride_w + px);
  if (KB == 0) return ph;
  std::vector<int8_t> b(static_cast<size_t>(C * KB));
  ph.corr.assign(static_cast<size_t>(C), 0);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t ti = 0; ti < ph.y.taps; ++ti)
      for (int64_t tj = 0; tj < ph.x.taps; ++tj) {
        const int64_t i = ph.y.first - ti * ph.y.step, j = ph.x.first - tj * ph.x.step;
        const int8_t* tap = wt + (c * KK + i * g.kw + j) * O;
        std::memcpy(b.data() + c * KB + (ti * ph.x.taps + tj) * O, tap, static_cast<size_t>(O));
        int64_t sum = 0;
        for (int64_t o = 0; o < O; ++o) sum += tap[o];
        ph.corr[c] += 128 * sum;
      }
  ph.packed = pack_b_vnni(b.data(), C, KB, KB);
  return ph;
}

// A phase's NHWC sums (Q x C, ldc) to its places in the NCHW planes as
// floats, 64 positions at a time (their sums stay in L1 while each
// channel's run is written).
void phase_to_planes(const int32_t* acc, int64_t ldc, const Phase& ph, double s, int64_t C, int64_t HW, float* out) {
  const int64_t Q = ph.y.out * ph.x.out;
  const int64_t* at = ph.at.data();
  const bool dense = ph.at.empty();  // (stride 1: places 0, 1, ...)
  for (int64_t q0 = 0; q0 < Q; q0 += 64) {
    const int64_t q1 = std::min(Q, q0 + 64);
    for (int64_t c = 0; c < C; ++c) {
      const int64_t corr = ph.corr[static_cast<size_t>(c)];
      float* plane = out + c * HW;
      if (dense) {  // (contiguous runs, on vector lanes)
        for (int64_t q = q0; q < q1; ++q)
          plane[q] = static_cast<float>(s * static_cast<double>(int64_t{acc[q * ldc + c]} - corr));
        continue;
      }
      float run[64];  // (the values on vector lanes first, then to their strided places)
      for (int64_t q = q0; q < q1; ++q)
        run[q - q0] = static_cast<float>(s * static_cast<double>(int64_t{acc[q * ldc + c]} - corr));
      for (int64_t q = q0; q < q1; ++q) plane[at[q]] = run[q - q0];
    }
  }
}

bool input_grad_as_conv(const Geom& g, GemmKernel kernel) {
  return packed_backward() && !is_1x1(g) && !g.depthwise() && g.kh * g.kw * g.o <= 65536 &&
         can_use_packed(kernel, g.c) && phases_fit(g);
}

Tensor input_grad_conv(const int8_t* Gx, float scale_gx, const QuantCodes& wi, const Geom& g, GemmKernel kernel) {
  QAT_PROFILE("int8_train.input_grad_conv");
  const int64_t O = g.o, C = g.c, HW = g.h * g.w, S = g.stride_h * g.stride_w;
  int8_t* wt = scratch<int8_t>(kWt, g.K() * O);
  transpose_bytes(wi.q.get(), O, g.K(), wt);
  std::vector<Phase> phases;
  for (int64_t py = 0; py < g.stride_h; ++py)
    for (int64_t px = 0; px < g.stride_w; ++px) phases.push_back(make_phase(wt, g, py, px));
  int64_t most_rows = 0, most_bytes = 0;
  for (const Phase& ph : phases) {
    most_rows = std::max(most_rows, ph.y.out * ph.x.out);
    most_bytes = std::max(most_bytes, ph.y.out * ph.x.out * ph.y.taps * ph.x.taps * O);
  }
  Tensor dx = Tensor::empty({g.n, C, g.h, g.w});
  float* pd = dx.data<float>();
  const double s = static_cast<double>(scale_gx);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < g.n; ++n) {
    uint8_t* rows = scratch<uint8_t>(kCol, most_bytes);
    int32_t* acc = scratch<int32_t>(kAcc, most_rows * ((C + 63) / 64 * 64));
    float* out = pd + n * C * HW;
    for (int64_t f = 0; f < S; ++f) {
      const Phase& ph = phases[static_cast<size_t>(f)];
      const int64_t OH = ph.y.out, OW = ph.x.out, Q = OH * OW;
      if (ph.y.taps * ph.x.taps == 0) {  // no tap reaches these positions
        for (int64_t c = 0; c < C; ++c)
          for (const int64_t at : ph.at) out[c * HW + at] = 0.f;
        continue;
      }
      const int64_t KB = ph.y.taps * ph.x.taps * O, ldc = ph.packed.N;
      const Im2RowShape window{g.oh,     g.ow,     O,  ph.y.taps, ph.x.taps, 1, 1, ph.y.pad, ph.x.pad,
                               ph.y.dil, ph.x.dil, OH, OW};
      im2row_u8_range(reinterpret_cast<const uint8_t*>(Gx + n * g.P() * O), window, 0, 0, Q, rows);
      gemm_s8s8s32_packed_offset(kernel, Q, reinterpret_cast<const int8_t*>(rows), KB, ph.packed, acc, ldc);
      phase_to_planes(acc, ldc, ph, s, C, HW, out);
    }
  }
  return dx;
}

Tensor input_grad(const int8_t* Gx, float scale_gx, const QuantCodes& wi, const Geom& g) {
  QAT_PROFILE("int8_train.input_grad_gemm");
  if (input_grad_as_conv(g, int8_gemm_kernel())) return input_grad_conv(Gx, scale_gx, wi, g, int8_gemm_kernel());
  if (packed_backward()) return input_grad_packed(Gx, scale_gx, wi, g);
  return input_grad_unpacked(Gx, scale_gx, wi, g, int8_gemm_kernel());
}

Tensor bias_grad(const float* dy, const Geom& g) {
  Tensor db = Tensor::empty({g.o});
  const int64_t P = g.P();
#pragma omp parallel for schedule(static)
  for (int64_t o = 0; o < g.o; ++o) {
    double acc = 0, part = 0;  // Note [INT8 training sums in chunks]
    int64_t count = 0;
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t p = 0; p < P; ++p) {
        part += dy[(n * g.o + o) * P + p];
        if (++count == int8_math::kSumChunk) acc += part, part = 0, count = 0;
      }
    if (count > 0) acc += part;
    db.data<float>()[o] = static_cast<float>(acc);
  }
  return db;
}

// dY * s_w[o] (the values Gx quantizes), on the host.
std::vector<float> scaled_dy(const CpuStages::Saved& sv, const Tensor& dy) {
  const float* p = dy.data<float>();
  const int64_t P = sv.g.P(), O = sv.g.o, planes = sv.g.n * O;
  std::vector<float> v(static_cast<size_t>(planes * P));
  for (int64_t i = 0; i < planes; ++i) {
    const float s = sv.wi->scale[i % O];
    for (int64_t k = 0; k < P; ++k) v[i * P + k] = p[i * P + k] * s;
  }
  return v;
}

// max |dY s_w[o]|: NaN if one is NaN (nan_wins), else the first non-finite
// value in index order where there is one. Plane by plane, or where planes
// are shorter than the lanes (4x4 maps) image by image against each
// position's scale, so that they run in vector registers too.
float scaled_max_abs(const CpuStages::Saved& sv, const float* p, bool nan_wins) {
  const int64_t P = sv.g.P(), O = sv.g.o;
  const float* scale = sv.wi->scale.data();
  const bool by_image = P < 64;
  std::vector<float> repeated(by_image ? static_cast<size_t>(O * P) : 0);
  for (int64_t i = 0; i < static_cast<int64_t>(repeated.size()); ++i) repeated[i] = scale[i / P];
  const int64_t len = by_image ? O * P : P, units = by_image ? sv.g.n : sv.g.n * O;
  std::vector<SpanAbsMax> per(static_cast<size_t>(units));
#pragma omp parallel for schedule(static)
  for (int64_t u = 0; u < units; ++u)
    per[u] = by_image ? abs_max_lanes(p + u * len, len, [r = repeated.data()](int64_t i) { return r[i]; })
                      : span_abs_max(p + u * len, len, scale[u % O]);
  float m = 0.f;
  for (int64_t u = 0; u < units; ++u) {
    const SpanAbsMax& r = per[u];
    if (nan_wins && r.nan) return std::numeric_limits<float>::quiet_NaN();
    if (!nan_wins && r.non_finite)
      for (int64_t i = u * len;; ++i) {  // (the unit has one)
        const float a = std::abs(p[i] * scale[(i / P) % O]);
        if (!std::isfinite(a)) return a;
      }
    m = std::max(m, r.max);
  }
  return m;
}

}  // namespace

float CpuStages::max_abs(const Saved& sv, const Tensor& dy, int which, bool nan_wins) const {
  const float* p = dy.data<float>();
  if (which == 0) return quant::max_abs(p, dy.numel());  // (tracked and refreshed alike: any NaN wins)
  return scaled_max_abs(sv, p, nan_wins);
}

void CpuStages::refresh_clip(const Saved& sv, const Tensor& dy, int which, Int8GradState& st) const {
  if (which == 0) return st.refresh_clip(0, dy.data<float>(), dy.numel());
  const std::vector<float> v = scaled_dy(sv, dy);
  st.refresh_clip(1, v.data(), dy.numel());
}

CpuStages::Codes CpuStages::quantize(const Saved& sv, const Tensor& dy, int which,
                                     const int8_math::GradQuantizer& q) const {
  const Geom& g = sv.g;
  Codes c;
  c.q.assign(static_cast<size_t>(g.o * g.M()), 0);
  if (which == 0) {
    c.gsum.assign(static_cast<size_t>(g.o), 0);
    c.stats = quantize_g(dy.data<float>(), g, q, c.q.data(), c.gsum.data());
  } else {
    c.stats = quantize_gx(dy.data<float>(), g, sv.wi->scale, q, c.q.data());
  }
  return c;
}

Tensor CpuStages::weight_grad(const Saved& sv, const Codes& c, float scale) const {
  const Geom& g = sv.g;
  // The rows the packed kernel reads (the kernel may have changed since the forward: tests).
  const uint8_t* rows = !packed_weight_grad(g) ? nullptr
                        : sv.rows.defined()    ? sv.rows.data<uint8_t>()
                        : is_1x1(g)            ? sv.u->data()
                                               : nullptr;
  // (packed by the forward for the AVX-512 VNNI kernel: another kernel since, the rows from u)
  const PackedRows* pr = sv.packed.defined() && int8_gemm_kernel() == GemmKernel::avx512_vnni ? &sv.packed : nullptr;
  Tensor dw = g.depthwise()
                  ? depthwise_weight_grad(*sv.u, sv.pad, sv.grid, c.q.data(), c.gsum.data(), scale, g)
                  : int8_cpu::weight_grad(*sv.u, rows, pr, sv.grid, c.q.data(), c.gsum.data(), scale, g, sv.pad);
  if ((rows || pr) && rows_in_nhwc_order(g)) {
    // dW computed from the kept rows: its columns back into the weight's (c, ki, kj) order.
    Tensor back = Tensor::empty({g.o, g.K()});
    transpose_within_rows(dw.data<float>(), g.o, g.kh * g.kw, g.c, back.data<float>());
    dw = back;
  }
  if (sv.apply_ste) {
    // dw = dwq * mask, as fake_quantize's backward (NaN * 0 stays NaN).
    float* pd = dw.data<float>();
    for (const int64_t i : sv.wi->clipped) pd[i] *= 0.f;
  }
  return dw;
}

Tensor CpuStages::input_grad(const Saved& sv, const Codes& c, float scale) const {
  if (sv.g.depthwise()) return depthwise_input_grad(c.q.data(), scale, *sv.wi, sv.g);
  return int8_cpu::input_grad(c.q.data(), scale, *sv.wi, sv.g);
}

Tensor CpuStages::bias_grad(const Saved& sv, const Tensor& dy) const {
  return int8_cpu::bias_grad(dy.data<float>(), sv.g);
}

}  // namespace qat::quant::int8_cpu
