// INT8 training's forward on the CPU (int8_cpu.h): the operands' integers,
// the forward GEMM and its dequantization; the kernel choice.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/profiler.h"
#include "quant/int8_training/int8_cpu.h"
#include "quant/int8_training/int8_math.h"
#include "quant/integer/int8_gemm_packed.h"
#include "quant/integer/simd.h"

namespace qat::quant::int8_cpu {

std::optional<GemmKernel>& kernel_override() {
  static std::optional<GemmKernel> k;
  return k;
}
GemmKernel int8_gemm_kernel() { return kernel_override().value_or(best_gemm_kernel()); }
// Whether kernel k multiplies packed operands (int8_gemm_packed.h): both
// VNNI kernels and the AVX2 one (avx_vnni's and avx2's operands packed with
// AVX2 code), and both AMX ones where the CPU has AVX-512 VNNI (their
// packing's code).
bool packs(GemmKernel k) {
  if (k == GemmKernel::avx_vnni) return cpu_has_avx_vnni();
  if (k == GemmKernel::avx2) return cpu_has_avx2();
  return (k == GemmKernel::avx512_vnni || is_amx(k)) && cpu_has_avx512_vnni();
}
// Whether the backward GEMMs run on packed operands.
bool packed_backward() { return packs(int8_gemm_kernel()); }

// How the integer forward's errors name a layer (INT8 training's: int8_training_who).
std::string int_forward_who(const std::string& layer) { return "quant.integer_forward: layer " + layer; }

int32_t grid_codes(const float* __restrict x, int64_t n, const InputRule& rule, uint8_t* __restrict u) {
  const InputRule r = rule;
  int32_t off = 0;
#pragma omp simd reduction(| : off)
  for (int64_t i = 0; i < n; ++i) off |= r(x[i], u[i]);
  return off;
}

namespace {
int32_t centred_grid_codes_double(const float* __restrict x, int64_t n, const InputRule& rule, float* __restrict v) {
  const InputRule r = rule;
  int32_t off = 0;
#pragma omp simd reduction(| : off)
  for (int64_t i = 0; i < n; ++i) off |= r.centred(x[i], v[i]);
  return off;
}
}  // namespace

// InputRule::centred in float, sixteen lanes a vector where the double rule
// has eight, with the double rule's results. Its callers' zero points are
// integers in [0, 255] (Note [exact float depthwise sums]). A value on the
// grid, x = s (u - z), is one float product with |u - z| <= 255 (two with a
// training-time dropout between, Note [INT8 layer inputs]), so in float
// t = x (1/s) + z lies within 1e-4 of the double rule's t, and of u. Where
// the float t is within 9e-4 of its nearest integer, the double t is within
// 1e-3 of the same integer: the same code, on the grid by either rule. Any
// other value sends the run to the double rule, which decides as before.
int32_t centred_grid_codes(const float* __restrict x, int64_t n, const InputRule& rule, float* __restrict v) {
  const auto inv = static_cast<float>(rule.inv), zero = static_cast<float>(rule.zero),
             top = static_cast<float>(rule.top);
  int32_t off = 0;
#pragma omp simd reduction(| : off)
  for (int64_t i = 0; i < n; ++i) {
    const float t = std::fma(x[i], inv, zero), r = std::nearbyint(t);
    off |= !((std::fabs(t - r) <= 9e-4f) & (r >= 0.f) & (r < top));
    v[i] = std::min(std::max(r, 0.f), top) - zero;
  }
  return off ? centred_grid_codes_double(x, n, rule, v) : 0;
}

void fail_first_off_grid(const float* x, int64_t n, const ActGrid& grid, const std::string& who) {
  const double inv = 1.0 / static_cast<double>(grid.scale);
  for (int64_t i = 0; i < n; ++i)
    if (int8_math::input_integer(x[i], inv, grid.zero, grid.levels) < 0) fail_input_off_grid(who, x[i], i, grid);
  QAT_FAIL(who, ": an input value is off its quantizer's grid, but none was found on a second look");
}

// wq / s_w[o] as int8 (O, K) and its row sums: the integers of a weight
// that arrives fake-quantized (LSQ; the observed kinds give them directly,
// FakeQuantizer::forward_codes).
std::shared_ptr<QuantCodes> weight_integers(const Tensor& wq, const Tensor& w_scale, int64_t O, int64_t K,
                                            const std::string& who) {
  QAT_PROFILE("int8_train.weight_integers");
  check_weight_scales(who, w_scale.numel(), O);
  auto r = std::make_shared<QuantCodes>();
  r->resize(O, K);
  const float* pw = wq.data<float>();
  int8_t* pq = r->q.get();
  int64_t bad = -1;
#pragma omp parallel for schedule(static)
  for (int64_t o = 0; o < O; ++o) {
    const float s = w_scale.data<float>()[w_scale.numel() == 1 ? 0 : o];
    r->scale[o] = s;
    // wq = s * W was one float product of an integer |W| <= 128, so
    // wq * (1/s) lands within a few ulps of W.
    const float inv = 1.f / s;
    int64_t sum = 0;
    int32_t off_grid = 0;
    const float* row = pw + o * K;
    int8_t* qrow = pq + o * K;
    // int8_math::weight_code's rule, written so that the compiler vectorises
    // it (a weight the size of AlexNet's classifier is 54 M values a step).
#pragma omp simd reduction(+ : sum) reduction(| : off_grid)
    for (int64_t k = 0; k < K; ++k) {
      bool ok = true;
      const int8_t w = int8_math::weight_code(row[k], inv, &ok);  // 0 off the grid (NaN included)
      qrow[k] = w;
      sum += w;
      off_grid |= ok ? 0 : 1;
    }
    r->rowsum[o] = sum;
    if (off_grid) {
#pragma omp critical(int8_weight_bad)
      if (bad < 0 || o < bad) bad = o;
    }
  }
  if (bad >= 0) fail_weight_row_off_grid(who, pw + bad * K, K, bad, r->scale[bad]);
  return r;
}

namespace {

// x on `grid` as integers u (N, C, H, W); a value more than 1e-3 steps off
// the grid or outside [0, levels) is an error: the layer's input must be what
// a quantizer produced. The first bad value is looked for only once one was
// seen.
std::vector<uint8_t> input_integers(const Tensor& x, const ActGrid& grid, const std::string& who) {
  QAT_PROFILE("int8_train.input_integers");
  const int64_t n = x.numel();
  std::vector<uint8_t> u(static_cast<size_t>(n));
  const float* px = x.data<float>();
  uint8_t* pu = u.data();
  const InputRule rule(grid);
  constexpr int64_t kBlock = 1 << 14;
  int32_t off_grid = 0;
#pragma omp parallel for schedule(static) reduction(| : off_grid) if (n >= (1 << 15))
  for (int64_t b = 0; b < n; b += kBlock) off_grid |= grid_codes(px + b, std::min(kBlock, n - b), rule, pu + b);
  if (off_grid) fail_first_off_grid(px, n, grid, who);
  return u;
}

// rows (n hw x c): the integers of x (n, c, hw) transposed, a 1x1 layer's
// im2row rows without u in memory: image by image, its integers made into a
// buffer that stays in cache, then transposed into its rows.
void pointwise_rows_of(const float* x, const ActGrid& grid, const Geom& g, uint8_t* rows, const std::string& who) {
  QAT_PROFILE("int8_train.pointwise_rows");
  const int64_t C = g.c, HW = g.h * g.w;
  const InputRule rule(grid);
  int32_t off_grid = 0;
#pragma omp parallel reduction(| : off_grid)
  {
    std::vector<uint8_t> image(static_cast<size_t>(C * HW));
#pragma omp for schedule(static)
    for (int64_t n = 0; n < g.n; ++n) {
      off_grid |= grid_codes(x + n * C * HW, C * HW, rule, image.data());
      transpose_planes(image.data(), C, HW, rows + n * HW * C);
    }
  }
  if (off_grid) fail_first_off_grid(x, g.n * C * HW, grid, who);
}

// ---------------------------------------------------------------- forward
// Whether the forward GEMM runs on the packed kernel: the packing copies the
// weight once a step, paid back where many rows share it (a convolution's
// output positions; not a linear layer's batch rows, which stream the weight
// once anyway), and the kernel needs O a multiple of its column block.
bool packed_forward(GemmKernel kernel, const Geom& g) {
  return packs(kernel) && g.P() > 1 && can_use_packed(kernel, g.o);
}

// The forward's dequantization: y = s[o] (acc - corr[o]) + bias[o], in
// double as written, per output channel o.
struct Dequant {
  std::vector<double> s, corr;
  const float* bias = nullptr;
};
Dequant dequant_of(const ActGrid& grid, const QuantCodes& wi, const Tensor& bias, int64_t O) {
  Dequant d;
  d.s.resize(static_cast<size_t>(O)), d.corr.resize(static_cast<size_t>(O));
  for (int64_t o = 0; o < O; ++o) {
    d.s[o] = static_cast<double>(grid.scale) * static_cast<double>(wi.scale[o]);
    d.corr[o] = grid.zero * static_cast<double>(wi.rowsum[o]);
  }
  d.bias = bias.defined() ? bias.data<float>() : nullptr;
  return d;
}

constexpr int64_t kDequantBlock = 32;  // positions a block of dequantize_block

// float(s (double(v) - corr)) of eight int32 lanes.
__attribute__((target("avx512f"))) inline __m256 dequantize_x8(__m256i v, __m512d s, __m512d corr) {
  return _mm512_cvtpd_ps(_mm512_mul_pd(s, _mm512_sub_pd(_mm512_cvtepi32_pd(v), corr)));
}

// Sixteen positions (p0..) x sixteen channels (o0..) of acc transposed in
// registers, then each channel's sixteen values through the scalar loop's
// operations on double lanes: the same bits.
__attribute__((target("avx512f"))) void dequantize_16x16(const int32_t* acc, int64_t O, int64_t p0, int64_t o0,
                                                        const Dequant& d, float* plane0, int64_t P) {
  __m512 r[16];
  for (int64_t i = 0; i < 16; ++i) r[i] = _mm512_castsi512_ps(_mm512_loadu_si512(acc + (p0 + i) * O + o0));
  simd::transpose16x16(r);
  for (int64_t j = 0; j < 16; ++j) {
    const int64_t o = o0 + j;
    const __m512i v = _mm512_castps_si512(r[j]);
    const __m512d s = _mm512_set1_pd(d.s[o]), corr = _mm512_set1_pd(d.corr[o]);
    const __m256 lo = dequantize_x8(_mm512_castsi512_si256(v), s, corr);
    const __m256 hi = dequantize_x8(_mm512_extracti64x4_epi64(v, 1), s, corr);
    const __m512d both = _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo)), _mm256_castps_pd(hi), 1);
    const __m512 y = _mm512_add_ps(_mm512_castpd_ps(both), _mm512_set1_ps(d.bias ? d.bias[o] : 0.f));
    _mm512_storeu_ps(plane0 + o * P + p0, y);
  }
}

