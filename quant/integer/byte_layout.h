#pragma once
// The byte layouts of u8 activations around the integer GEMMs, one set for
// the integer model (NHWC images) and INT8 training (NCHW batches).
//
// Note [byte layouts]
// Both read windows of NHWC images: an image is one plane of h rows of w*c
// bytes, and an output position's window is kh runs of kw*c bytes in it.
// The integer model's activations are NHWC; INT8 training's (and the
// integer forward's) are NCHW batches, whose images are transposed to NHWC
// before their rows are built (im2row_nchw_as_nhwc), since a window of
// NCHW planes would be c kh runs of only kw bytes each. So one padding
// (pad_plane_u8) and one window copy (window_rows: each run one word-sized
// move, exact at a row's end) serve both. Only INT8 training's backward
// needs the rest (NCHW): the transposed rows (im2col), their scatter back
// (col2im) and the byte transpose.
#include <cstdint>

namespace qat::quant {

// One image's convolution window: input h x w x c, kernel kh x kw, the output
// out_h x out_w.
struct Im2RowShape {
  int64_t h, w, c, kh, kw, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, out_h, out_w;
};

// ---------------------------------------------------------------- NHWC (integer model)
// Patches of an NHWC image as rows: row (oh, ow) holds the KH x KW x C window
// in (kh, kw, c) order, `pad_value` (the input zero point: real 0) outside.
void im2row_u8(const uint8_t* x, const Im2RowShape& s, uint8_t pad_value, uint8_t* rows);
// Output positions [first, first + count) only (rows[0] is position `first`),
// their rows `stride` bytes apart (0: K, the patch's bytes; a larger stride
// leaves each row's bytes past K as they were).
void im2row_u8_range(const uint8_t* x, const Im2RowShape& s, uint8_t pad_value, int64_t first, int64_t count,
                     uint8_t* rows, int64_t stride = 0);

// The same patches from a copy of the image padded on every side
// (pad_image_u8), for kernel rows of at most 64 contiguous bytes (dilation 1
// along the width; AlexNet's conv1: 11 x 3 = 33 bytes): each kernel row one
// word-sized copy, no bounds checks. The padded image needs kIm2RowSlack
// bytes past its end (padded_image_bytes counts them); `rows` as many past
// the last patch (kept for the callers' buffers; the copies stay inside).
constexpr int64_t kIm2RowSlack = 64;
bool im2row_padded_applies(const Im2RowShape& s);
int64_t padded_image_bytes(const Im2RowShape& s);
void pad_image_u8(const uint8_t* x, const Im2RowShape& s, uint8_t pad_value, uint8_t* padded);
void im2row_u8_padded_range(const uint8_t* padded, const Im2RowShape& s, int64_t first, int64_t count, uint8_t* rows,
                            int64_t stride = 0);

// ---------------------------------------------------------------- NCHW (INT8 training), n images
// rows (n oh ow x kh kw c): the im2row rows of u (n, c, h, w), `pad` outside;
// row m = (n, oy, ox), column (ki, kj, c), the integer model's order
// (im2row_u8): the images are transposed to NHWC first, so that a kernel
// row is one run of kw c bytes instead of c runs of kw.
void im2row_nchw_as_nhwc(const uint8_t* u, const Im2RowShape& s, int64_t n, uint8_t pad, uint8_t* rows);
// Its two steps, for callers that use each image's rows while they are in
// cache: the n images transposed to NHWC and padded (padded_image_bytes(s)
// apart, in this thread's buffer, valid until its next call), then one
// image's rows (out_h out_w x K) from its padded plane, on the calling thread.
struct PaddedPlanes;
const uint8_t* padded_nhwc_images(const uint8_t* u, const Im2RowShape& s, int64_t n, uint8_t pad);
void image_window_rows(const uint8_t* padded, const Im2RowShape& s, const PaddedPlanes& pp, uint8_t* rows);
// The same rows for a 1x1 kernel at stride 1 without padding (K = c): each
// image's planes (c, hw) transposed to (hw, c).
void pointwise_rows_nchw(const uint8_t* u, int64_t n, int64_t c, int64_t hw, uint8_t* rows);
// One image's planes (c, hw) transposed to (hw, c) on the calling thread.
void transpose_planes(const uint8_t* planes, int64_t c, int64_t hw, uint8_t* rows);
// Each of `rows` rows of src holds an (a, b) block; dst's rows hold its
// transpose (b, a). A weight's columns go from (c, kh kw) to the NHWC rows'
// (kh kw, c) order with a = c, b = kh kw, and back with a = kh kw, b = c.
template <class T>
void transpose_within_rows(const T* src, int64_t rows, int64_t a, int64_t b, T* dst) {
  const int64_t K = a * b;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < a; ++i)
      for (int64_t j = 0; j < b; ++j) dst[r * K + j * a + i] = src[r * K + i * b + j];
}
// w (O, c kh kw) with each row's columns reordered to (kh, kw, c): the
// weight that multiplies those rows.
inline void weight_as_nhwc(const int8_t* w, int64_t o, int64_t c, int64_t taps, int8_t* out) {
  transpose_within_rows(w, o, c, taps, out);
}
// col (K x M): the im2row rows with columns in (c, ki, kj) order,
// transposed, stored as u - 128 (s8).
void im2col_nchw(const uint8_t* u, const Im2RowShape& s, int64_t n, uint8_t pad, int8_t* col);
// The padded planes of one image (c x (h + 2 pad_h) x (w + 2 pad_w)), in elements.
int64_t padded_planes_elems(const Im2RowShape& s);
// One image's col2im of its GEMM rows acc (oh ow x K, stride ldc, less
// off[k] when given) into its padded planes in int64 (exact, any order);
// then their inside times s as floats (c x h x w).
void col2im_nchw(const int32_t* acc, int64_t ldc, const int64_t* off, const Im2RowShape& s, int64_t* planes);
void planes_to_float(const int64_t* planes, const Im2RowShape& s, double scale, float* out);
// dst (cols, rows) = src (rows, cols)^T for bytes.
void transpose_bytes(const int8_t* src, int64_t rows, int64_t cols, int8_t* dst);

// ---------------------------------------------------------------- shared (Note [byte layouts])
// The padded plane of one NHWC image, and its window in it.
struct PaddedPlanes {
  int64_t rows, row_bytes;  // of the padded plane
  int64_t kw, chunk, gap;   // a kernel row: kw chunks of `chunk` bytes, `gap` bytes apart
  int64_t kh, down;         // kernel rows, `down` bytes apart
  int64_t step_x, step_y;   // bytes between output columns, output rows
  int64_t out_w;
  int64_t plane_bytes() const { return rows * row_bytes; }
  int64_t run_bytes() const { return kw * chunk; }  // what one kernel row writes
  bool contiguous() const { return gap == chunk; }
  int64_t row_len() const { return kh * run_bytes(); }  // K
};
PaddedPlanes nhwc_planes(const Im2RowShape& s);

// A plane of `rows` x `row_bytes` bytes padded with `value`: pad_rows rows
// above and below, pad_bytes bytes on each side of every row.
void pad_plane_u8(const uint8_t* src, int64_t rows, int64_t row_bytes, int64_t pad_rows, int64_t pad_bytes,
                  uint8_t value, uint8_t* dst);
// The window rows of output positions [first, first + count) of one image
// from its padded planes (which need 64 readable bytes past their end),
// `stride` bytes apart (0: the row's length).
void window_rows(const uint8_t* planes, const PaddedPlanes& pp, int64_t first, int64_t count, uint8_t* rows,
                 int64_t stride = 0);

}  // namespace qat::quant
