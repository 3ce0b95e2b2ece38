// The integer model's kernels (int_kernels.h): requantization against its
// exact rational specification, im2row against a per-element gather.
#include <algorithm>
#include <cmath>
#include <random>

#include "core/cpu_features.h"
#include "quant/integer/int_kernels.h"
#include "tests/test_util.h"

using namespace qat;
using namespace qat::quant;

namespace {
// The plan's requantization on every vector path this CPU has (AVX-512 and
// AVX2 where it has both), each compared with `ref` by the caller.
std::vector<std::vector<uint8_t>> requantize_each_path(const int32_t* acc, int64_t rows, const RequantPlan& plan) {
  std::vector<std::vector<uint8_t>> out;
  RequantPlan p = plan;
  for (;;) {
    out.emplace_back(static_cast<size_t>(rows * plan.n));
    requantize_rows(acc, rows, p, out.back().data());
    if (!p.avx512) return out;
    p.avx512 = false;  // then the AVX2 path on the same plan
  }
}
}  // namespace

TEST_CASE("vectorised requantization equals the scalar reference", "[quant][integer]") {
  if (!cpu_has_avx2()) WARN("no AVX2 here: the vector requantization is not tested");
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> acc_d(-(1 << 28), 1 << 28), m_d(1 << 30, INT32_MAX), z_d(0, 255), sign_d(0, 1);
  constexpr int64_t kRows = 3;  // (rows back to back: the AVX-512 path may take them as one run)
  // Each width (a multiple of 16 or not: the AVX-512 path takes such rows as
  // one run, 64 values a step, channels wrapping inside a step), each plan
  // kind (a shift of 0 somewhere: the odd lanes shifted apart; every shift
  // >= 1: shifted high; every shift in [1, 21]: shifted high, the zero point in the
  // addend too), and a clamp at 255 or below it (the byte conversion
  // saturates, or a min).
  enum Kind { kShiftZero, kHigh, kHighZero };
  for (int64_t n : {1, 7, 8, 9, 16, 17, 32, 48, 64, 100})
    for (const Kind kind : {kShiftZero, kHigh, kHighZero})
      for (const int32_t hi : {255, 250}) {
        std::uniform_int_distribution<int32_t> s_d(1, kind == kHighZero ? 21 : 31);
        std::vector<int32_t> acc(n * kRows), bias(n), m0(n), shift(n), residual(n);
        for (auto& a : acc) a = acc_d(rng);
        for (int64_t c = 0; c < n; ++c) {
          bias[c] = acc_d(rng) / 8;
          m0[c] = c % 3 == 0 ? (1 << 30) : m_d(rng);  // every third a power of two (pure shift)
          shift[c] = s_d(rng);
          residual[c] = static_cast<int32_t>(acc_d(rng) % (m0[c] / 2));
        }
        if (kind == kShiftZero) shift[n - 1] = 0;
        if (kind == kHigh) shift[n - 1] = 31;
        // Exact ties (x.5 before the zero point), which must round upwards:
        // (acc + bias) * 2^30 / 2^(31 + shift) with no bias or residual.
        auto tie = [&](int64_t c, int32_t a, int32_t s) {
          if (c >= n) return;
          acc[c] = a, bias[c] = 0, residual[c] = 0, m0[c] = 1 << 30, shift[c] = s;
        };
        tie(0, 3 << 19, 19);                      //  1.5 -> 2
        tie(1, 3, kind == kShiftZero ? 0 : 1);    //  1.5 -> 2 (0.75 -> 1 with shift 1)
        tie(2, -(5 << 9), 9);                     // -2.5 -> -2
        // The largest products: |acc|, |bias| just under 2^30, m0 just under 2^31.
        for (int64_t c = 3; c < n; c += 5) {
          acc[c] = sign_d(rng) ? (1 << 30) - 1 : -(1 << 30) + 1;
          bias[c] = sign_d(rng) ? (1 << 30) - 1 : -(1 << 30) + 1;
          m0[c] = INT32_MAX - sign_d(rng);
          shift[c] = std::max(shift[c], 1);  // (shift 0 could reach 2^31 - 2 before the zero point: int32 overflow)
          residual[c] = sign_d(rng) ? m0[c] / 2 : -(m0[c] / 2);
        }
        const int32_t zero = z_d(rng);
        const RequantParams p{bias.data(), m0.data(), shift.data(), residual.data(), zero, std::min(zero, 3), hi};
        std::vector<uint8_t> ref(acc.size());
        for (int64_t r = 0; r < kRows; ++r)
          requantize_row_reference(acc.data() + r * n, n, p, ref.data() + r * n);
        INFO("n " << n << ", plan kind " << kind << ", hi " << hi);
        const RequantPlan plan = make_requant_plan(p, n);
        if (plan.vector && n > 3) {  // (the plan kind the case means to test; n <= 3: ties only)
          CHECK(plan.high == (kind != kShiftZero));
          const bool small = std::all_of(shift.begin(), shift.end(), [](int32_t s) { return s <= 21; });
          CHECK(plan.zero_in_addend == (kind != kShiftZero && small));
          if (kind == kHighZero) CHECK(plan.zero_in_addend);
          if (kind == kHigh) CHECK(!plan.zero_in_addend);
        }
        for (const auto& fast : requantize_each_path(acc.data(), kRows, plan)) REQUIRE(fast == ref);
        // The ties' values, upwards: zero + 2 and zero - 2 (inside the clamp for these zero points).
        auto clamped = [&](int v) { return static_cast<uint8_t>(std::clamp(v, int{p.lo}, int{p.hi})); };
        CHECK(ref[0] == clamped(zero + 2));
        if (n > 1) CHECK(ref[1] == clamped(zero + (kind == kShiftZero ? 2 : 1)));
        if (n > 2) CHECK(ref[2] == clamped(zero - 2));
        // Both clamps bind somewhere in the wide rows.
        if (n >= 64) CHECK((std::count(ref.begin(), ref.end(), p.lo) > 0 && std::count(ref.begin(), ref.end(), hi) > 0));
      }
}

