#include "quant/integer/int_add.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/cpu_features.h"
#include "core/error.h"
#include "quant/integer/cpu_exec.h"
#include "quant/integer/integer_model.h"
#include "quant/integer/simd.h"

namespace qat::quant {

namespace {
// b null: one input (M_b = 0, b's zero point a's).
AddRequant requant_of(const ActQuant& a, const ActQuant* b, const ActQuant& y, bool relu, const std::string& who) {
  QAT_CHECK(a.valid() && (!b || b->valid()) && y.valid(), who,
            ": integer requantization needs valid grids, got scales ", a.scale,
            b ? detail::cat(", ", b->scale) : std::string(), " -> ", y.scale);
  const double ra = static_cast<double>(a.scale) / y.scale, rb = b ? static_cast<double>(b->scale) / y.scale : 0.0;
  int e = 0;
  std::frexp(std::max(ra, rb), &e);  // max = f 2^e, f in [1/2, 1): max 2^(31 - e) in [2^30, 2^31)
  QAT_CHECK(e <= 30, who, ": input scale ", std::max(a.scale, b ? b->scale : 0.f),
            " is 2^30 or more times the output's ", y.scale, "; no fixed-point multiplier fits");
  AddRequant r;
  r.t = std::min(31 - e, 62);
  const double unit = std::ldexp(1.0, r.t);
  r.ma = std::llround(ra * unit), r.mb = std::llround(rb * unit);
  r.extra = std::llround((y.zero_frac - a.zero_frac * ra - (b ? b->zero_frac * rb : 0.0)) * unit);
  r.a_zero = a.zero_point + a.offset(), r.b_zero = b ? b->zero_point + b->offset() : r.a_zero;
  r.out_zero = y.zero_point + y.offset();
  r.lo = y.qmin() + y.offset(), r.hi = y.qmax() + y.offset();
  if (relu) r.lo = std::max(r.lo, r.out_zero);
  return r;
}
}  // namespace

AddRequant make_add_requant(const ActQuant& a, const ActQuant& b, const ActQuant& y, bool relu,
                            const std::string& who) {
  return requant_of(a, &b, y, relu, who + ": integer add");
}

AddRequant make_requant(const ActQuant& a, const ActQuant& y, const std::string& who) {
  return requant_of(a, nullptr, y, false, who);
}

bool add_exact_in_double(const AddRequant& r) {
  const double bound = 255.0 * static_cast<double>(r.ma + r.mb) + std::abs(static_cast<double>(r.extra));
  return bound < 0x1p53;
}

bool add_in_floats(const AddRequant& r, AddFloats* f) {
  // (the note's bound assumes what make_add_requant gives: multipliers in
  // [0, 2^31], clamps within the stored bytes)
  constexpr int64_t kMaxMultiplier = int64_t{1} << 31;
  if (r.ma < 0 || r.mb < 0 || r.ma > kMaxMultiplier || r.mb > kMaxMultiplier || r.lo < 0 || r.lo > r.hi || r.hi > 255)
    return false;
  if (!add_exact_in_double(r)) return false;  // (the constants below exact in double)
  const double unit = std::ldexp(1.0, -r.t);
  const double fa = static_cast<double>(r.ma) * unit, fb = static_cast<double>(r.mb) * unit;
  const double fc = static_cast<double>(r.extra - r.ma * r.a_zero - r.mb * r.b_zero) * unit + r.out_zero;
  const double s = 255.0 * (std::abs(fa) + std::abs(fb)) + std::abs(fc), e = 8.0 * s * 0x1p-24;
  if (!(e <= 0x1p-6)) return false;
  if (f) *f = {static_cast<float>(fa), static_cast<float>(fb), static_cast<float>(fc), static_cast<float>(r.lo),
               static_cast<float>(r.hi), std::nextafter(static_cast<float>(0.5 - e), 0.f)};  // (at most 1/2 - e)
  return true;
}

namespace {

namespace avx512 {
#define QAT_ADD_TARGET __attribute__((target("avx512f,avx512bw")))
struct Lanes {
  using D = __m512d;
  static constexpr int64_t kWidth = 8;
  static QAT_ADD_TARGET D broadcast(double v) { return _mm512_set1_pd(v); }
  static QAT_ADD_TARGET D widen(const uint8_t* p) {
    return _mm512_cvtepi32_pd(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static QAT_ADD_TARGET void narrow(uint8_t* p, D lo, D hi) {
    const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtpd_epi32(lo)), _mm512_cvtpd_epi32(hi), 1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(both));
  }
  using F = __m512;
  static constexpr int64_t kFloatWidth = 16;
  static QAT_ADD_TARGET F broadcast_f(float v) { return _mm512_set1_ps(v); }
  static QAT_ADD_TARGET F widen_f(const uint8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static QAT_ADD_TARGET F madd(F x, F m, F c) { return _mm512_fmadd_ps(x, m, c); }
  static QAT_ADD_TARGET F min_f(F x, F y) { return _mm512_min_ps(x, y); }
  static QAT_ADD_TARGET F max_f(F x, F y) { return _mm512_max_ps(x, y); }
  static QAT_ADD_TARGET F round_f(F x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static QAT_ADD_TARGET F abs_f(F x) { return _mm512_abs_ps(x); }
  static QAT_ADD_TARGET bool any_at_least(F x, F bound) { return _mm512_cmp_ps_mask(x, bound, _CMP_GE_OQ) != 0; }
  // q: integers in [0, 255]
  static QAT_ADD_TARGET void narrow_f(uint8_t* p, F q) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(q)));
  }
};
#include "quant/integer/add_lanes.inc"
#undef QAT_ADD_TARGET
}  // namespace avx512

namespace avx2 {
#define QAT_ADD_TARGET __attribute__((target("avx2")))
struct Lanes {
  using D = __m256d;
  static constexpr int64_t kWidth = 4;
  static QAT_ADD_TARGET D broadcast(double v) { return _mm256_set1_pd(v); }
  static QAT_ADD_TARGET D widen(const uint8_t* p) {
    int32_t bytes;
    std::memcpy(&bytes, p, sizeof bytes);
    return _mm256_cvtepi32_pd(_mm_cvtepu8_epi32(_mm_cvtsi32_si128(bytes)));
  }
  // The integers are within [0, 255]: the saturating packs keep them.
  static QAT_ADD_TARGET void narrow(uint8_t* p, D lo, D hi) {
    const __m128i words = _mm_packs_epi32(_mm256_cvtpd_epi32(lo), _mm256_cvtpd_epi32(hi));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_packus_epi16(words, words));
  }
  using F = __m256;
  static constexpr int64_t kFloatWidth = 8;
  static QAT_ADD_TARGET F broadcast_f(float v) { return _mm256_set1_ps(v); }
  static QAT_ADD_TARGET F widen_f(const uint8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  // (no FMA: AVX2 does not promise it; the note's bound counts both roundings)
  static QAT_ADD_TARGET F madd(F x, F m, F c) { return _mm256_add_ps(_mm256_mul_ps(x, m), c); }
  static QAT_ADD_TARGET F min_f(F x, F y) { return _mm256_min_ps(x, y); }
  static QAT_ADD_TARGET F max_f(F x, F y) { return _mm256_max_ps(x, y); }
  static QAT_ADD_TARGET F round_f(F x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static QAT_ADD_TARGET F abs_f(F x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.f), x); }
  static QAT_ADD_TARGET bool any_at_least(F x, F bound) {
    return _mm256_movemask_ps(_mm256_cmp_ps(x, bound, _CMP_GE_OQ)) != 0;
  }
  // q: integers in [0, 255] (the saturating packs keep them)
  static QAT_ADD_TARGET void narrow_f(uint8_t* p, F q) {
    const __m256i v = _mm256_cvtps_epi32(q);
    const __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_packus_epi16(words, words));
  }
};
#include "quant/integer/add_lanes.inc"
#undef QAT_ADD_TARGET
}  // namespace avx2

}  // namespace

