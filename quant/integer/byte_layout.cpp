// The byte layouts (Note [byte layouts]): NHWC for the integer model, NCHW
// for INT8 training, on one padding and one window copy.
#include "quant/integer/byte_layout.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/profiler.h"
#include "quant/integer/simd.h"

namespace qat::quant {

namespace {

// n <= 64 bytes in one masked load/store (no call, no overrun).
__attribute__((target("avx512f,avx512bw"))) inline void copy_upto64(uint8_t* dst, const uint8_t* src, int64_t n) {
  const __mmask64 m = n >= 64 ? ~0ULL : (1ULL << n) - 1;
  _mm512_mask_storeu_epi8(dst, m, _mm512_maskz_loadu_epi8(m, src));
}

// The window rows of positions [first, first + count), `stride` bytes
// apart: each kernel row's bytes by copy(r, src, end), r its place in the
// row and `end` the first byte it may not write (its K bytes: those up to
// the stride are left as they are). Where rows lie back to back (stride K),
// a row's copies may run on into the next row, whose copies come after and
// write over them; the last row's stay inside it. (MobileNetV2's stem,
// three runs of 9 bytes: its last run was a copy of a size known only at
// run time, a library call per row.)
template <class Copy>
[[gnu::always_inline]] inline void window_rows_with(const uint8_t* planes, const PaddedPlanes& pp, int64_t first,
                                                    int64_t count, uint8_t* rows, int64_t stride, const Copy& copy) {
  const int64_t K = pp.row_len(), run = pp.run_bytes(), spill = stride == K ? K : 0;
  for (int64_t p = first; p < first + count; ++p) {
    uint8_t* r = rows + (p - first) * stride;
    const uint8_t* const end = r + K + (p + 1 < first + count ? spill : 0);
    const uint8_t* src = planes + (p / pp.out_w) * pp.step_y + (p % pp.out_w) * pp.step_x;
    for (int64_t ki = 0; ki < pp.kh; ++ki, r += run, src += pp.down) copy(r, src, end);
  }
}

// A contiguous run: Word bytes at once (its bytes past the run are
// overwritten by the next runs' copies) unless fewer than Word bytes are left
// before `end`, then exactly, so that no copy reaches into a row it may not
// write (another thread's, or the last row's padding).
template <int64_t Word>
struct WordCopy {
  int64_t run;
  void operator()(uint8_t* r, const uint8_t* src, const uint8_t* end) const {
    if (end - r >= Word) std::memcpy(r, src, Word);
    else std::memcpy(r, src, static_cast<size_t>(run));
  }
};

// The same with 64-byte moves on AVX-512BW, the exact copies masked (no call).
struct MaskedCopy64 {
  int64_t run;
  __attribute__((target("avx512f,avx512bw"))) void operator()(uint8_t* r, const uint8_t* src,
                                                              const uint8_t* end) const {
    if (end - r >= 64) _mm512_storeu_si512(r, _mm512_loadu_si512(src));
    else copy_upto64(r, src, run);
  }
};

// kw chunks of `chunk` bytes, `gap` apart (width dilation).
struct ChunkCopy {
  int64_t kw, chunk, gap;
  void operator()(uint8_t* r, const uint8_t* src, const uint8_t*) const {
    if (chunk == 1)
      for (int64_t j = 0; j < kw; ++j) r[j] = src[j * gap];
    else
      for (int64_t j = 0; j < kw; ++j) std::memcpy(r + j * chunk, src + j * gap, static_cast<size_t>(chunk));
  }
};

template <int64_t Word>
void window_rows_words(const uint8_t* planes, const PaddedPlanes& pp, int64_t first, int64_t count, uint8_t* rows,
                       int64_t stride) {
  window_rows_with(planes, pp, first, count, rows, stride, WordCopy<Word>{pp.run_bytes()});
}

__attribute__((target("avx512f,avx512bw"))) void window_rows_avx512(const uint8_t* planes, const PaddedPlanes& pp,
                                                                    int64_t first, int64_t count, uint8_t* rows,
                                                                    int64_t stride) {
  window_rows_with(planes, pp, first, count, rows, stride, MaskedCopy64{pp.run_bytes()});
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

}  // namespace

// ---------------------------------------------------------------- shared
PaddedPlanes nhwc_planes(const Im2RowShape& s) {
  const int64_t row_bytes = (s.w + 2 * s.pad_w) * s.c;
  return {s.h + 2 * s.pad_h, row_bytes, s.kw, s.c, s.dil_w * s.c, s.kh, s.dil_h * row_bytes,
          s.stride_w * s.c, s.stride_h * row_bytes, s.out_w};
}


void pad_plane_u8(const uint8_t* src, int64_t rows, int64_t row_bytes, int64_t pad_rows, int64_t pad_bytes,
                  uint8_t value, uint8_t* dst) {
  const int64_t width = row_bytes + 2 * pad_bytes;
  std::memset(dst, value, static_cast<size_t>(pad_rows * width));
  for (int64_t y = 0; y < rows; ++y) {
    uint8_t* row = dst + (y + pad_rows) * width;
    std::memset(row, value, static_cast<size_t>(pad_bytes));
    std::memcpy(row + pad_bytes, src + y * row_bytes, static_cast<size_t>(row_bytes));
    std::memset(row + pad_bytes + row_bytes, value, static_cast<size_t>(pad_bytes));
  }
  std::memset(dst + (pad_rows + rows) * width, value, static_cast<size_t>(pad_rows * width));
}

void window_rows(const uint8_t* planes, const PaddedPlanes& pp, int64_t first, int64_t count, uint8_t* rows,
                 int64_t stride) {
  const int64_t run = pp.run_bytes();
  if (stride == 0) stride = pp.row_len();
  if (!pp.contiguous() || run > 64)
    return window_rows_with(planes, pp, first, count, rows, stride, ChunkCopy{pp.kw, pp.chunk, pp.gap});
  if (run <= 8) return window_rows_words<8>(planes, pp, first, count, rows, stride);
  if (run <= 16) return window_rows_words<16>(planes, pp, first, count, rows, stride);
  if (run > 32 && cpu_has_avx512bw()) return window_rows_avx512(planes, pp, first, count, rows, stride);
  if (run <= 32) return window_rows_words<32>(planes, pp, first, count, rows, stride);
  window_rows_words<64>(planes, pp, first, count, rows, stride);
}

// ---------------------------------------------------------------- NHWC
void im2row_u8(const uint8_t* x, const Im2RowShape& s, uint8_t pad_value, uint8_t* rows) {
  im2row_u8_range(x, s, pad_value, 0, s.out_h * s.out_w, rows);
}

void im2row_u8_range(const uint8_t* x, const Im2RowShape& s, uint8_t pad_value, int64_t first, int64_t count,
                     uint8_t* rows, int64_t stride) {
  const int64_t K = s.kh * s.kw * s.c, span = s.kw * s.c;
  if (stride == 0) stride = K;
  const bool small_span = span <= 64 && cpu_has_avx512bw();
  for (int64_t p = first; p < first + count; ++p) {
    const int64_t oh = p / s.out_w, ow = p % s.out_w;
    uint8_t* row = rows + (p - first) * stride;
    const int64_t iw0 = ow * s.stride_w - s.pad_w;
    // With dilation 1 a kernel row is kw adjacent pixels: one copy of kw*C
    // bytes when it lies inside the image (small C would otherwise mean
    // thousands of tiny copies per output).
    const bool row_inside = s.dil_w == 1 && iw0 >= 0 && iw0 + s.kw <= s.w;
    for (int64_t i = 0; i < s.kh; ++i) {
      const int64_t ih = oh * s.stride_h - s.pad_h + i * s.dil_h;
      uint8_t* dst = row + i * span;
      if (ih < 0 || ih >= s.h) {
        std::memset(dst, pad_value, static_cast<size_t>(span));
        continue;
      }
      const uint8_t* src = x + ih * s.w * s.c;
      if (row_inside) {
        if (small_span) copy_upto64(dst, src + iw0 * s.c, span);
        else std::memcpy(dst, src + iw0 * s.c, static_cast<size_t>(span));
        continue;
      }
      for (int64_t j = 0; j < s.kw; ++j) {
        const int64_t iw = iw0 + j * s.dil_w;
        if (iw < 0 || iw >= s.w) std::memset(dst + j * s.c, pad_value, static_cast<size_t>(s.c));
        else std::memcpy(dst + j * s.c, src + iw * s.c, static_cast<size_t>(s.c));
      }
    }
  }
}

bool im2row_padded_applies(const Im2RowShape& s) { return s.dil_w == 1 && s.kw * s.c <= 64; }

int64_t padded_image_bytes(const Im2RowShape& s) {
  return (s.h + 2 * s.pad_h) * (s.w + 2 * s.pad_w) * s.c + kIm2RowSlack;
}

void pad_image_u8(const uint8_t* x, const Im2RowShape& s, uint8_t pad_value, uint8_t* padded) {
  pad_plane_u8(x, s.h, s.w * s.c, s.pad_h, s.pad_w * s.c, pad_value, padded);
  std::memset(padded + padded_image_bytes(s) - kIm2RowSlack, pad_value, kIm2RowSlack);
}

void im2row_u8_padded_range(const uint8_t* padded, const Im2RowShape& s, int64_t first, int64_t count,
                            uint8_t* rows, int64_t stride) {
  QAT_CHECK(im2row_padded_applies(s), "im2row_u8_padded_range: kernel rows of ", s.kw * s.c,
            " bytes with width dilation ", s.dil_w, " need the general im2row");
  window_rows(padded, nhwc_planes(s), first, count, rows, stride);
}

// ---------------------------------------------------------------- NCHW
int64_t padded_planes_elems(const Im2RowShape& s) { return s.c * (s.h + 2 * s.pad_h) * (s.w + 2 * s.pad_w); }

namespace {
void planes_to_rows(const uint8_t* u, int64_t n, int64_t c, int64_t hw, uint8_t* rows);  // (below)
}  // namespace

const uint8_t* padded_nhwc_images(const uint8_t* u, const Im2RowShape& s, int64_t n, uint8_t pad) {
  const int64_t hw = s.h * s.w, image = hw * s.c;
  const int64_t padded = padded_image_bytes(s);  // (with the slack the window copies read past it)
  thread_local std::vector<uint8_t> nhwc, planes;
  if (nhwc.size() < static_cast<size_t>(n * image)) nhwc.resize(static_cast<size_t>(n * image));
  if (planes.size() < static_cast<size_t>(n * padded)) planes.resize(static_cast<size_t>(n * padded));
  planes_to_rows(u, n, s.c, hw, nhwc.data());
  const uint8_t* images = nhwc.data();
  uint8_t* pimg = planes.data();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) pad_image_u8(images + i * image, s, pad, pimg + i * padded);
  return pimg;
}

void image_window_rows(const uint8_t* padded, const Im2RowShape& s, const PaddedPlanes& pp, uint8_t* rows) {
  const int64_t K = s.kh * s.kw * s.c;
  for (int64_t oy = 0; oy < s.out_h; ++oy) window_rows(padded, pp, oy * s.out_w, s.out_w, rows + oy * s.out_w * K, K);
}

void im2row_nchw_as_nhwc(const uint8_t* u, const Im2RowShape& s, int64_t n, uint8_t pad, uint8_t* rows) {
  QAT_PROFILE("int8_train.im2row");
  const int64_t P = s.out_h * s.out_w, K = s.kh * s.kw * s.c, padded = padded_image_bytes(s);
  const uint8_t* pimg = padded_nhwc_images(u, s, n, pad);
  // (image, output row) pairs on the threads: a batch of one image still splits.
  const PaddedPlanes pp = nhwc_planes(s);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t i = 0; i < n; ++i)
    for (int64_t oy = 0; oy < s.out_h; ++oy)
      window_rows(pimg + i * padded, pp, oy * s.out_w, s.out_w, rows + (i * P + oy * s.out_w) * K, K);
}