TEST_CASE("power-of-two requantization plans are pure shifts equal to the reference", "[quant][integer]") {
  std::mt19937 rng(8);
  std::uniform_int_distribution<int32_t> acc_d(-(1 << 24), 1 << 24), s_d(0, 20);
  // (32 and 64 channels: the AVX-512 path's runs of 64 values; 250: its clamp below 255)
  for (int64_t n : {1, 16, 37, 32, 64})
    for (const int32_t hi : {255, 250}) {
      std::vector<int32_t> acc(n * 3), bias(n), m0(n, 1 << 30), shift(n), residual(n);
      for (auto& a : acc) a = acc_d(rng);
      for (int64_t c = 0; c < n; ++c) {
        bias[c] = acc_d(rng) / 4;
        shift[c] = s_d(rng);
        residual[c] = static_cast<int32_t>(acc_d(rng) % (1 << 29));
      }
      const RequantParams p{bias.data(), m0.data(), shift.data(), residual.data(), 3, 0, hi};
      const RequantPlan plan = make_requant_plan(p, n);
      if (plan.vector) REQUIRE(plan.pure_shift);
      std::vector<uint8_t> ref(n * 3);
      for (int r = 0; r < 3; ++r) requantize_row_reference(acc.data() + r * n, n, p, ref.data() + r * n);
      INFO("n " << n << ", hi " << hi);
      for (const auto& fast : requantize_each_path(acc.data(), 3, plan)) REQUIRE(fast == ref);
      if (n >= 32) CHECK((std::count(ref.begin(), ref.end(), 0) > 0 && std::count(ref.begin(), ref.end(), hi) > 0));
    }
}

TEST_CASE("a requantization plan refuses a clamp outside the stored bytes", "[quant][integer]") {
  const int32_t bias = 0, m0 = 1 << 30, shift = 3, residual = 0;
  auto plan = [&](int32_t lo, int32_t hi) {
    return make_requant_plan(RequantParams{&bias, &m0, &shift, &residual, 0, lo, hi}, 1);
  };
  REQUIRE_NOTHROW(plan(0, 255));
  REQUIRE_NOTHROW(plan(7, 7));
  REQUIRE_THROWS_WITH(plan(-1, 255), Catch::Matchers::Contains("clamp [-1, 255] is not inside the stored bytes"));
  REQUIRE_THROWS_WITH(plan(0, 256), Catch::Matchers::Contains("clamp [0, 256]"));
  REQUIRE_THROWS_WITH(plan(9, 8), Catch::Matchers::Contains("clamp [9, 8]"));
}

