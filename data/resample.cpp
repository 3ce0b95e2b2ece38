#include "data/resample.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace qat::data {

namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;  // Pillow's PRECISION_BITS

double triangle(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

// Per output position: the first input index, the tap count, and ksize
// fixed-point weights (Pillow's precompute_coeffs + normalize_coeffs_8bpc).
struct Coeffs {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<int32_t> k;
};

Coeffs precompute(int in_size, int out_size) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = 1.0 * filterscale;  // the triangle's support is 1
  Coeffs c;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.first.resize(out_size);
  c.count.resize(out_size);
  c.k.assign(static_cast<size_t>(out_size) * c.ksize, 0);
  std::vector<double> w(c.ksize);
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      w[x] = triangle((x + xmin - center + 0.5) * ss);
      ww += w[x];
    }
    for (int x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? w[x] / ww : w[x];
      const double scaled = v * (1 << kPrecisionBits);
      c.k[static_cast<size_t>(xx) * c.ksize + x] = static_cast<int32_t>(v < 0 ? -0.5 + scaled : 0.5 + scaled);
    }
    c.first[xx] = xmin;
    c.count[xx] = xmax;
  }
  return c;
}

uint8_t clip8(int32_t v) {
  if (v >= (int32_t{1} << kPrecisionBits << 8)) return 255;
  if (v <= 0) return 0;
  return static_cast<uint8_t>(v >> kPrecisionBits);
}

// Rows [row0, row0 + rows) of `in`, resampled along x to `out_w`.
Image horizontal(const Image& in, int64_t row0, int64_t rows, int64_t out_w) {
  const Coeffs c = precompute(static_cast<int>(in.width), static_cast<int>(out_w));
  Image out;
  out.height = rows;
  out.width = out_w;
  out.rgb.resize(static_cast<size_t>(rows * out_w * 3));
  for (int64_t y = 0; y < rows; ++y) {
    const uint8_t* src = &in.rgb[static_cast<size_t>((row0 + y) * in.width * 3)];
    uint8_t* dst = &out.rgb[static_cast<size_t>(y * out_w * 3)];
    for (int64_t xx = 0; xx < out_w; ++xx) {
      const int32_t* k = &c.k[static_cast<size_t>(xx) * c.ksize];
      const uint8_t* p = src + static_cast<size_t>(c.first[xx]) * 3;
      // int32 as Pillow: the triangle's weights are positive and sum to
      // about 2^22, so 255 * 2^22 + 2^21 cannot overflow.
      int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
      for (int x = 0; x < c.count[xx]; ++x) {
        s0 += p[x * 3 + 0] * k[x];
        s1 += p[x * 3 + 1] * k[x];
        s2 += p[x * 3 + 2] * k[x];
      }
      dst[xx * 3 + 0] = clip8(s0);
      dst[xx * 3 + 1] = clip8(s1);
      dst[xx * 3 + 2] = clip8(s2);
    }
  }
  return out;
}

// `in` resampled along y to `out_h`, with the rows' first indices shifted by
// -row0 (the horizontal pass kept only rows from row0 on).
Image vertical(const Image& in, const Coeffs& c, int64_t row0, int64_t out_h) {
  Image out;
  out.height = out_h;
  out.width = in.width;
  out.rgb.resize(static_cast<size_t>(out_h * in.width * 3));
  const int64_t stride = in.width * 3;
  std::vector<int32_t> acc(static_cast<size_t>(stride));
  for (int64_t yy = 0; yy < out_h; ++yy) {
    // Row by row over the taps (contiguous, vectorisable); the same sums as
    // Pillow's per-pixel loop, since integer addition is exact.
    const int32_t* k = &c.k[static_cast<size_t>(yy) * c.ksize];
    const uint8_t* src = &in.rgb[static_cast<size_t>((c.first[yy] - row0) * stride)];
    std::fill(acc.begin(), acc.end(), int32_t{1} << (kPrecisionBits - 1));
    for (int y = 0; y < c.count[yy]; ++y) {
      const uint8_t* row = src + y * stride;
      const int32_t ky = k[y];
      for (int64_t i = 0; i < stride; ++i) acc[i] += row[i] * ky;
    }
    uint8_t* dst = &out.rgb[static_cast<size_t>(yy * stride)];
    for (int64_t i = 0; i < stride; ++i) dst[i] = clip8(acc[i]);
  }
  return out;
}

}  // namespace

Image resample_bilinear(const Image& img, int64_t height, int64_t width) {
  const bool need_h = width != img.width, need_v = height != img.height;
  if (!need_h && !need_v) return img;
  const Coeffs cv = precompute(static_cast<int>(img.height), static_cast<int>(height));
  if (!need_h) return vertical(img, cv, 0, height);
  // Only the rows the vertical pass reads go through the horizontal pass.
  const int64_t first = cv.first[0];
  const int64_t last = cv.first[height - 1] + cv.count[height - 1];
  const Image tmp = horizontal(img, first, last - first, width);
  if (!need_v) return tmp;
  return vertical(tmp, cv, first, height);
}

}  // namespace qat::data