// Built directly, stored as u - 128 (s8) for the s8 x s8 weight-gradient
// GEMM (u ^ 0x80 is u - 128 in two's complement).
void im2col_nchw(const uint8_t* u, const Im2RowShape& s, int64_t n, uint8_t pad, int8_t* col) {
  QAT_PROFILE("int8_train.im2col");
  const int64_t M = n * s.out_h * s.out_w, K = s.c * s.kh * s.kw;
  const int8_t pad8 = static_cast<int8_t>(pad ^ 0x80);
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < K; ++k) {
    const int64_t c = k / (s.kh * s.kw), ki = (k / s.kw) % s.kh, kj = k % s.kw;
    int8_t* dst = col + k * M;
    const int64_t x0 = kj * s.dil_w - s.pad_w;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t oy = 0; oy < s.out_h; ++oy, dst += s.out_w) {
        const int64_t iy = oy * s.stride_h - s.pad_h + ki * s.dil_h;
        if (iy < 0 || iy >= s.h) {
          std::memset(dst, static_cast<unsigned char>(pad8), static_cast<size_t>(s.out_w));
          continue;
        }
        gather_run(u + ((i * s.c + c) * s.h + iy) * s.w, s.w, x0, s.stride_w, s.out_w, pad, dst,
                   [](uint8_t v) { return static_cast<int8_t>(v ^ 0x80); });
      }
  }
}