TEST_CASE("requantization is exact rounding of x * M + residual, ties upwards", "[quant][integer]") {
  std::mt19937 rng(9);
  std::uniform_int_distribution<int32_t> x_d(INT32_MIN / 2, INT32_MAX / 2), m_d(1 << 30, INT32_MAX), s_d(-3, 31);
  for (int i = 0; i < 200000; ++i) {
    const int32_t x = i % 4 == 0 ? x_d(rng) / 65536 : x_d(rng), m0 = m_d(rng), shift = s_d(rng);
    const int32_t res = i % 2 ? static_cast<int32_t>(x_d(rng) % (m0 / 2)) : 0;
    // exact rational (x * m0 + res) / 2^(31 + shift): |p| = q * 2^t + r
    const __int128 p = static_cast<__int128>(x) * m0 + res;
    const int t = 31 + shift;
    // floor(p / 2^t + 1/2), from floor division: p = q 2^t + r, 0 <= r < 2^t
    const __int128 one = 1, q = p >= 0 ? p >> t : -((-p + (one << t) - 1) >> t), r = p - q * (one << t);
    const __int128 want = q + (2 * r >= (one << t) ? 1 : 0);
    const int64_t clamped = want > INT32_MAX ? INT32_MAX : want < INT32_MIN ? INT32_MIN : static_cast<int64_t>(want);
    REQUIRE(requantize_value(x, m0, shift, res) == clamped);
  }
}

TEST_CASE("power-of-two multipliers requantize with one rounding shift", "[quant][integer]") {
  for (int k = 0; k <= 31; ++k) {
    const FixedPointMultiplier f = quantize_multiplier(std::ldexp(1.0, -k));
    REQUIRE(f.m0 == (1 << 30));
    for (int32_t x : {0, 1, -1, 3, -3, 5, 1 << 10, -(1 << 10) - 1, 123456789, -123456789}) {
      // exact x / 2^k rounded, ties upwards
      const double want = std::floor(std::ldexp(static_cast<double>(x), -k) + 0.5);
      REQUIRE(requantize_value(x, f.m0, f.shift) == static_cast<int32_t>(want));
    }
  }
}

TEST_CASE("im2row on NHWC bytes pads with the zero point", "[quant][integer]") {
  // 1 image 3x3x2, kernel 2x2, stride 2, pad 1 -> 2x2 outputs of K = 8
  std::vector<uint8_t> x(18);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint8_t>(i + 1);
  std::vector<uint8_t> rows(4 * 8);
  im2row_u8(x.data(), {3, 3, 2, 2, 2, 2, 2, 1, 1, 1, 1, 2, 2}, 99, rows.data());
  // output (0,0): window rows -1..0, cols -1..0 -> only (0,0) inside
  REQUIRE(std::vector<uint8_t>(rows.begin(), rows.begin() + 8) == std::vector<uint8_t>{99, 99, 99, 99, 99, 99, 1, 2});
  // output (1,1): rows 1..2, cols 1..2 -> all inside: pixels (1,1),(1,2),(2,1),(2,2)
  REQUIRE(std::vector<uint8_t>(rows.begin() + 24, rows.end()) == std::vector<uint8_t>{9, 10, 11, 12, 15, 16, 17, 18});
}

