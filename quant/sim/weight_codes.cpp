#include "quant/sim/weight_codes.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <exception>

#include "core/error.h"
#include "core/profiler.h"
#include "quant/integer/simd.h"
#include "quant/sim/math.h"

namespace qat::quant {

bool codes_supported(const QuantSpec& spec) {
  return spec.symmetric && spec.qmin() < 0 && spec.bits <= 8 && (!spec.per_channel || spec.axis == 0);
}

namespace {

// One row: q[i] = clamp(nearbyint(x[i] * inv), qmin, qmax) (math.h's grid
// value with z = 0, clamped), the sum of q into `sum`, and the indices whose
// grid value fell outside [qmin, qmax] (NaN and inf included; rare) appended
// to `outside`.
void codes_row_scalar(const float* x, int8_t* q, int64_t n, float inv, float qmin, float qmax, int64_t& sum,
                      std::vector<int64_t>& outside) {
  int64_t s = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float t = math::fake_quant_grid(x[i], inv, 0.f);
    const bool in = math::ste_passes(t, qmin, qmax);
    const float c = in ? t : (t > qmax ? qmax : qmin);  // (NaN: qmin, listed outside)
    const int32_t v = static_cast<int32_t>(c);
    q[i] = static_cast<int8_t>(v);
    s += v;
    if (!in) outside.push_back(i);
  }
  sum = s;
}

// The vector rows: vrndscaleps / vroundps (round to nearest even, as
// nearbyint in the default rounding mode) of the same float product, then
// max(t, qmin) and min(., qmax), which give qmin for NaN (listed outside).
// The row loop is written once (weight_codes_lanes.inc); each instruction
// set supplies its lanes.
namespace avx512 {
#define QAT_CODES_TARGET __attribute__((target("avx512f,avx512bw,avx512vl")))
struct Lanes {
  using F = __m512;
  using I = __m512i;
  static constexpr int64_t kWidth = 16;
  QAT_CODES_TARGET static F broadcast(float v) { return _mm512_set1_ps(v); }
  QAT_CODES_TARGET static F load(const float* p) { return _mm512_loadu_ps(p); }
  QAT_CODES_TARGET static F load_first(const float* p, int64_t n) {
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p);
  }
  QAT_CODES_TARGET static F grid(F x, F inv) {
    return _mm512_roundscale_ps(_mm512_mul_ps(x, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  QAT_CODES_TARGET static unsigned inside(F t, F lo, F hi) {
    return _mm512_cmp_ps_mask(t, lo, _CMP_GE_OQ) & _mm512_cmp_ps_mask(t, hi, _CMP_LE_OQ);
  }
  QAT_CODES_TARGET static I codes(F t, F lo, F hi) {
    return _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(t, lo), hi));
  }
  QAT_CODES_TARGET static I zero() { return _mm512_setzero_si512(); }
  QAT_CODES_TARGET static I add(I a, I b) { return _mm512_add_epi32(a, b); }
  QAT_CODES_TARGET static int64_t sum(I v) { return _mm512_reduce_add_epi32(v); }
  // Plain stores but in the tail (a masked store costs several plain ones on Zen 4).
  QAT_CODES_TARGET static void store(int8_t* q, I v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtepi32_epi8(v));
  }
  QAT_CODES_TARGET static void store_first(int8_t* q, I v, int64_t n) {
    _mm_mask_storeu_epi8(q, static_cast<__mmask16>((1u << n) - 1), _mm512_cvtepi32_epi8(v));
  }
  // Each half's indices packed to the front of a register, then stored whole
  // (a compressing store to memory is slow on Zen 4).
  QAT_CODES_TARGET static int64_t append(int64_t* buf, int64_t cnt, int64_t i, unsigned out) {
    const __m512i first = _mm512_add_epi64(_mm512_set1_epi64(i), _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0));
    const __m512i second = _mm512_add_epi64(first, _mm512_set1_epi64(8));
    const auto lo = static_cast<__mmask8>(out & 0xFF), hi = static_cast<__mmask8>(out >> 8);
    _mm512_storeu_si512(buf + cnt, _mm512_maskz_compress_epi64(lo, first));
    cnt += std::popcount(static_cast<unsigned>(lo));
    _mm512_storeu_si512(buf + cnt, _mm512_maskz_compress_epi64(hi, second));
    return cnt + std::popcount(static_cast<unsigned>(hi));
  }
};
#include "quant/sim/weight_codes_lanes.inc"
#undef QAT_CODES_TARGET
}  // namespace avx512