// One output row's GEMM rows (ow x K, stride ldc) as K rows of ow values, in
// 8 x 8 blocks (both sides read and written in runs).
void transpose_row_block(const int32_t* rows, int64_t ldc, int64_t ow, int64_t K, int32_t* t) {
  constexpr int64_t B = 8;
  for (int64_t k0 = 0; k0 < K; k0 += B)
    for (int64_t x0 = 0; x0 < ow; x0 += B) {
      const int64_t kn = std::min(B, K - k0), xn = std::min(B, ow - x0);
      for (int64_t x = 0; x < xn; ++x) {
        const int32_t* r = rows + (x0 + x) * ldc + k0;
        for (int64_t k = 0; k < kn; ++k) t[(k0 + k) * ow + x0 + x] = r[k];
      }
    }
}

// Output row by output row: its GEMM rows transposed, so that each tap (c,
// ki, kj) adds a run of ow values into one row of its plane (contiguous at
// stride 1: vector adds) instead of three values per channel and position.
void col2im_nchw(const int32_t* acc, int64_t ldc, const int64_t* off, const Im2RowShape& s, int64_t* planes) {
  const int64_t Hp = s.h + 2 * s.pad_h, Wp = s.w + 2 * s.pad_w, KK = s.kh * s.kw, K = s.c * KK, OW = s.out_w;
  std::fill(planes, planes + s.c * Hp * Wp, int64_t{0});
  thread_local std::vector<int32_t> tile;
  tile.resize(static_cast<size_t>(K * OW));
  for (int64_t oy = 0; oy < s.out_h; ++oy) {
    transpose_row_block(acc + oy * OW * ldc, ldc, OW, K, tile.data());
    for (int64_t k = 0; k < K; ++k) {
      const int64_t c = k / KK, ki = (k / s.kw) % s.kh, kj = k % s.kw;
      int64_t* at = planes + (c * Hp + oy * s.stride_h + ki * s.dil_h) * Wp + kj * s.dil_w;
      const int32_t* t = tile.data() + k * OW;
      const int64_t o = off ? off[k] : 0;
      if (s.stride_w == 1)
        for (int64_t x = 0; x < OW; ++x) at[x] += int64_t{t[x]} - o;
      else
        for (int64_t x = 0; x < OW; ++x) at[x * s.stride_w] += int64_t{t[x]} - o;
    }
  }
}

