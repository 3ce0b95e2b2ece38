#include "quant/sim/int8_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "core/autograd.h"
#include "core/checked.h"
#include "core/collective.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/profiler.h"
#include "quant/integer/int8_gemm.h"
#include "core/cpu_features.h"
#include "quant/integer/int8_gemm_packed.h"
#include "quant/sim/grad_rows.h"
#include "quant/sim/int8_math.h"
#if QAT_WITH_CUDA
#include "quant/sim/cuda_twins.h"
#endif

namespace qat::quant {

// ---------------------------------------------------------------- state
Int8GradState::Int8GradState(const Int8GradConfig& cfg, uint64_t seed, std::string layer)
    : cfg_(cfg), seed_(seed), layer_(std::move(layer)) {
  QAT_CHECK(cfg.bits >= 2 && cfg.bits <= 8, "int8 training: gradient_bits must be in [2, 8], got ", cfg.bits);
  QAT_CHECK(cfg.period >= 1, "int8 training: period must be >= 1, got ", cfg.period);
  clip_dw_ = register_host_buffer("clip_dw", Tensor::zeros({1}));
  clip_dx_ = register_host_buffer("clip_dx", Tensor::zeros({1}));
  ratio_dw_ = register_host_buffer("ratio_dw", Tensor::zeros({1}));
  ratio_dx_ = register_host_buffer("ratio_dx", Tensor::zeros({1}));
  distance_dw_ = register_host_buffer("distance_dw", Tensor::zeros({1}));
  distance_dx_ = register_host_buffer("distance_dx", Tensor::zeros({1}));
  lr_scale_ = register_host_buffer("lr_scale", Tensor::ones({1}));
  steps_ = register_host_buffer("steps", Tensor::zeros({1}, DType::i32));
  epoch_sums_ = register_host_buffer("epoch_sums", Tensor::zeros({5}));
}

std::string Int8GradState::describe() const {
  return detail::cat("int", cfg_.bits, " gradients, ", enum_name(cfg_.rounding), " rounding, ",
                     enum_name(cfg_.clipping), " clipping", cfg_.lr_scaling ? ", LR scaling" : "");
}

namespace {
float& cell(Tensor& t) { return t.data<float>()[0]; }
float cell(const Tensor& t) { return t.data<float>()[0]; }
}  // namespace

float Int8GradState::clip(int which) const { return cell(which == 0 ? clip_dw_ : clip_dx_); }
float Int8GradState::distance(int which) const { return cell(which == 0 ? distance_dw_ : distance_dx_); }

bool Int8GradState::clip_due(int which) const {
  return cfg_.clipping == GradClipping::max || cell(which == 0 ? ratio_dw_ : ratio_dx_) <= 0.f ||
         steps() % cfg_.period == 0;
}

void Int8GradState::refresh_clip(int which, const float* g, int64_t n) {
  const float m = max_abs(g, n);
  if (cfg_.clipping == GradClipping::max) return refresh_max_clip(which, m);
  check_finite_max(m);
  set_clip(which, search_clip(g, n, cfg_.bits).clip, m);
}

void Int8GradState::refresh_max_clip(int which, float max_abs_g) {
  QAT_CHECK(cfg_.clipping == GradClipping::max, "int8 training: layer ", layer_,
            ": refresh_max_clip under direction-sensitive clipping");
  check_finite_max(max_abs_g);
  set_clip(which, max_abs_g, max_abs_g);
}

void Int8GradState::check_finite_max(float m) const {
  QAT_CHECK(std::isfinite(m), "int8 training: layer ", layer_, ": the output gradient holds ", m,
            " (non-finite) at step ", steps());
}

void Int8GradState::set_clip(int which, float c, float m) {
  cell(which == 0 ? clip_dw_ : clip_dx_) = usable_clip(c, cfg_.bits);  // a tiny max|g|: zeros, not an overflow
  cell(which == 0 ? ratio_dw_ : ratio_dx_) = m > 0.f ? c / m : 0.f;
}

void Int8GradState::track_clip(int which, float max_abs_g) {
  QAT_CHECK(std::isfinite(max_abs_g), "int8 training: layer ", layer_, ": the output gradient holds ", max_abs_g,
            " (non-finite) at step ", steps());
  cell(which == 0 ? clip_dw_ : clip_dx_) = usable_clip(cell(which == 0 ? ratio_dw_ : ratio_dx_) * max_abs_g, cfg_.bits);
}

float Int8GradState::grad_scale(int which) const { return clip(which) / static_cast<float>(grad_qmax(cfg_.bits)); }

// One key per (seed, step, quantizer): the noise of a step is a pure
// function of the checkpointed state. In a data-parallel run every process
// but 0 (which keeps the single-process stream) adds its rank, so the
// processes' parts of a batch get independent noise.
uint64_t Int8GradState::noise_key(int which) const {
  const Collective* all = collective();
  const uint64_t rank = all ? static_cast<uint64_t>(all->rank()) : 0;
  return seed_ ^ (static_cast<uint64_t>(steps()) * 0x9E3779B97F4A7C15ull) ^ (which ? 0xD1B54A32D192ED03ull : 0) ^
         (rank * 0xA0761D6478BD642Full);
}

void Int8GradState::record(int which, const GradQuantStats& stats) {
  cell(which == 0 ? distance_dw_ : distance_dx_) = static_cast<float>(cosine_distance(stats));
}

void Int8GradState::finish_step(bool had_dw, bool had_dx) {
  float* sums = epoch_sums_.data<float>();
  if (had_dw) {
    cell(lr_scale_) = cfg_.lr_scaling ? static_cast<float>(lr_scale_for(distance(0), cfg_.alpha, cfg_.beta)) : 1.f;
    sums[0] += distance(0), sums[2] += lr_scale(), sums[3] += 1.f;
  }
  if (had_dx) sums[1] += distance(1), sums[4] += 1.f;
  steps_.data<int32_t>()[0] += 1;
  for (Tensor* t : {&clip_dw_, &clip_dx_, &ratio_dw_, &ratio_dx_, &distance_dw_, &distance_dx_, &lr_scale_, &steps_,
                    &epoch_sums_})
    t->bump_version();
}

Int8GradState::Means Int8GradState::take_means() {
  float* sums = epoch_sums_.data<float>();
  Means m;
  m.count_dw = static_cast<int64_t>(sums[3]);
  m.count_dx = static_cast<int64_t>(sums[4]);
  if (m.count_dw > 0) m.distance_dw = sums[0] / sums[3], m.lr_scale = sums[2] / sums[3];
  if (m.count_dx > 0) m.distance_dx = sums[1] / sums[4];
  for (int i = 0; i < 5; ++i) sums[i] = 0.f;
  epoch_sums_.bump_version();
  return m;
}

// ---------------------------------------------------------------- geometry
namespace {

// dst (cols, rows) = src (rows, cols)^T for bytes: 64 x 64 tiles read by
// rows into a local block and written by rows, so both sides stream (the
// strided element-wise version cost 160 ms a step on AlexNet's classifier).
void transpose_bytes(const int8_t* src, int64_t rows, int64_t cols, int8_t* dst) {
  constexpr int64_t B = 64;
#pragma omp parallel for schedule(static)
  for (int64_t c0 = 0; c0 < cols; c0 += B) {
    alignas(64) int8_t tile[B][B];
    const int64_t cn = std::min(B, cols - c0);
    for (int64_t r0 = 0; r0 < rows; r0 += B) {
      const int64_t rn = std::min(B, rows - r0);
      for (int64_t r = 0; r < rn; ++r) std::memcpy(tile[r], src + (r0 + r) * cols + c0, static_cast<size_t>(cn));
      for (int64_t c = 0; c < cn; ++c) {
        int8_t* d = dst + (c0 + c) * rows + r0;
        for (int64_t r = 0; r < rn; ++r) d[r] = tile[r][c];
      }
    }
  }
}

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

// Per-thread buffers reused across steps (AlexNet's classifier needs 150 MB
// of accumulators: a fresh zeroed vector every step page-faults and clears
// all of it). Contents are garbage on return.
enum Slot { kRows, kAcc, kCol, kWt, kSum, kPlanes, kSlots };
template <class T>
T* scratch(Slot slot, int64_t n) {
  thread_local std::vector<unsigned char> bufs[kSlots];
  std::vector<unsigned char>& b = bufs[slot];
  const size_t bytes = static_cast<size_t>(n) * sizeof(T);
  if (b.size() < bytes) b.resize(bytes);
  return reinterpret_cast<T*>(b.data());
}


struct Geom {
  int64_t n, c, h, w, o, kh, kw, oh, ow;
  Conv2dParams p;
  int64_t K() const { return c * kh * kw; }
  int64_t P() const { return oh * ow; }
  int64_t M() const { return n * P(); }
};

// A linear layer's geometry: the rows of im2row are the input itself (no
// padding: a padded 1x1 input's only tap may be the padding).
bool is_1x1(const Geom& g) {
  return g.P() == 1 && g.h == 1 && g.w == 1 && g.kh == 1 && g.kw == 1 && g.p.pad_h == 0 && g.p.pad_w == 0;
}

// x on `grid` as integers u (N, C, H, W); a value more than 1e-3 steps off
// the grid or outside [0, levels) is an error: the layer's input must be what
// a quantizer produced.
std::vector<uint8_t> input_integers(const Tensor& x, const ActGrid& grid, const std::string& who) {
  QAT_PROFILE("int8_train.input_integers");
  const int64_t n = x.numel();
  std::vector<uint8_t> u(static_cast<size_t>(n));
  const float* px = x.data<float>();
  const double inv = 1.0 / static_cast<double>(grid.scale);
  int64_t bad = -1;
#pragma omp parallel for schedule(static) if (n >= (1 << 15))
  for (int64_t i = 0; i < n; ++i) {
    const int32_t r = int8_math::input_integer(px[i], inv, grid.zero, grid.levels);
    if (r < 0) {
#pragma omp critical(int8_input_bad)
      if (bad < 0 || i < bad) bad = i;
      continue;
    }
    u[i] = static_cast<uint8_t>(r);
  }
  if (bad >= 0) fail_input_off_grid(who, px[bad], bad, grid);
  return u;
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

// dst[j] = f(xrow[x0 + j step]) for j < count, f(pad) where x0 + j step falls
// outside [0, w): one input row's run of a window, copied whole when it is
// contiguous and inside.
template <class T, class F>
inline void gather_run(const uint8_t* xrow, int64_t w, int64_t x0, int64_t step, int64_t count, uint8_t pad, T* dst,
                       F f) {
  if (step == 1 && x0 >= 0 && x0 + count <= w) {
    for (int64_t j = 0; j < count; ++j) dst[j] = f(xrow[x0 + j]);
    return;
  }
  for (int64_t j = 0; j < count; ++j) {
    const int64_t ix = x0 + j * step;
    dst[j] = f(ix >= 0 && ix < w ? xrow[ix] : pad);
  }
}

// Bytes read past the last padded plane by the word copies below.
constexpr int64_t kPlaneSlack = 16;

// u's (n, c) planes padded with `pad` on every side (Hp x Wp each, Hp =
// h + 2 pad_h, Wp = w + 2 pad_w), and kPlaneSlack bytes past the last: every
// tap of every output position then reads inside.
void pad_planes(const uint8_t* u, const Geom& g, uint8_t pad, uint8_t* planes) {
  const int64_t Hp = g.h + 2 * g.p.pad_h, Wp = g.w + 2 * g.p.pad_w, NC = g.n * g.c;
  std::memset(planes + NC * Hp * Wp, pad, kPlaneSlack);
#pragma omp parallel for schedule(static)
  for (int64_t nc = 0; nc < NC; ++nc) {
    uint8_t* plane = planes + nc * Hp * Wp;
    std::memset(plane, pad, static_cast<size_t>(g.p.pad_h * Wp));
    for (int64_t y = 0; y < g.h; ++y) {
      uint8_t* row = plane + (y + g.p.pad_h) * Wp;
      std::memset(row, pad, static_cast<size_t>(g.p.pad_w));
      std::memcpy(row + g.p.pad_w, u + (nc * g.h + y) * g.w, static_cast<size_t>(g.w));
      std::memset(row + g.p.pad_w + g.w, pad, static_cast<size_t>(g.p.pad_w));
    }
    std::memset(plane + (g.p.pad_h + g.h) * Wp, pad, static_cast<size_t>(g.p.pad_h * Wp));
  }
}

// rows (M, K): row m = (n, oy, ox), column k = (c, ki, kj), from the padded
// planes. Each (c, ki) run of kw bytes is one copy of Word bytes (kw <= Word)
// whose bytes past the run the next runs' copies overwrite; the runs within
// Word bytes of the row's end are copied exactly, so no copy reaches into the
// next row (which another thread may have written already). Word 0: a
// strided copy (width dilation).
template <int64_t Word>
void im2row_padded(const uint8_t* planes, const Geom& g, uint8_t* rows) {
  const int64_t K = g.K(), Hp = g.h + 2 * g.p.pad_h, Wp = g.w + 2 * g.p.pad_w;
  const int64_t down = g.p.dil_h * Wp, next_plane = Hp * Wp - g.kh * down;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t oy = 0; oy < g.oh; ++oy)
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        uint8_t* r = rows + ((n * g.oh + oy) * g.ow + ox) * K;
        const uint8_t* const end = r + K;
        const uint8_t* src = planes + (n * g.c * Hp + oy * g.p.stride_h) * Wp + ox * g.p.stride_w;
        for (int64_t c = 0; c < g.c; ++c, src += next_plane)
          for (int64_t ki = 0; ki < g.kh; ++ki, r += g.kw, src += down) {
            if (Word > 0 && end - r >= Word) std::memcpy(r, src, Word);
            else
              for (int64_t j = 0; j < g.kw; ++j) r[j] = src[j * g.p.dil_w];
          }
      }
}

// rows (M x K): the im2row rows of u.
void im2row(const uint8_t* u, const Geom& g, uint8_t pad, uint8_t* rows) {
  QAT_PROFILE("int8_train.im2row");
  uint8_t* planes = scratch<uint8_t>(kPlanes, g.n * g.c * (g.h + 2 * g.p.pad_h) * (g.w + 2 * g.p.pad_w) + kPlaneSlack);
  pad_planes(u, g, pad, planes);
  if (g.p.dil_w == 1 && g.kw <= 8) im2row_padded<8>(planes, g, rows);
  else if (g.p.dil_w == 1 && g.kw <= 16) im2row_padded<16>(planes, g, rows);
  else im2row_padded<0>(planes, g, rows);
}

// col (K, M): the transpose of rows, built directly, stored as u - 128 (s8)
// for the s8 x s8 weight-gradient GEMM (u ^ 0x80 is u - 128 in two's complement).
void im2col(const uint8_t* u, const Geom& g, uint8_t pad, int8_t* col) {
  QAT_PROFILE("int8_train.im2col");
  const int64_t M = g.M();
  const int8_t pad8 = static_cast<int8_t>(pad ^ 0x80);
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < g.K(); ++k) {
    const int64_t c = k / (g.kh * g.kw), ki = (k / g.kw) % g.kh, kj = k % g.kw;
    int8_t* dst = col + k * M;
    const int64_t x0 = kj * g.p.dil_w - g.p.pad_w;
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t oy = 0; oy < g.oh; ++oy, dst += g.ow) {
        const int64_t iy = oy * g.p.stride_h - g.p.pad_h + ki * g.p.dil_h;
        if (iy < 0 || iy >= g.h) {
          std::memset(dst, static_cast<unsigned char>(pad8), static_cast<size_t>(g.ow));
          continue;
        }
        gather_run(u + ((n * g.c + c) * g.h + iy) * g.w, g.w, x0, g.p.stride_w, g.ow, pad, dst,
                   [](uint8_t v) { return static_cast<int8_t>(v ^ 0x80); });
      }
  }
}

