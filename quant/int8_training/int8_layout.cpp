// INT8 training's NCHW byte layouts (int8_cpu.h): padding, im2row, im2col,
// col2im and the byte transpose.
#include <algorithm>
#include <cstring>

#include "core/profiler.h"
#include "quant/int8_training/int8_cpu.h"

namespace qat::quant::int8_cpu {

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

namespace {

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
  const int64_t Hp = g.h + 2 * g.pad_h, Wp = g.w + 2 * g.pad_w, NC = g.n * g.c;
  std::memset(planes + NC * Hp * Wp, pad, kPlaneSlack);
#pragma omp parallel for schedule(static)
  for (int64_t nc = 0; nc < NC; ++nc) {
    uint8_t* plane = planes + nc * Hp * Wp;
    std::memset(plane, pad, static_cast<size_t>(g.pad_h * Wp));
    for (int64_t y = 0; y < g.h; ++y) {
      uint8_t* row = plane + (y + g.pad_h) * Wp;
      std::memset(row, pad, static_cast<size_t>(g.pad_w));
      std::memcpy(row + g.pad_w, u + (nc * g.h + y) * g.w, static_cast<size_t>(g.w));
      std::memset(row + g.pad_w + g.w, pad, static_cast<size_t>(g.pad_w));
    }
    std::memset(plane + (g.pad_h + g.h) * Wp, pad, static_cast<size_t>(g.pad_h * Wp));
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
  const int64_t K = g.K(), Hp = g.h + 2 * g.pad_h, Wp = g.w + 2 * g.pad_w;
  const int64_t down = g.dil_h * Wp, next_plane = Hp * Wp - g.kh * down;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t oy = 0; oy < g.oh; ++oy)
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        uint8_t* r = rows + ((n * g.oh + oy) * g.ow + ox) * K;
        const uint8_t* const end = r + K;
        const uint8_t* src = planes + (n * g.c * Hp + oy * g.stride_h) * Wp + ox * g.stride_w;
        for (int64_t c = 0; c < g.c; ++c, src += next_plane)
          for (int64_t ki = 0; ki < g.kh; ++ki, r += g.kw, src += down) {
            if (Word > 0 && end - r >= Word) std::memcpy(r, src, Word);
            else
              for (int64_t j = 0; j < g.kw; ++j) r[j] = src[j * g.dil_w];
          }
      }
}

}  // namespace

// rows (M x K): the im2row rows of u.
void im2row(const uint8_t* u, const Geom& g, uint8_t pad, uint8_t* rows) {
  QAT_PROFILE("int8_train.im2row");
  uint8_t* planes = scratch<uint8_t>(kPlanes, g.n * g.c * (g.h + 2 * g.pad_h) * (g.w + 2 * g.pad_w) + kPlaneSlack);
  pad_planes(u, g, pad, planes);
  if (g.dil_w == 1 && g.kw <= 8) im2row_padded<8>(planes, g, rows);
  else if (g.dil_w == 1 && g.kw <= 16) im2row_padded<16>(planes, g, rows);
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
    const int64_t x0 = kj * g.dil_w - g.pad_w;
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t oy = 0; oy < g.oh; ++oy, dst += g.ow) {
        const int64_t iy = oy * g.stride_h - g.pad_h + ki * g.dil_h;
        if (iy < 0 || iy >= g.h) {
          std::memset(dst, static_cast<unsigned char>(pad8), static_cast<size_t>(g.ow));
          continue;
        }
        gather_run(u + ((n * g.c + c) * g.h + iy) * g.w, g.w, x0, g.stride_w, g.ow, pad, dst,
                   [](uint8_t v) { return static_cast<int8_t>(v ^ 0x80); });
      }
  }
}

// The input planes padded on every side, so that each tap of an output
// position lands inside (no bounds checks): rows h + 2 pad_h, columns
// w + 2 pad_w.
int64_t padded_plane_h(const Geom& g) { return g.h + 2 * g.pad_h; }
int64_t padded_plane_w(const Geom& g) { return g.w + 2 * g.pad_w; }

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
      int64_t* corner = planes + oy * g.stride_h * Wp + ox * g.stride_w;
      for (int64_t c = 0; c < g.c; ++c)
        for (int64_t ki = 0; ki < g.kh; ++ki) {
          const int64_t k0 = c * KK + ki * g.kw;
          int64_t* at = corner + (c * Hp + ki * g.dil_h) * Wp;
          if (off)
            for (int64_t kj = 0; kj < g.kw; ++kj) at[kj * g.dil_w] += int64_t{row[k0 + kj]} - off[k0 + kj];
          else
            for (int64_t kj = 0; kj < g.kw; ++kj) at[kj * g.dil_w] += row[k0 + kj];
        }
    }
}

// The inside of the padded planes, times s, as floats (C x H x W).
void scale_to_float(const int64_t* planes, const Geom& g, double s, float* out) {
  const int64_t Hp = padded_plane_h(g), Wp = padded_plane_w(g);
  for (int64_t c = 0; c < g.c; ++c)
    for (int64_t y = 0; y < g.h; ++y) {
      const int64_t* v = planes + (c * Hp + y + g.pad_h) * Wp + g.pad_w;
      float* o = out + (c * g.h + y) * g.w;
      for (int64_t x = 0; x < g.w; ++x) o[x] = static_cast<float>(s * static_cast<double>(v[x]));
    }
}

}  // namespace qat::quant::int8_cpu