void planes_to_float(const int64_t* planes, const Im2RowShape& s, double scale, float* out) {
  const int64_t Hp = s.h + 2 * s.pad_h, Wp = s.w + 2 * s.pad_w;
  for (int64_t c = 0; c < s.c; ++c)
    for (int64_t y = 0; y < s.h; ++y) {
      const int64_t* v = planes + (c * Hp + y + s.pad_h) * Wp + s.pad_w;
      float* o = out + (c * s.h + y) * s.w;
      for (int64_t x = 0; x < s.w; ++x) o[x] = static_cast<float>(scale * static_cast<double>(v[x]));
    }
}

namespace {

// Sixteen rows (r0..) of columns [c0, c0 + 64) of src into dst (cols, rows):
// each 128-bit lane of the sixteen rows is a 16 x 16 byte block, transposed
// by unpacking bytes, words, dwords and qwords of row pairs 1, 2, 4 and 8
// apart; output register 4 j + t then holds in lane L the sixteen rows of
// column 16 L + 4 j + t.
__attribute__((target("avx512f,avx512bw"))) void transpose_16_rows(const uint8_t* src, int64_t rows, int64_t cols,
                                                                   int64_t r0, int64_t c0, uint8_t* dst) {
  __m512i a[16], b[16], c[16];
  for (int64_t i = 0; i < 16; ++i) a[i] = _mm512_loadu_si512(src + (r0 + i) * cols + c0);
  for (int i = 0; i < 8; ++i) {
    b[2 * i] = _mm512_unpacklo_epi8(a[2 * i], a[2 * i + 1]);
    b[2 * i + 1] = _mm512_unpackhi_epi8(a[2 * i], a[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // c[4i + k]: rows 4i..4i+3, columns 4k..4k+3 of each lane
    c[4 * i] = _mm512_unpacklo_epi16(b[4 * i], b[4 * i + 2]);
    c[4 * i + 1] = _mm512_unpackhi_epi16(b[4 * i], b[4 * i + 2]);
    c[4 * i + 2] = _mm512_unpacklo_epi16(b[4 * i + 1], b[4 * i + 3]);
    c[4 * i + 3] = _mm512_unpackhi_epi16(b[4 * i + 1], b[4 * i + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    const __m512i lo0 = _mm512_unpacklo_epi32(c[j], c[4 + j]), hi0 = _mm512_unpackhi_epi32(c[j], c[4 + j]);
    const __m512i lo1 = _mm512_unpacklo_epi32(c[8 + j], c[12 + j]), hi1 = _mm512_unpackhi_epi32(c[8 + j], c[12 + j]);
    const __m512i col[4] = {_mm512_unpacklo_epi64(lo0, lo1), _mm512_unpackhi_epi64(lo0, lo1),
                            _mm512_unpacklo_epi64(hi0, hi1), _mm512_unpackhi_epi64(hi0, hi1)};
    for (int t = 0; t < 4; ++t) {
      uint8_t* d = dst + (c0 + 4 * j + t) * rows + r0;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d), _mm512_castsi512_si128(col[t]));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 16 * rows), _mm512_extracti32x4_epi32(col[t], 1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 32 * rows), _mm512_extracti32x4_epi32(col[t], 2));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 48 * rows), _mm512_extracti32x4_epi32(col[t], 3));
    }
  }
}