namespace {
// Which lanes run an add, chosen once for its constants (not once a run).
struct AddPlan {
  RowLanes lanes;
  bool floats, doubles;
  AddFloats f;
};
AddPlan add_plan(const AddRequant& r, RowLanes lanes, bool floats) {
  AddPlan p{lanes, false, false, {}};
  p.floats = floats && lanes != RowLanes::scalar && add_in_floats(r, &p.f);
  p.doubles = !p.floats && lanes != RowLanes::scalar && add_exact_in_double(r);
  return p;
}
void run_planned(const uint8_t* a, const uint8_t* b, uint8_t* y, int64_t n, const AddRequant& r, const AddPlan& p) {
  const bool wide = p.lanes == RowLanes::avx512;
  int64_t done = 0;
  if (p.floats)
    done = wide ? avx512::add_run_floats(a, b, y, n, r, p.f) : avx2::add_run_floats(a, b, y, n, r, p.f);
  else if (p.doubles)
    done = wide ? avx512::add_run(a, b, y, n, r) : avx2::add_run(a, b, y, n, r);
  for (int64_t i = done; i < n; ++i) y[i] = add_requant_value(a[i], b[i], r);
}
}  // namespace

void add_requant_run(const uint8_t* a, const uint8_t* b, uint8_t* y, int64_t n, const AddRequant& r, RowLanes lanes,
                     bool floats) {
  run_planned(a, b, y, n, r, add_plan(r, lanes, floats));
}

Tensor integer_add_lanes(const Tensor& a, const Tensor& b, const AddRequant& r) {
  constexpr int64_t kRun = 4096;
  static const RowLanes best = best_row_lanes();
  const AddPlan plan = add_plan(r, best, true);
  Tensor y = Tensor::empty(a.sizes(), DType::u8);
  const uint8_t *pa = a.data<uint8_t>(), *pb = b.data<uint8_t>();
  uint8_t* py = y.data<uint8_t>();
  const int64_t n = a.numel(), runs = (n + kRun - 1) / kRun;
#pragma omp parallel for schedule(static) if (n >= (int64_t{1} << 15))
  for (int64_t k = 0; k < runs; ++k)
    run_planned(pa + k * kRun, pb + k * kRun, py + k * kRun, std::min(kRun, n - k * kRun), r, plan);
  return y;
}

Tensor integer_add_cpu(const Tensor& a, const Tensor& b, const AddRequant& r, const std::string& who) {
  QAT_CHECK(a.dtype() == DType::u8 && b.dtype() == DType::u8 && a.is_contiguous() && b.is_contiguous() &&
                a.sizes() == b.sizes(),
            who, ": integer add of contiguous uint8 tensors of one shape, got ", dtype_name(a.dtype()), " ", a.sizes(),
            " and ", dtype_name(b.dtype()), " ", b.sizes());
  CpuExec ex;
  return integer_add(ex, a, b, r);
}

}  // namespace qat::quant