namespace avx2 {
#define QAT_CODES_TARGET __attribute__((target("avx2")))
struct Lanes {
  using F = __m256;
  using I = __m256i;
  static constexpr int64_t kWidth = 8;
  QAT_CODES_TARGET static F broadcast(float v) { return _mm256_set1_ps(v); }
  QAT_CODES_TARGET static F load(const float* p) { return _mm256_loadu_ps(p); }
  QAT_CODES_TARGET static F load_first(const float* p, int64_t n) { return _mm256_maskload_ps(p, simd::live_lanes(n)); }
  QAT_CODES_TARGET static F grid(F x, F inv) {
    return _mm256_round_ps(_mm256_mul_ps(x, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  QAT_CODES_TARGET static unsigned inside(F t, F lo, F hi) {
    const __m256 both = _mm256_and_ps(_mm256_cmp_ps(t, lo, _CMP_GE_OQ), _mm256_cmp_ps(t, hi, _CMP_LE_OQ));
    return static_cast<unsigned>(_mm256_movemask_ps(both));
  }
  QAT_CODES_TARGET static I codes(F t, F lo, F hi) {
    return _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(t, lo), hi));
  }
  QAT_CODES_TARGET static I zero() { return _mm256_setzero_si256(); }
  QAT_CODES_TARGET static I add(I a, I b) { return _mm256_add_epi32(a, b); }
  QAT_CODES_TARGET static int64_t sum(I v) {
    const __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    const __m128i h2 = _mm_add_epi32(h, _mm_unpackhi_epi64(h, h));
    return _mm_cvtsi128_si32(_mm_add_epi32(h2, _mm_shuffle_epi32(h2, 1)));
  }
  // 8 codes (each in [-128, 127]) to 8 bytes in order: the saturating packs are exact.
  QAT_CODES_TARGET static __m128i bytes(I v) {
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    return _mm_packs_epi16(w, w);
  }
  QAT_CODES_TARGET static void store(int8_t* q, I v) { _mm_storel_epi64(reinterpret_cast<__m128i*>(q), bytes(v)); }
  QAT_CODES_TARGET static void store_first(int8_t* q, I v, int64_t n) {
    alignas(16) int8_t b[16];
    _mm_store_si128(reinterpret_cast<__m128i*>(b), bytes(v));
    std::memcpy(q, b, static_cast<size_t>(n));
  }
  // Every lane's index written, the count advanced by its bit.
  static int64_t append(int64_t* buf, int64_t cnt, int64_t i, unsigned out) {
    for (int64_t j = 0; j < kWidth; ++j) {
      buf[cnt] = i + j;
      cnt += (out >> j) & 1u;
    }
    return cnt;
  }
};
#include "quant/sim/weight_codes_lanes.inc"
#undef QAT_CODES_TARGET
}  // namespace avx2

using RowFn = void (*)(const float*, int8_t*, int64_t, float, float, float, int64_t&, std::vector<int64_t>&);
RowFn codes_row(FqRowsKernel kernel) {
  QAT_CHECK(fq_rows_kernel_runs_here(kernel), "weight codes: the ", enum_name(kernel),
            " kernel does not run on this CPU");
  switch (kernel) {
    case FqRowsKernel::avx512:
      return &avx512::codes_row;
    case FqRowsKernel::avx2:
      return &avx2::codes_row;
    case FqRowsKernel::generic:
      break;
  }
  return &codes_row_scalar;
}

// Every row through row_scale(r) (the row's scale, computed in the loop: the
// fused observer) into `out`; rows on the threads, clipped indices in order.
template <class RowScale>
void quantize_rows(const float* px, int64_t R, int64_t L, const QuantSpec& spec, SteKind ste, QuantCodes& out,
                   const std::string& what, RowScale row_scale) {
  const float qmin = static_cast<float>(spec.qmin()), qmax = static_cast<float>(spec.qmax());
  const RowFn row_fn = codes_row(best_fq_rows_kernel());
  std::vector<std::vector<int64_t>> clipped(static_cast<size_t>(R));
  int64_t bad = -1;
  std::exception_ptr error;
#pragma omp parallel for schedule(static) if (R * L >= (1 << 15))
  for (int64_t r = 0; r < R; ++r) {
    float s;
    try {
      s = row_scale(r);
    } catch (...) {
#pragma omp critical(quant_codes_error)
      if (!error) error = std::current_exception();
      continue;
    }
    const float inv = 1.0f / s;
    out.scale[r] = s;
    std::vector<int64_t>& out_r = clipped[r];
    row_fn(px + r * L, out.q.get() + r * L, L, inv, qmin, qmax, out.rowsum[r], out_r);
    // Outside the grid: a non-finite weight (an error) or one the clipped
    // STE stops (kept as a flat index; the plain STE keeps none).
    size_t kept = 0;
    for (const int64_t i : out_r) {
      if (!std::isfinite(px[r * L + i])) {
#pragma omp critical(quant_codes_error)
        if (bad < 0 || r * L + i < bad) bad = r * L + i;
        break;
      }
      if (ste == SteKind::clipped) out_r[kept++] = r * L + i;
    }
    out_r.resize(kept);
  }
  if (error) std::rethrow_exception(error);
  QAT_CHECK(bad < 0, what, ": weight ", bad < 0 ? 0.f : px[bad], " at index ", bad,
            " is not finite: it has no integer on the weight quantizer's grid");
  for (const std::vector<int64_t>& c : clipped) out.clipped.insert(out.clipped.end(), c.begin(), c.end());
}

void check_input(const Tensor& x, const QuantSpec& spec, const std::string& what) {
  QAT_CHECK(codes_supported(spec), what,
            ": integer weight codes need a symmetric signed grid of at most 8 bits, "
            "per tensor or per channel along axis 0; got ",
            spec.describe());
  QAT_CHECK(x.defined() && x.dtype() == DType::f32 && x.dim() >= 1 && x.is_contiguous() && x.numel() > 0, what,
            ": weight codes need a non-empty contiguous f32 tensor");
}

}  // namespace