// Columns [c0, c0 + 64) of src (rows, cols) into dst (cols, rows) as 64 x 64
// tiles read by rows into a local block and written by rows, so both sides
// stream (the strided element-wise version cost 160 ms a step on AlexNet's
// classifier); with AVX-512, whole blocks of 16 rows and 64 columns in
// registers.
void transpose_column_block(const uint8_t* src, int64_t rows, int64_t cols, int64_t c0, uint8_t* dst) {
  constexpr int64_t B = 64;
  alignas(64) uint8_t tile[B][B];
  const int64_t cn = std::min(B, cols - c0);
  int64_t done = 0;  // rows already written
  if (cn == B && cpu_has_avx512bw())
    for (; done + 16 <= rows; done += 16) transpose_16_rows(src, rows, cols, done, c0, dst);
  for (int64_t r0 = done; r0 < rows; r0 += B) {
    const int64_t rn = std::min(B, rows - r0);
    for (int64_t r = 0; r < rn; ++r) std::memcpy(tile[r], src + (r0 + r) * cols + c0, static_cast<size_t>(cn));
    for (int64_t c = 0; c < cn; ++c) {
      uint8_t* d = dst + (c0 + c) * rows + r0;
      for (int64_t r = 0; r < rn; ++r) d[r] = tile[r][c];
    }
  }
}

}  // namespace

void transpose_bytes(const int8_t* src, int64_t rows, int64_t cols, int8_t* dst) {
  const auto* s = reinterpret_cast<const uint8_t*>(src);
  auto* d = reinterpret_cast<uint8_t*>(dst);
#pragma omp parallel for schedule(static)
  for (int64_t c0 = 0; c0 < cols; c0 += 64) transpose_column_block(s, rows, cols, c0, d);
}

void transpose_planes(const uint8_t* planes, int64_t c, int64_t hw, uint8_t* rows) {
  for (int64_t c0 = 0; c0 < hw; c0 += 64) transpose_column_block(planes, c, hw, c0, rows);
}

namespace {
// pointwise_rows_nchw without its profile scope (im2row_nchw_as_nhwc's first step).
void planes_to_rows(const uint8_t* u, int64_t n, int64_t c, int64_t hw, uint8_t* rows) {
  const int64_t blocks = (hw + 63) / 64;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t i = 0; i < n; ++i)
    for (int64_t b = 0; b < blocks; ++b) transpose_column_block(u + i * c * hw, c, hw, b * 64, rows + i * hw * c);
}
}  // namespace

void pointwise_rows_nchw(const uint8_t* u, int64_t n, int64_t c, int64_t hw, uint8_t* rows) {
  QAT_PROFILE("int8_train.pointwise_rows");
  planes_to_rows(u, n, c, hw, rows);
}

}  // namespace qat::quant