// Positions [p0, p1) of image n: acc holds that image's rows (P x O) and
// y's planes get them, channel by channel (the block's rows of acc stay in
// cache while each channel's run of y is written).
void dequantize_block(const int32_t* acc, int64_t n, int64_t p0, int64_t p1, const Dequant& d, const Geom& g,
                      float* py) {
  const int64_t O = g.o, P = g.P();
  if (cpu_has_avx512bw() && (p1 - p0) % 16 == 0 && O % 16 == 0) {
    for (int64_t q = p0; q < p1; q += 16)
      for (int64_t o0 = 0; o0 < O; o0 += 16) dequantize_16x16(acc, O, q, o0, d, py + n * O * P, P);
    return;
  }
  for (int64_t o = 0; o < O; ++o) {
    const float b = d.bias ? d.bias[o] : 0.f;
    float* out = py + (n * O + o) * P;
    for (int64_t p = p0; p < p1; ++p)
      out[p] = static_cast<float>(d.s[o] * (static_cast<double>(acc[p * O + o]) - d.corr[o])) + b;
  }
}

// rows: the im2row rows (M x K) of the input; wq: the weight's integers in
// the rows' column order (wi.q, or its columns reordered).
Tensor forward_int(const uint8_t* rows, const int8_t* wq, const ActGrid& grid, const QuantCodes& wi,
                   const Tensor& bias, const Geom& g) {
  QAT_PROFILE("int8_train.forward_gemm");
  const int64_t M = g.M(), K = g.K(), O = g.o, P = g.P();
  int32_t* acc = scratch<int32_t>(kAcc, M * O);
  {
    QAT_PROFILE("int8_train.gemm_fwd");
    const GemmKernel kernel = int8_gemm_kernel();
    if (packed_forward(kernel, g)) {
      // The weight packed for the broadcast kernel (its quads of k copied):
      // a convolution's few weights against its many patch rows.
      gemm_u8s8s32_packed(kernel, M, rows, K, pack_b_vnni(wq, O, K, K), acc, O);
    } else {
      gemm_u8s8s32(kernel, M, O, K, rows, K, wq, K, acc, O);
    }
  }
  Tensor y = Tensor::empty({g.n, O, g.oh, g.ow});
  float* py = y.data<float>();
  const Dequant d = dequant_of(grid, wi, bias, O);
  const int64_t blocks = (P + kDequantBlock - 1) / kDequantBlock;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t pb0 = 0; pb0 < blocks; ++pb0)
      dequantize_block(acc + n * P * O, n, pb0 * kDequantBlock, std::min(P, (pb0 + 1) * kDequantBlock), d, g, py);
  return y;
}