TEST_CASE("im2row equals a per-element gather on random shapes", "[quant][integer]") {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t h = 1 + rng() % 9, w = 1 + rng() % 9, c = 1 + rng() % 5, kh = 1 + rng() % 4, kw = 1 + rng() % 4;
    const int64_t sh = 1 + rng() % 3, sw = 1 + rng() % 3, ph = rng() % 3, pw = rng() % 3, dh = 1 + rng() % 2,
                  dw = 1 + rng() % 2;
    const int64_t oh = (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1, ow = (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
    if (h + 2 * ph - dh * (kh - 1) - 1 < 0 || w + 2 * pw - dw * (kw - 1) - 1 < 0) continue;
    std::vector<uint8_t> x(h * w * c);
    for (auto& v : x) v = static_cast<uint8_t>(rng());
    const int64_t K = kh * kw * c;
    std::vector<uint8_t> rows(oh * ow * K);
    im2row_u8(x.data(), {h, w, c, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow}, 7, rows.data());
    for (int64_t p = 0; p < oh * ow; ++p)
      for (int64_t i = 0; i < kh; ++i)
        for (int64_t j = 0; j < kw; ++j)
          for (int64_t ch = 0; ch < c; ++ch) {
            const int64_t ih = (p / ow) * sh - ph + i * dh, iw = (p % ow) * sw - pw + j * dw;
            const uint8_t want = ih < 0 || ih >= h || iw < 0 || iw >= w ? 7 : x[(ih * w + iw) * c + ch];
            REQUIRE(rows[p * K + (i * kw + j) * c + ch] == want);
          }
  }
}

// The padded-image path (kernel rows of at most 64 bytes, one 64-byte copy
// each) against the general im2row, on whole images and on ranges of
// positions, with garbage past each range that must survive only in the
// slack: conv1's shape, C = 1, rows of exactly 64 bytes, strides, padding
// on one side, dilation along the height.
TEST_CASE("im2row from a padded image equals the general im2row, its rows packed or a stride apart",
          "[quant][integer]") {
  std::mt19937 rng(11);
  std::vector<Im2RowShape> shapes = {
      {35, 35, 3, 11, 11, 4, 4, 2, 2, 1, 1, 8, 8},  // conv1-like
      {9, 7, 1, 3, 3, 1, 1, 1, 1, 1, 1, 9, 7},      // C = 1
      {6, 20, 16, 2, 4, 1, 2, 0, 1, 1, 1, 5, 9},    // kernel rows of exactly 64 bytes
      {10, 10, 2, 3, 5, 2, 3, 2, 0, 2, 1, 5, 2},    // dilation along the height, padding on the height only
  };
  for (int trial = 0; trial < 30; ++trial) {
    const int64_t c = 1 + rng() % 6, kw = 1 + rng() % (64 / c < 6 ? 64 / c : 6), kh = 1 + rng() % 5;
    const int64_t h = kh + rng() % 8, w = kw + rng() % 8, sh = 1 + rng() % 3, sw = 1 + rng() % 4;
    const int64_t ph = rng() % (kh), pw = rng() % (kw), dh = 1 + rng() % 2;
    const int64_t eh = h + 2 * ph - dh * (kh - 1) - 1, ew = w + 2 * pw - kw;
    if (eh < 0 || ew < 0) continue;
    shapes.push_back({h, w, c, kh, kw, sh, sw, ph, pw, dh, 1, eh / sh + 1, ew / sw + 1});
  }
  for (const Im2RowShape& s : shapes) {
    INFO("image " << s.h << "x" << s.w << "x" << s.c << " kernel " << s.kh << "x" << s.kw << " stride " << s.stride_h
                  << "," << s.stride_w << " pad " << s.pad_h << "," << s.pad_w << " dilation " << s.dil_h);
    REQUIRE(im2row_padded_applies(s));
    std::vector<uint8_t> x(static_cast<size_t>(s.h * s.w * s.c));
    for (auto& v : x) v = static_cast<uint8_t>(rng());
    const int64_t K = s.kh * s.kw * s.c, P = s.out_h * s.out_w;
    std::vector<uint8_t> want(static_cast<size_t>(P * K));
    im2row_u8(x.data(), s, 5, want.data());
    std::vector<uint8_t> padded(static_cast<size_t>(padded_image_bytes(s)));
    pad_image_u8(x.data(), s, 5, padded.data());
    for (const int64_t first : {int64_t{0}, P / 3}) {
      const int64_t count = first == 0 ? P : std::max<int64_t>(1, P / 2);
      std::vector<uint8_t> got(static_cast<size_t>(count * K + kIm2RowSlack), 0xEE);
      im2row_u8_padded_range(padded.data(), s, first, count, got.data());
      REQUIRE(std::equal(got.begin(), got.begin() + count * K, want.begin() + first * K));
      REQUIRE(std::all_of(got.begin() + count * K, got.end(), [](uint8_t v) { return v == 0xEE; }));  // (inside)
      // Rows a stride apart (the AMX kernel's zero-padded rows): each row's K
      // bytes, the bytes up to the stride left as they were, by both im2rows.
      const int64_t stride = (K + 63) / 64 * 64 + 64;
      for (const bool via_padded : {true, false}) {
        CAPTURE(via_padded);
        std::vector<uint8_t> strided(static_cast<size_t>(count * stride + kIm2RowSlack), 0xEE);
        if (via_padded)
          im2row_u8_padded_range(padded.data(), s, first, count, strided.data(), stride);
        else
          im2row_u8_range(x.data(), s, 5, first, count, strided.data(), stride);
        for (int64_t r = 0; r < count; ++r) {
          const auto row = strided.begin() + r * stride;
          REQUIRE(std::equal(row, row + K, want.begin() + (first + r) * K));
          REQUIRE(std::all_of(row + K, row + stride, [](uint8_t v) { return v == 0xEE; }));
        }
      }
    }
  }
}

// A 1x1 layer's rows are its images' planes transposed (blocks of 64
// crossed on both sides); a weight's columns reordered to (taps, c).
TEST_CASE("NCHW pointwise rows and the NHWC weight order equal their definitions", "[quant][integer]") {
  std::mt19937 rng(5);
  const int64_t n = 3, c = 70, hw = 130;
  std::vector<uint8_t> u(static_cast<size_t>(n * c * hw)), rows(u.size());
  for (auto& v : u) v = static_cast<uint8_t>(rng());
  pointwise_rows_nchw(u.data(), n, c, hw, rows.data());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < hw; ++p)
      for (int64_t ch = 0; ch < c; ++ch) REQUIRE(rows[(i * hw + p) * c + ch] == u[(i * c + ch) * hw + p]);
  const int64_t o = 5, taps = 9;
  std::vector<int8_t> w(static_cast<size_t>(o * c * taps)), out(w.size());
  for (auto& v : w) v = static_cast<int8_t>(rng());
  weight_as_nhwc(w.data(), o, c, taps, out.data());
  for (int64_t r = 0; r < o; ++r)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t t = 0; t < taps; ++t) REQUIRE(out[(r * taps + t) * c + ch] == w[(r * c + ch) * taps + t]);
}