// The real zero as the padding integer: convolutions pad with 0.0, which is
// on the grid only when the zero point is an integer.
uint8_t pad_integer(const ActGrid& grid, const Geom& g, const std::string& who) {
  const double z = std::nearbyint(grid.zero);
  const bool padded = g.p.pad_h > 0 || g.p.pad_w > 0;
  QAT_CHECK(!padded || (z == grid.zero && z >= 0 && z < grid.levels), who,
            " pads its input, whose grid has the fractional zero point ", grid.zero,
            " (LSQ+): 0.0 is not on it; use quant.method lsq or an observer, or keep the layer float (quant.int8_training.keep_float)");
  return static_cast<uint8_t>(std::clamp(z, 0.0, 255.0));
}

// ---------------------------------------------------------------- forward
// Whether the forward GEMM runs on the packed kernel: the packing copies the
// weight once a step, paid back where many rows share it (a convolution's
// output positions; not a linear layer's batch rows, which stream the weight
// once anyway), and the kernel needs O a multiple of its column block.
bool packed_forward(GemmKernel kernel, const Geom& g) {
  return packs(kernel) && g.P() > 1 && can_use_packed(kernel, g.o);
}

// rows: the im2row rows (M x K) of the input.
Tensor forward_int(const uint8_t* rows, const ActGrid& grid, const QuantCodes& wi, const Tensor& bias, const Geom& g) {
  QAT_PROFILE("int8_train.forward_gemm");
  const int64_t M = g.M(), K = g.K(), O = g.o, P = g.P();
  int32_t* acc = scratch<int32_t>(kAcc, M * O);
  {
    QAT_PROFILE("int8_train.gemm_fwd");
    const GemmKernel kernel = int8_gemm_kernel();
    if (packed_forward(kernel, g)) {
      // The weight packed for the broadcast kernel (its quads of k copied):
      // a convolution's few weights against its many patch rows.
      gemm_u8s8s32_packed(kernel, M, rows, K, pack_b_vnni(wi.q.get(), O, K, K), acc, O);
    } else {
      gemm_u8s8s32(kernel, M, O, K, rows, K, wi.q.get(), K, acc, O);
    }
  }
  Tensor y = Tensor::empty({g.n, O, g.oh, g.ow});
  float* py = y.data<float>();
  const float* pb = bias.defined() ? bias.data<float>() : nullptr;
  std::vector<double> s(static_cast<size_t>(O)), corr(static_cast<size_t>(O));
  for (int64_t o = 0; o < O; ++o) {
    s[o] = static_cast<double>(grid.scale) * static_cast<double>(wi.scale[o]);
    corr[o] = grid.zero * static_cast<double>(wi.rowsum[o]);
  }
  // acc (M, O) -> y (N, O, P) in blocks of 32 positions: the block's rows of
  // acc stay in cache while each channel's run of y is written.
  constexpr int64_t B = 32;
  const int64_t blocks = (P + B - 1) / B;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t pb0 = 0; pb0 < blocks; ++pb0) {
      const int64_t p0 = pb0 * B, p1 = std::min(P, p0 + B);
      for (int64_t o = 0; o < O; ++o) {
        const float b = pb ? pb[o] : 0.f;
        for (int64_t p = p0; p < p1; ++p)
          py[(n * O + o) * P + p] =
              static_cast<float>(s[o] * (static_cast<double>(acc[(n * P + p) * O + o]) - corr[o])) + b;
      }
    }
  return y;
}

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
GradQuantStats quantize_g(const float* dy, const Geom& g, float scale, const Int8GradState& st, int8_t* G,
                          int64_t* gsum) {
  QAT_PROFILE("int8_train.quantize_g");
  const int64_t O = g.o, P = g.P(), M = g.M();
  const int qmax = grad_qmax(st.config().bits);
  const float inv = 1.f / scale;
  const uint64_t key = mix64(st.noise_key(0));
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
      gsum[o] = quantize_run(kernel, row, M, inv, qmax, st.config().rounding, key, static_cast<uint64_t>(o * M),
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
GradQuantStats quantize_gx(const float* dy, const Geom& g, const std::vector<float>& ws, float scale,
                           const Int8GradState& st, int8_t* Gx) {
  QAT_PROFILE("int8_train.quantize_gx");
  const int64_t O = g.o, P = g.P(), L = P * O;  // image n's row: (p, o) in order
  const int qmax = grad_qmax(st.config().bits);
  const float inv = 1.f / scale;
  const uint64_t key = mix64(st.noise_key(1));
  const GradStatsKernel kernel = best_grad_stats_kernel();
  std::vector<GradQuantStats> per(static_cast<size_t>(g.n));
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < g.n; ++n) {
    thread_local RowBlock rb;
    rb.reset(1, L);
    float* row = rb.v.data();
    for (int64_t o = 0; o < O; ++o) {
      const float* src = dy + (n * O + o) * P;
      for (int64_t p = 0; p < P; ++p) row[p * O + o] = src[p] * ws[o];
    }
    quantize_run(kernel, row, L, inv, qmax, st.config().rounding, key, static_cast<uint64_t>(n * L), Gx + n * L,
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
  im2col(u.data(), g, pad, col);
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

// The same on the packed VNNI kernel (M <= 2^16): B = col is packed from
// its transpose, the im2row rows u (M x K; a linear layer's input itself),
// read as u - 128 with the column sums; G is read as G + 128 by the kernel;
// the tiles leave it as floats: dWq = s (C - 128 colsum[k] + (128 - zx) gsum[o])
// with the same double operations as above.
Tensor weight_grad_packed(const uint8_t* rows, const ActGrid& grid, const int8_t* G, const int64_t* gsum,
                          float scale_g, const Geom& g) {
  const int64_t M = g.M(), K = g.K(), O = g.o;
  thread_local PackedB packed;
  std::vector<int32_t> sums(static_cast<size_t>((K + 63) / 64 * 64));
  {
    QAT_PROFILE("int8_train.pack_rows");
    pack_b_vnni_transposed(reinterpret_cast<const int8_t*>(rows), M, K, K, packed, sums.data(), true,
                           int8_gemm_kernel());
  }
  std::vector<double> corr(static_cast<size_t>(O));
  for (int64_t o = 0; o < O; ++o) corr[o] = (128.0 - grid.zero) * static_cast<double>(gsum[o]);
  Tensor dw = Tensor::empty({O, K});
  QAT_PROFILE("int8_train.gemm_dw");
  const DequantEpilogue e{K, sums.data(), corr.data(), static_cast<double>(scale_g) * static_cast<double>(grid.scale)};
  gemm_s8s8_packed_dequant(int8_gemm_kernel(), O, G, M, packed, e, dw.data<float>(), K);
  return dw;
}

// Whether the weight gradient runs on the packed kernel: it reads the
// forward's im2row rows, which the layer then keeps for its backward.
bool packed_weight_grad(const Geom& g) {
  return packed_backward() && g.M() <= (int64_t{1} << 16);
}

// rows: the forward's im2row rows where packed_weight_grad(g).
Tensor weight_grad(const std::vector<uint8_t>& u, const uint8_t* rows, const ActGrid& grid, const int8_t* G,
                   const int64_t* gsum, float scale_g, const Geom& g, uint8_t pad) {
  QAT_PROFILE("int8_train.weight_grad_gemm");
  if (rows) return weight_grad_packed(rows, grid, G, gsum, scale_g, g);
  return weight_grad_unpacked(u, grid, G, gsum, scale_g, g, pad, int8_gemm_kernel());
}

// The input planes padded on every side, so that each tap of an output
// position lands inside (no bounds checks): rows h + 2 pad_h, columns
// w + 2 pad_w.
int64_t padded_plane_h(const Geom& g) { return g.h + 2 * g.p.pad_h; }
int64_t padded_plane_w(const Geom& g) { return g.w + 2 * g.p.pad_w; }

// One image's col2im: the rows of its GEMM result acc (P x K, row stride
// ldc), each less off[k] = 128 * sums[k] when off is given (the packed
// kernel's offset), summed into the image's padded input planes (C x Hp x Wp)
// in int64. Integer sums: the order is free, the result exact.
void col2im_image(const int32_t* acc, int64_t ldc, const int64_t* off, const Geom& g, int64_t* planes) {
  const int64_t Hp = padded_plane_h(g), Wp = padded_plane_w(g), KK = g.kh * g.kw;
  std::fill(planes, planes + g.c * Hp * Wp, int64_t{0});
  for (int64_t oy = 0; oy < g.oh; ++oy)
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      const int32_t* row = acc + (oy * g.ow + ox) * ldc;
      int64_t* corner = planes + oy * g.p.stride_h * Wp + ox * g.p.stride_w;
      for (int64_t c = 0; c < g.c; ++c)
        for (int64_t ki = 0; ki < g.kh; ++ki) {
          const int64_t k0 = c * KK + ki * g.kw;
          int64_t* at = corner + (c * Hp + ki * g.p.dil_h) * Wp;
          if (off)
            for (int64_t kj = 0; kj < g.kw; ++kj) at[kj * g.p.dil_w] += int64_t{row[k0 + kj]} - off[k0 + kj];
          else
            for (int64_t kj = 0; kj < g.kw; ++kj) at[kj * g.p.dil_w] += row[k0 + kj];
        }
    }
}

// The inside of the padded planes, times s, as floats (C x H x W).
void scale_to_float(const int64_t* planes, const Geom& g, double s, float* out) {
  const int64_t Hp = padded_plane_h(g), Wp = padded_plane_w(g);
  for (int64_t c = 0; c < g.c; ++c)
    for (int64_t y = 0; y < g.h; ++y) {
      const int64_t* v = planes + (c * Hp + y + g.p.pad_h) * Wp + g.p.pad_w;
      float* o = out + (c * g.h + y) * g.w;
      for (int64_t x = 0; x < g.w; ++x) o[x] = static_cast<float>(s * static_cast<double>(v[x]));
    }
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
  const int64_t padded = g.c * padded_plane_h(g) * padded_plane_w(g);
  const double s = static_cast<double>(scale_gx);
  std::vector<int64_t> off(sums ? static_cast<size_t>(K) : 0);
  for (int64_t k = 0; k < static_cast<int64_t>(off.size()); ++k) off[k] = 128 * int64_t{sums[k]};
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < g.n; ++n) {
    const int32_t* rows = tile(n, acc ? acc + n * P * ldc : nullptr);
    int64_t* planes = scratch<int64_t>(kSum, padded);
    col2im_image(rows, ldc, sums ? off.data() : nullptr, g, planes);
    scale_to_float(planes, g, s, pd + n * pixels);
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

Tensor input_grad(const int8_t* Gx, float scale_gx, const QuantCodes& wi, const Geom& g) {
  QAT_PROFILE("int8_train.input_grad_gemm");
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

// The whole backward of one layer (dx, dwq, dbias in the shapes of x and wq).
TensorList backward(const Tensor& gy, const std::vector<uint8_t>& u, const uint8_t* rows, const ActGrid& grid,
                    const QuantCodes& wi,
                    const Geom& g, uint8_t pad, Int8GradState& st, const NeedGrad& need, const Shape& x_shape,
                    const Shape& w_shape) {
  QAT_PROFILE("int8_train.backward");
  Tensor gyc = gy.contiguous();
  const float* dy = gyc.data<float>();
  const int64_t n = gyc.numel(), M = g.M(), O = g.o;
  TensorList r(3);
  if (need[2]) r[2] = bias_grad(dy, g);
  std::vector<int8_t> G, Gx;
  if (need[1]) {
    if (st.clip_due(0)) st.refresh_clip(0, dy, n);
    else st.track_clip(0, max_abs(dy, n));
    const float scale = st.grad_scale(0);
    G.assign(static_cast<size_t>(O * M), 0);
    std::vector<int64_t> gsum(static_cast<size_t>(O), 0);
    GradQuantStats stats;
    if (scale > 0.f) stats = quantize_g(dy, g, scale, st, G.data(), gsum.data());
    st.record(0, stats);
    r[1] = (scale > 0.f ? weight_grad(u, rows, grid, G.data(), gsum.data(), scale, g, pad)
                        : Tensor::zeros({O, g.K()}))
               .view(w_shape);
    if (st.keep_last) st.last_g = G, st.last_scale_g = scale, st.last_dy.assign(dy, dy + n);
  }
  if (need[0]) {
    // The clip of dY * s_w[o], the values Gx quantizes.
    auto scaled = [&](int64_t i) { return dy[i] * wi.scale[(i / g.P()) % O]; };
    if (st.clip_due(1)) {
      std::vector<float> v(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) v[i] = scaled(i);
      st.refresh_clip(1, v.data(), n);
    } else {
      float m = 0.f;  // max |scaled|; a non-finite value is passed on (track_clip reports it)
      for (int64_t i = 0; i < n && std::isfinite(m); ++i) {
        const float a = std::abs(scaled(i));
        m = std::isfinite(a) ? std::max(m, a) : a;
      }
      st.track_clip(1, m);
    }
    const float scale = st.grad_scale(1);
    Gx.assign(static_cast<size_t>(M * O), 0);
    GradQuantStats stats;
    if (scale > 0.f) stats = quantize_gx(dy, g, wi.scale, scale, st, Gx.data());
    st.record(1, stats);
    r[0] = (scale > 0.f ? input_grad(Gx.data(), scale, wi, g) : Tensor::zeros({g.n, g.c, g.h, g.w})).view(x_shape);
    if (st.keep_last) st.last_gx = Gx, st.last_scale_gx = scale;
  }
  st.finish_step(need[1], need[0]);
  return r;
}

// How the integer forward's errors name a layer (INT8 training's: int8_training_who).
std::string int_forward_who(const std::string& layer) { return "quant.integer_forward: layer " + layer; }

// The forward of an integer layer on the CPU: the input's integers (u, kept
// where the backward wants them), the im2row rows where the packed weight
// gradient wants them, and Y.
struct IntForward {
  std::shared_ptr<std::vector<uint8_t>> u;
  Tensor rows;  // im2row rows, or undefined (a 1x1 layer's rows are u)
  uint8_t pad = 0;
  Tensor y;
};
IntForward integer_forward(const Tensor& x, const ActGrid& grid, const QuantCodes& wi, const Tensor& bias,
                           const Geom& g, const std::string& who) {
  QAT_CHECK(wi.rows == g.o && wi.cols == g.K(), who, ": weight codes of ", wi.rows, " x ", wi.cols,
            " for a weight of ", g.o, " x ", g.K());
  IntForward f;
  f.u = std::make_shared<std::vector<uint8_t>>(input_integers(x.contiguous(), grid, who));
  f.pad = pad_integer(grid, g, who);
  // The im2row rows (a linear layer's are its input), kept for the packed
  // weight gradient (a tensor: the caching allocator reuses its memory).
  const uint8_t* rows = f.u->data();
  if (!is_1x1(g)) {
    f.rows = Tensor::empty({g.M() * g.K()}, DType::u8);
    im2row(f.u->data(), g, f.pad, f.rows.data<uint8_t>());
    rows = f.rows.data<uint8_t>();
  }
  f.y = forward_int(rows, grid, wi, bias.defined() ? bias.contiguous() : Tensor(), g);
  return f;
}

// The layer on integer weights `wi`. w: the autograd input the weight
// gradient goes to: wq itself (wi recovered from it), or the unquantized
// weight (wi from forward_codes: the clipped STE applied here).
Tensor int8_layer(const Tensor& x, const ActGrid& grid, const Tensor& w, std::shared_ptr<const QuantCodes> wi,
                  bool apply_ste, const Tensor& bias, const Geom& g, const std::shared_ptr<Int8GradState>& state) {
  IntForward f = integer_forward(x, grid, *wi, bias, g, int8_training_who(state->layer()));
  if (!(packed_weight_grad(g) && w.requires_grad())) f.rows = Tensor();  // not needed after the forward
  return record(f.y, "int8_layer", {&x, &w, &bias},
                [u = f.u, rows_t = f.rows, wi, apply_ste, grid, g, pad = f.pad, state, xs = x.sizes(),
                 ws = w.sizes()](const Tensor& gy, const NeedGrad& need) {
                  // (the kernel may have been changed since the forward: tests)
                  const uint8_t* kept = !packed_weight_grad(g) ? nullptr
                                        : rows_t.defined()     ? rows_t.data<uint8_t>()
                                        : is_1x1(g)            ? u->data()
                                                               : nullptr;
                  TensorList r = backward(gy, *u, kept, grid, *wi, g, pad, *state, need, xs, ws);
                  if (apply_ste && r[1].defined() && !wi->clipped.empty()) {
                    // dw = dwq * mask, as fake_quantize's backward (NaN * 0 stays NaN).
                    float* pd = r[1].data<float>();
                    for (const int64_t i : wi->clipped) pd[i] *= 0.f;
                  }
                  return r;
                });
}

void check_k(const Geom& g, const std::string& who) {
  QAT_CHECK(g.K() <= (int64_t{1} << 16) && g.o <= (int64_t{1} << 16), who, ": K = ", g.K(), " and ", g.o,
            " outputs must be <= 65536 (int32 accumulators)");
}

Geom conv_geom(const Tensor& x, const Tensor& w, const Conv2dParams& p, const std::string& who) {
  QAT_CHECK(x.dim() == 4 && w.dim() == 4 && p.groups == 1 && x.size(1) == w.size(1), who,
            ": expected input (N,C,H,W) and weight (O,C,KH,KW) with groups 1, got ", x.sizes(), " and ", w.sizes(),
            " groups ", p.groups);
  Geom g{x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2), w.size(3), 0, 0, p};
  g.oh = conv_out_size(g.h, g.kh, p.stride_h, p.pad_h, p.dil_h, "int8_conv2d");
  g.ow = conv_out_size(g.w, g.kw, p.stride_w, p.pad_w, p.dil_w, "int8_conv2d");
  check_k(g, who);
  return g;
}

// A linear layer is a 1x1 convolution of an (N, K, 1, 1) image.
Geom linear_geom(const Tensor& x, const Tensor& w, const std::string& who) {
  QAT_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1), who,
            ": expected input (N,K) and weight (O,K), got ", x.sizes(), " and ", w.sizes());
  Geom g{x.size(0), x.size(1), 1, 1, w.size(0), 1, 1, 1, 1, Conv2dParams{}};
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

#if QAT_WITH_CUDA
int8_math::Geometry device_geometry(const Geom& g) {
  return {g.n,          g.c,          g.h,        g.w,        g.o,        g.kh,       g.kw,      g.oh,
          g.ow,         g.p.stride_h, g.p.stride_w, g.p.pad_h, g.p.pad_w, g.p.dil_h, g.p.dil_w};
}
#endif

// The layer on the device (x on cuda): the CUDA twin (int8_device.h), after
// the CPU op's checks.
Tensor on_device(const Tensor& x, const ActGrid& grid, const Tensor& wq, const Tensor& w_scale, const Tensor& bias,
                 const Geom& g, const std::shared_ptr<Int8GradState>& state) {
  const std::string who = int8_training_who(state->layer());
  check_one_device(x, wq, bias, who);
#if QAT_WITH_CUDA
  // The padding's integer is checked after the weight and the input, as the CPU op does.
  return cuda_twin::int8_layer(x, grid, wq, w_scale, bias, device_geometry(g),
                               [&] { return pad_integer(grid, g, who); }, state);
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
  return weight_integers(wq.contiguous(), w_scale.contiguous(), g.o, g.K(), who);
}

// Y of the integer forward (Note [integer forward of QAT layers]) on x's device.
Tensor integer_forward_values(const Tensor& x, const ActGrid& grid, const Tensor& wq, const Tensor& w_scale,
                              const Tensor& bias, const Geom& g, const std::string& who) {
  if (x.device() == Device::cpu) return integer_forward(x, grid, *integers_of(wq, w_scale, g, who), bias, g, who).y;
  check_one_device(x, wq, bias, who);
#if QAT_WITH_CUDA
  return cuda_twin::int_forward_values(x, grid, wq, w_scale, bias, device_geometry(g),
                                       [&] { return pad_integer(grid, g, who); }, who);
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
  kernel_override() = kernel;
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