// Note [the forward in chunks]: a convolution's im2row rows, its GEMM and
// the dequantization, a few images at a time on each thread, so that the
// rows the GEMM reads and the sums the dequantization reads are still in
// L2 (the whole batch's rows are tens of MB: written, then read back from
// memory by the GEMM, whose int32 result went through memory again).
// Integer sums: any split gives the same y. Used with at least as many
// images as threads; a chunk is enough whole images for about 256 rows.
bool runs_in_chunks(GemmKernel kernel, const Geom& g) {
  return rows_in_nhwc_order(g) && packed_forward(kernel, g) && g.n >= omp_get_max_threads();
}

}  // namespace

bool packs_rows_in_forward(const Geom& g, GemmKernel kernel) {
  const int64_t P = g.P();
  return kernel == GemmKernel::avx512_vnni && cpu_has_avx512_vnni() && runs_in_chunks(kernel, g) && P % 4 == 0 &&
         (P <= kBlockM || P % kBlockM == 0);
}

namespace {

// A layer's packed rows, their bytes and sums allocated, not yet written.
PackedRows packed_rows_for(const Geom& g) {
  PackedRows pr;
  const int64_t P = g.P();
  pr.block = P <= kBlockM ? kBlockM / P * P : kBlockM;
  pr.segment = std::min(P, kBlockM);
  pr.n = (g.K() + 63) / 64 * 64;
  pr.bytes = Tensor::empty({pr.n * g.M()}, DType::u8);
  pr.sums.resize(static_cast<size_t>(g.M() / pr.segment * pr.n));
  return pr;
}

// Image n's rows (P x K, at rows) packed into pr, segment by segment.
void pack_image_rows(const uint8_t* rows, int64_t n, const Geom& g, PackedRows& pr) {
  const int64_t P = g.P(), M = g.M(), K = g.K(), S = pr.segment;
  uint8_t* bytes = pr.bytes.data<uint8_t>();
  for (int64_t s0 = 0; s0 < P; s0 += S) {
    const int64_t m = n * P + s0, b = m / pr.block, len = std::min(pr.block, M - b * pr.block);
    pack_rows_vnni_transposed_at(reinterpret_cast<const int8_t*>(rows + s0 * K), S, K, K,
                                 reinterpret_cast<int8_t*>(bytes + b * pr.block * pr.n), len / 4,
                                 (m - b * pr.block) / 4, pr.sums.data() + (m / S) * pr.n);
  }
}

// kept: where the rows are kept (M x K), else null (each thread's buffer);
// packed (defined): where they are kept packed instead.
Tensor forward_in_chunks(const std::vector<uint8_t>& u, uint8_t pad, const int8_t* wq, const ActGrid& grid,
                         const QuantCodes& wi, const Tensor& bias, const Geom& g, uint8_t* kept, PackedRows& packed) {
  QAT_PROFILE("int8_train.forward_chunks");
  const int64_t K = g.K(), O = g.o, P = g.P();
  const Im2RowShape s = window_of(g);
  const int64_t padded = padded_image_bytes(s);
  const uint8_t* images = padded_nhwc_images(u.data(), s, g.n, pad);
  const PaddedPlanes pp = nhwc_planes(s);
  const GemmKernel kernel = int8_gemm_kernel();
  const PackedB B = pack_b_vnni(wq, O, K, K);
  Tensor y = Tensor::empty({g.n, O, g.oh, g.ow});
  float* py = y.data<float>();
  const Dequant d = dequant_of(grid, wi, bias, O);
  const int64_t threads = omp_get_max_threads();
  const int64_t per = std::clamp<int64_t>(256 / P, 1, (g.n + threads - 1) / threads);
  const int64_t chunks = (g.n + per - 1) / per;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t n0 = c * per, n1 = std::min(g.n, n0 + per), rows_c = (n1 - n0) * P;
    thread_local std::vector<uint8_t> own;
    thread_local std::vector<int32_t> acc;
    if (!kept && own.size() < static_cast<size_t>(rows_c * K)) own.resize(static_cast<size_t>(rows_c * K));
    if (acc.size() < static_cast<size_t>(rows_c * O)) acc.resize(static_cast<size_t>(rows_c * O));
    uint8_t* rows = kept ? kept + n0 * P * K : own.data();
    for (int64_t n = n0; n < n1; ++n) image_window_rows(images + n * padded, s, pp, rows + (n - n0) * P * K);
    gemm_u8s8s32_packed(kernel, rows_c, rows, K, B, acc.data(), O);  // (one thread: inside this region)
    if (packed.defined())
      for (int64_t n = n0; n < n1; ++n) pack_image_rows(rows + (n - n0) * P * K, n, g, packed);
    for (int64_t n = n0; n < n1; ++n)
      for (int64_t p0 = 0; p0 < P; p0 += kDequantBlock)
        dequantize_block(acc.data() + (n - n0) * P * O, n, p0, std::min(P, p0 + kDequantBlock), d, g, py);
  }
  return y;
}

}  // namespace