// transpose_bytes: whole blocks of 16 rows and 64 columns in registers
// where the CPU has AVX-512, the rest through the scalar tile; shapes with
// both kinds and neither.
TEST_CASE("transpose_bytes equals the element-wise transpose on ragged shapes", "[quant][integer]") {
  std::mt19937 rng(8);
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
           {16, 64}, {64, 128}, {37, 64}, {64, 100}, {130, 190}, {15, 63}, {1, 64}, {512, 2304}}) {
    std::vector<int8_t> src(static_cast<size_t>(rows * cols)), dst(src.size() + 1, 99);
    for (auto& v : src) v = static_cast<int8_t>(rng());
    transpose_bytes(src.data(), rows, cols, dst.data());
    bool same = true;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) same &= dst[c * rows + r] == src[r * cols + c];
    INFO(rows << " x " << cols);
    CHECK(same);
    CHECK(dst.back() == 99);  // nothing past the end
  }
}

// The NCHW layouts of INT8 training (byte_layout.h) against the definition,
// element by element: the rows' kernel rows (kw c bytes, NHWC) of 5 to 128
// bytes (each word size of the shared window copy, the AVX-512 masked
// copies, and the exact copies past 64), dilation along both sides, padding,
// strides, two images.
TEST_CASE("NCHW im2row, im2col and col2im equal their definitions", "[quant][integer]") {
  std::mt19937 rng(12);
  const std::vector<Im2RowShape> shapes = {
      {7, 10, 1, 3, 5, 1, 1, 1, 2, 1, 1, 7, 10},    // 5 bytes: 8-byte words, padded
      {6, 9, 3, 3, 3, 1, 1, 1, 1, 1, 1, 6, 9},      // 9 bytes: 16-byte words
      {12, 12, 2, 2, 11, 2, 1, 1, 5, 1, 1, 7, 12},  // 22 bytes: 32-byte words
      {5, 40, 1, 2, 24, 1, 3, 0, 4, 1, 1, 4, 9},    // 24 bytes: 32-byte words, stride 3
      {5, 6, 16, 3, 3, 2, 1, 1, 1, 1, 1, 3, 6},     // 48 bytes: AVX-512 moves
      {4, 5, 32, 2, 2, 1, 1, 0, 0, 1, 1, 3, 4},     // exactly 64
      {3, 90, 1, 2, 80, 1, 5, 1, 0, 1, 1, 4, 3},    // 80: exact copies
      {4, 70, 2, 1, 64, 1, 2, 0, 0, 1, 1, 4, 4},    // 128: exact copies
      {11, 13, 2, 3, 3, 2, 2, 2, 3, 2, 3, 6, 7},    // dilation on both sides
  };
  for (const Im2RowShape& s : shapes) {
    INFO("image " << s.h << "x" << s.w << "x" << s.c << " kernel " << s.kh << "x" << s.kw);
    const int64_t n = 2, K = s.c * s.kh * s.kw, P = s.out_h * s.out_w, M = n * P;
    REQUIRE((s.h + 2 * s.pad_h - s.dil_h * (s.kh - 1) - 1) / s.stride_h + 1 == s.out_h);
    REQUIRE((s.w + 2 * s.pad_w - s.dil_w * (s.kw - 1) - 1) / s.stride_w + 1 == s.out_w);
    std::vector<uint8_t> u(static_cast<size_t>(n * s.c * s.h * s.w));
    for (auto& v : u) v = static_cast<uint8_t>(rng());
    const uint8_t pad = 77;
    auto at = [&](int64_t m, int64_t k) -> uint8_t {  // the definition
      const int64_t i = m / P, oy = (m % P) / s.out_w, ox = m % s.out_w;
      const int64_t c = k / (s.kh * s.kw), ki = (k / s.kw) % s.kh, kj = k % s.kw;
      const int64_t y = oy * s.stride_h - s.pad_h + ki * s.dil_h, x = ox * s.stride_w - s.pad_w + kj * s.dil_w;
      return y < 0 || y >= s.h || x < 0 || x >= s.w ? pad : u[((i * s.c + c) * s.h + y) * s.w + x];
    };
    // The rows in (ki, kj, c) order (through NHWC images), the columns in (c, ki, kj).
    std::vector<uint8_t> rows(static_cast<size_t>(M * K));
    im2row_nchw_as_nhwc(u.data(), s, n, pad, rows.data());
    std::vector<int8_t> col(static_cast<size_t>(K * M));
    im2col_nchw(u.data(), s, n, pad, col.data());
    const int64_t taps = s.kh * s.kw;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < K; ++k) {
        REQUIRE(rows[m * K + (k % taps) * s.c + k / taps] == at(m, k));
        REQUIRE(col[k * M + m] == static_cast<int8_t>(at(m, k) - 128));
      }
    // col2im of image 1's rows of values: each input pixel sums the values of
    // the (position, tap) pairs that read it.
    std::vector<int32_t> acc(static_cast<size_t>(P * K));
    for (auto& v : acc) v = static_cast<int32_t>(rng() % 2001) - 1000;
    std::vector<int64_t> planes(static_cast<size_t>(padded_planes_elems(s)));
    col2im_nchw(acc.data(), K, nullptr, s, planes.data());
    std::vector<float> dx(static_cast<size_t>(s.c * s.h * s.w));
    planes_to_float(planes.data(), s, 0.5, dx.data());
    std::vector<int64_t> want(dx.size(), 0);
    for (int64_t p = 0; p < P; ++p)
      for (int64_t k = 0; k < K; ++k) {
        const int64_t c = k / (s.kh * s.kw), ki = (k / s.kw) % s.kh, kj = k % s.kw;
        const int64_t y = (p / s.out_w) * s.stride_h - s.pad_h + ki * s.dil_h;
        const int64_t x = (p % s.out_w) * s.stride_w - s.pad_w + kj * s.dil_w;
        if (y >= 0 && y < s.h && x >= 0 && x < s.w) want[(c * s.h + y) * s.w + x] += acc[p * K + k];
      }
    for (size_t i = 0; i < dx.size(); ++i) REQUIRE(dx[i] == static_cast<float>(0.5 * static_cast<double>(want[i])));
    // The same rows with a wider stride and an offset per column (the
    // shifted GEMM's correction): each value counts as acc - off[k].
    const int64_t ldc = K + 5;
    std::vector<int32_t> wide(static_cast<size_t>(P * ldc), 12345);
    std::vector<int64_t> off(static_cast<size_t>(K));
    for (int64_t k = 0; k < K; ++k) off[k] = static_cast<int64_t>(rng() % 4001) - 2000;
    for (int64_t p = 0; p < P; ++p)
      for (int64_t k = 0; k < K; ++k) wide[p * ldc + k] = static_cast<int32_t>(acc[p * K + k] + off[k]);
    col2im_nchw(wide.data(), ldc, off.data(), s, planes.data());
    planes_to_float(planes.data(), s, 0.5, dx.data());
    for (size_t i = 0; i < dx.size(); ++i) REQUIRE(dx[i] == static_cast<float>(0.5 * static_cast<double>(want[i])));
  }
}