void quantize_codes_row(FqRowsKernel kernel, const float* x, int8_t* q, int64_t n, float inv, float qmin, float qmax,
                        int64_t& sum, std::vector<int64_t>& outside) {
  // (0 is on the grid and 0 * inv = 0: the vector kernels' padding lanes add nothing)
  QAT_CHECK(inv > 0.f && std::isfinite(inv) && qmin <= 0.f && qmax >= 0.f, "quantize_codes_row: inv ", inv,
            " must be finite and > 0, [qmin, qmax] = [", qmin, ", ", qmax, "] must hold 0");
  codes_row(kernel)(x, q, n, inv, qmin, qmax, sum, outside);
}

void quantize_codes(const Tensor& x, const QParams& q, const QuantSpec& spec, SteKind ste, QuantCodes& out,
                    const std::string& what) {
  QAT_PROFILE("quantize_codes");
  check_input(x, spec, what);
  const int64_t R = x.size(0), L = x.numel() / R, C = q.scale.numel();
  QAT_CHECK(C == 1 || (spec.per_channel && C == R), what, ": ", C, " scales for a weight of ", R, " rows");
  const float* ps = q.scale.data<float>();
  const int32_t* pz = q.zero_point.data<int32_t>();
  for (int64_t c = 0; c < C; ++c)
    QAT_CHECK(pz[c] == 0 && ps[c] > 0.f && std::isfinite(ps[c]) && std::isfinite(1.0f / ps[c]), what, ": channel ", c,
              " has scale ", ps[c], " and zero point ", pz[c],
              "; integer weight codes need zero point 0 and a positive scale with a finite inverse");
  out.resize(R, L);
  quantize_rows(x.data<float>(), R, L, spec, ste, out, what, [&](int64_t r) { return ps[C == 1 ? 0 : r]; });
}

void observe_and_quantize_codes(Observer& obs, const Tensor& x, SteKind ste, QuantCodes& out, QParams& used,
                                const std::string& what) {
  const QuantSpec& spec = obs.spec();
  check_input(x, spec, what);
  ChannelMinMaxFold* fold = obs.enabled ? obs.channel_fold() : nullptr;
  if (!(fold && spec.per_channel && x.size(0) == obs.channels())) {
    obs.observe(x);
    used = obs.qparams();
    quantize_codes(x, used, spec, ste, out, what);
    return;
  }
  // The fused observer (as fake_quant.cpp's fused_rows): each row reduced,
  // folded and quantized while it is in cache.
  QAT_PROFILE("quantize_codes");
  const int64_t R = x.size(0), L = x.numel() / R;
  out.resize(R, L);
  used = QParams{Tensor::empty({R}), Tensor::empty({R}, DType::i32)};
  float* us = used.scale.data<float>();
  int32_t* uz = used.zero_point.data<int32_t>();
  const float* px = x.data<float>();
  quantize_rows(px, R, L, spec, ste, out, what, [&](int64_t r) {
    float lo, hi;
    fold->fold_row(r, px + r * L, L, lo, hi);
    qparams_from_range(spec, lo, hi, us[r], uz[r]);
    QAT_CHECK(uz[r] == 0, what, ": channel ", r, " got zero point ", uz[r], "; integer weight codes need 0");
    return us[r];
  });
  fold->end_fold();
}

}  // namespace qat::quant