void CpuStages::input_integers(Saved& sv, const Tensor& x, const std::string& who) const {
  const Geom& g = sv.g;
  // (A 1x1 layer's rows are made image by image on the threads: with fewer
  // images than threads, u and its transpose split finer.)
  const bool reads_x = (is_pointwise(g) && !is_1x1(g) && g.n >= omp_get_max_threads()) ||
                       (g.depthwise() && depthwise_sums_in_float(sv.grid, g));
  if (sv.forward_only && reads_x) {
    sv.x = x.contiguous(), sv.who = who;
    return;
  }
  sv.u = std::make_shared<std::vector<uint8_t>>(int8_cpu::input_integers(x.contiguous(), sv.grid, who));
}

// The im2row rows (a linear layer's are its input), kept for the packed
// weight gradient where sv.keep_rows (a tensor: the caching allocator reuses
// its memory). A convolution whose window is more than one pixel builds them
// from NHWC images, in (ki, kj, c) order (rows_in_nhwc_order), with the weight's
// columns reordered to match: the same sums.
Tensor CpuStages::forward_gemm(Saved& sv, const Tensor& bias) const {
  const Geom& g = sv.g;
  if (g.depthwise())
    return sv.u ? depthwise_forward(*sv.u, sv.pad, sv.grid, *sv.wi, bias, g)
                : depthwise_forward_of(sv.x, sv.grid, *sv.wi, bias, g, sv.who);
  if (is_1x1(g)) return forward_int(sv.u->data(), sv.wi->q.get(), sv.grid, *sv.wi, bias, g);
  const int8_t* wq = sv.wi->q.get();
  std::vector<int8_t> reordered;
  if (rows_in_nhwc_order(g)) {
    reordered.resize(static_cast<size_t>(g.o * g.K()));
    weight_as_nhwc(wq, g.o, g.c, g.kh * g.kw, reordered.data());
    wq = reordered.data();
  }
  if (runs_in_chunks(int8_gemm_kernel(), g)) {
    // Note [the weight gradient's rows packed in the forward]
    const bool pack = sv.keep_rows && packs_rows_in_forward(g, int8_gemm_kernel());
    PackedRows packed = pack ? packed_rows_for(g) : PackedRows{};
    Tensor kept = sv.keep_rows && !pack ? Tensor::empty({g.M() * g.K()}, DType::u8) : Tensor();
    Tensor y = forward_in_chunks(*sv.u, sv.pad, wq, sv.grid, *sv.wi, bias, g,
                                 kept.defined() ? kept.data<uint8_t>() : nullptr, packed);
    if (kept.defined()) sv.rows = kept;
    if (pack) sv.packed = std::move(packed);
    return y;
  }
  Tensor kept = Tensor::empty({g.M() * g.K()}, DType::u8);
  uint8_t* rows = kept.data<uint8_t>();
  if (rows_in_nhwc_order(g)) {
    im2row_nchw_as_nhwc(sv.u->data(), window_of(g), g.n, sv.pad, rows);
  } else if (sv.u) {
    pointwise_rows_nchw(sv.u->data(), g.n, g.c, g.P(), rows);
  } else {
    pointwise_rows_of(sv.x.data<float>(), sv.grid, g, rows, sv.who);
  }
  Tensor y = forward_int(rows, wq, sv.grid, *sv.wi, bias, g);
  if (sv.keep_rows) sv.rows = kept;
  return y;
}

}  // namespace qat::quant::int8_cpu
