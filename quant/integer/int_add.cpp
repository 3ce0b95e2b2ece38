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
};
#include "quant/integer/add_lanes.inc"
#undef QAT_ADD_TARGET
}  // namespace avx2

}  // namespace

void add_requant_run(const uint8_t* a, const uint8_t* b, uint8_t* y, int64_t n, const AddRequant& r, RowLanes lanes) {
  int64_t done = 0;
  if (add_exact_in_double(r)) {
    if (lanes == RowLanes::avx512)
      done = avx512::add_run(a, b, y, n, r);
    else if (lanes == RowLanes::avx2)
      done = avx2::add_run(a, b, y, n, r);
  }
  for (int64_t i = done; i < n; ++i) y[i] = add_requant_value(a[i], b[i], r);
}

void add_requant_run(const uint8_t* a, const uint8_t* b, uint8_t* y, int64_t n, const AddRequant& r) {
  static const RowLanes best = best_row_lanes();
  add_requant_run(a, b, y, n, r, best);
}

Tensor integer_add_lanes(const Tensor& a, const Tensor& b, const AddRequant& r) {
  constexpr int64_t kRun = 4096;
  Tensor y = Tensor::empty(a.sizes(), DType::u8);
  const uint8_t *pa = a.data<uint8_t>(), *pb = b.data<uint8_t>();
  uint8_t* py = y.data<uint8_t>();
  const int64_t n = a.numel(), runs = (n + kRun - 1) / kRun;
#pragma omp parallel for schedule(static) if (n >= (int64_t{1} << 15))
  for (int64_t k = 0; k < runs; ++k)
    add_requant_run(pa + k * kRun, pb + k * kRun, py + k * kRun, std::min(kRun, n - k * kRun), r);
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
