#include "quant/integer/int8_gemm_packed.h"

#include "quant/integer/int8_gemm_x86.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/cpu_features.h"
#include "quant/integer/int8_gemm_amx.h"
#include "quant/integer/int8_gemm_avx2.h"
#include "quant/integer/simd.h"

namespace qat::quant {

namespace {

constexpr int kRows = 6;     // rows of A per tile
constexpr int kBlocks = 4;   // 16-channel blocks per tile (64 channels)
// Bytes after the packed blocks: an AMX tile of B's last 16 rows of K quads
// reads up to 15 rows (64 bytes each) past the last block.
constexpr size_t kAmxSlack = 16 * 64;

using x86::dpbusd;
using x86::dpbusd_vex;

// The last quad's `tail` bytes (1-3) of a row at p, the rest 0: byte by byte
// (a memcpy of a size known only at run time was a library call per row,
// 80% of MobileNetV2's stem GEMM, K = 27).
inline int32_t tail_quad(const uint8_t* p, int64_t tail) {
  uint32_t v = p[0];
  if (tail > 1) v |= static_cast<uint32_t>(p[1]) << 8;
  if (tail > 2) v |= static_cast<uint32_t>(p[2]) << 16;
  return static_cast<int32_t>(v);
}

// The quad of A at p as the tiles broadcast it: 4 bytes, or a tail's 1-3
// (kTail); kFlip: A holds s8 bytes, read as u8 after flipping their sign
// bits (a + 128), for gemm_s8s8s32_packed_offset (a tail's missing bytes:
// 128 x zero bytes of B).
template <bool kFlip, bool kTail>
__attribute__((always_inline)) inline int32_t read_quad(const uint8_t* p, int64_t tail) {
  int32_t quad;
  if constexpr (kTail) quad = tail_quad(p, tail);
  else std::memcpy(&quad, p, 4);
  if constexpr (kFlip) quad ^= static_cast<int32_t>(0x80808080u);
  return quad;
}

// Where a tile's rows of A lie (the tiles' Rows): first<R>(m0, d) gives
// the tile's first row and each row's distance d[r] from it.
// - PlainRows: rows in place, lda apart, K bytes each: K / 4 quads, then
//   K % 4 bytes.
// - WindowTileRows: a convolution's windows on a padded image (WindowRows):
//   a run of C / 4 quads a kernel tap, each run a fixed offset from the row.
struct PlainRows {
  static constexpr bool kRuns = false;
  const uint8_t* A;
  int64_t lda, K;
  template <int R>
  const uint8_t* first(int64_t m0, int64_t (&d)[R]) const {
    for (int r = 0; r < R; ++r) d[r] = r * lda;
    return A + m0 * lda;
  }
};
struct WindowTileRows {
  static constexpr bool kRuns = true;
  const WindowRows& w;
  template <int R>
  const uint8_t* first(int64_t m0, int64_t (&d)[R]) const {
    const uint8_t* row0 = w.row(m0);
    for (int r = 0; r < R; ++r) d[r] = w.row(m0 + r) - row0;
    return row0;
  }
};

// The quad at p + d[r] of rows r = 0 .. R (tail bytes of them where kTail)
// times the NB blocks of B at bq into the accumulators. (One moving pointer
// and fixed distances between the rows: the loads' addresses are a register
// plus an index.)
template <int R, int NB, bool kFlip, bool kTail>
__attribute__((target("avx512f,avx512bw,avx512vnni"), always_inline)) inline void multiply_quad(
    __m512i (&acc)[R][NB], const int8_t* bq, int64_t block_stride, const uint8_t* p, const int64_t (&d)[R],
    int64_t tail) {
  __m512i bv[NB];
#pragma GCC unroll 4
  for (int j = 0; j < NB; ++j) bv[j] = _mm512_loadu_si512(bq + j * block_stride);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const __m512i av = _mm512_set1_epi32(read_quad<kFlip, kTail>(p + d[r], tail));
#pragma GCC unroll 4
    for (int j = 0; j < NB; ++j) dpbusd(acc[r][j], av, bv[j]);
  }
}

// C[0..R) x [16 NB channels] of the tile at rows m0.. (NB = kBlocks but in a
// layer's last group of channels). b: the tile's first block; blocks are
// `block_stride` bytes apart. (Every r/j loop is unrolled so that the R NB
// accumulators stay in registers.)
template <int R, int NB, bool kFlip, class Rows>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void tile(const Rows& a, int64_t m0, const int8_t* b,
                                                                 int64_t block_stride, int32_t* C, int64_t ldc) {
  __m512i acc[R][NB];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < NB; ++j) acc[r][j] = _mm512_setzero_si512();
  int64_t d[R];
  const uint8_t* row0 = a.template first<R>(m0, d);
  const int8_t* bq = b;
  if constexpr (Rows::kRuns) {
    for (int64_t t = 0; t < a.w.taps; ++t) {
      const uint8_t* p = row0 + a.w.tap_offset[t];
      for (int64_t q = 0; q < a.w.run / 4; ++q, bq += 64, p += 4)
        multiply_quad<R, NB, kFlip, false>(acc, bq, block_stride, p, d, 0);
    }
  } else {
    const uint8_t* p = row0;
    for (int64_t q = 0; q < a.K / 4; ++q, bq += 64, p += 4)
      multiply_quad<R, NB, kFlip, false>(acc, bq, block_stride, p, d, 0);
    if (a.K % 4) multiply_quad<R, NB, kFlip, true>(acc, bq, block_stride, p, d, a.K % 4);
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < NB; ++j) _mm512_storeu_si512(C + r * ldc + 16 * j, acc[r][j]);
}

template <class Rows>
using TileFn = void (*)(const Rows&, int64_t, const int8_t*, int64_t, int32_t*, int64_t);
template <int NB, bool kFlip, class Rows>
constexpr TileFn<Rows> kTiles[kRows + 1] = {nullptr,
                                            tile<1, NB, kFlip, Rows>,
                                            tile<2, NB, kFlip, Rows>,
                                            tile<3, NB, kFlip, Rows>,
                                            tile<4, NB, kFlip, Rows>,
                                            tile<5, NB, kFlip, Rows>,
                                            tile<6, NB, kFlip, Rows>};
// By the number of 16-channel blocks.
template <bool kFlip, class Rows>
constexpr const TileFn<Rows>* kTilesOfBlocks[kBlocks + 1] = {nullptr, kTiles<1, kFlip, Rows>, kTiles<2, kFlip, Rows>,
                                                             kTiles<3, kFlip, Rows>, kTiles<4, kFlip, Rows>};

// AVX-VNNI (no AVX-512): the same packed layout, one 16-channel block a
// tile, each 64-byte row of it as two ymm halves (channels 0-7, 8-15):
// 6 rows x 2 halves = 12 accumulators, 2 of B, the broadcast quad. vpdpbusd
// in its VEX form (int8_gemm_x86.h).
#define QAT_AVX_VNNI_TARGET QAT_TARGET_AVX_VNNI

template <int R, bool kFlip, bool kTail>
QAT_AVX_VNNI_TARGET __attribute__((always_inline)) inline void multiply_quad_ymm(__m256i (&acc)[R][2],
                                                                                const int8_t* bq, const uint8_t* p,
                                                                                const int64_t (&d)[R],
                                                                                int64_t tail) {
  const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bq));
  const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bq + 32));
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const __m256i av = _mm256_set1_epi32(read_quad<kFlip, kTail>(p + d[r], tail));
    dpbusd_vex(acc[r][0], av, b0);
    dpbusd_vex(acc[r][1], av, b1);
  }
}

template <int R, bool kFlip, class Rows>
QAT_AVX_VNNI_TARGET void tile_ymm(const Rows& a, int64_t m0, const int8_t* b, int64_t, int32_t* C, int64_t ldc) {
  __m256i acc[R][2];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
  int64_t d[R];
  const uint8_t* row0 = a.template first<R>(m0, d);
  const int8_t* bq = b;
  if constexpr (Rows::kRuns) {
    for (int64_t t = 0; t < a.w.taps; ++t) {
      const uint8_t* p = row0 + a.w.tap_offset[t];
      for (int64_t q = 0; q < a.w.run / 4; ++q, bq += 64, p += 4)
        multiply_quad_ymm<R, kFlip, false>(acc, bq, p, d, 0);
    }
  } else {
    const uint8_t* p = row0;
    for (int64_t q = 0; q < a.K / 4; ++q, bq += 64, p += 4) multiply_quad_ymm<R, kFlip, false>(acc, bq, p, d, 0);
    if (a.K % 4) multiply_quad_ymm<R, kFlip, true>(acc, bq, p, d, a.K % 4);
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(C + r * ldc), acc[r][0]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(C + r * ldc + 8), acc[r][1]);
  }
}

template <bool kFlip, class Rows>
constexpr TileFn<Rows> kTilesYmm[kRows + 1] = {nullptr,
                                               tile_ymm<1, kFlip, Rows>,
                                               tile_ymm<2, kFlip, Rows>,
                                               tile_ymm<3, kFlip, Rows>,
                                               tile_ymm<4, kFlip, Rows>,
                                               tile_ymm<5, kFlip, Rows>,
                                               tile_ymm<6, kFlip, Rows>};

// A packed kernel's tiles over N channels: groups of `cols` output
// channels (16-channel blocks) by up to kRows rows of A, the last group
// narrower where N is not a multiple of cols (N need only be a multiple of 16).
template <class Rows>
struct Tiles {
  int64_t cols;
  const TileFn<Rows>* fns;  // by row count
  int64_t groups;
  const TileFn<Rows>* last_fns;  // the last group's
  const TileFn<Rows>* fns_of(int64_t g) const { return g == groups - 1 ? last_fns : fns; }
};
template <bool kFlip, class Rows>
Tiles<Rows> tiles_of(GemmKernel kernel, int64_t N) {
  if (kernel == GemmKernel::avx_vnni) return {16, kTilesYmm<kFlip, Rows>, N / 16, kTilesYmm<kFlip, Rows>};
  const int64_t cols = 16 * kBlocks, groups = (N + cols - 1) / cols, last = N - (groups - 1) * cols;
  return {cols, kTiles<kBlocks, kFlip, Rows>, groups, kTilesOfBlocks<kFlip, Rows>[last / 16]};
}

// Group g's tile at rows [m0, m0 + rows) into C.
template <class Rows>
void run_tile(const Tiles<Rows>& t, const Rows& a, int64_t m0, int64_t rows, const PackedB& B, int64_t g, int32_t* C,
              int64_t ldc) {
  const int64_t block_stride = B.K4 * 64;
  t.fns_of(g)[rows](a, m0, B.bytes() + g * (t.cols / 16) * block_stride, block_stride, C, ldc);
}

template <bool kFlip, class Rows>
void gemm_packed(GemmKernel kernel, int64_t M, const Rows& a, const PackedB& B, int32_t* C, int64_t ldc) {
  const Tiles<Rows> t = tiles_of<kFlip, Rows>(kernel, B.N);
  const int64_t groups = t.groups, tiles = (M + kRows - 1) / kRows;
  // Channel groups outermost: a group's weights (cols x K bytes) stay in L2
  // while every tile of A passes.
#pragma omp parallel for collapse(2) schedule(static) if (M * B.N * B.K >= (1 << 20))
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t tt = 0; tt < tiles; ++tt) {
      const int64_t m0 = tt * kRows, rows = M - m0 < kRows ? M - m0 : kRows;
      run_tile(t, a, m0, rows, B, g, C + m0 * ldc + g * t.cols, ldc);
    }
}

template <bool kFlip>
void gemm_packed_rows(GemmKernel kernel, int64_t M, const uint8_t* A, int64_t lda, const PackedB& B, int32_t* C,
                      int64_t ldc) {
  QAT_CHECK(can_use_packed(kernel, B.N) && lda >= B.K && ldc >= B.N, "gemm_u8s8s32_packed: bad sizes N=", B.N,
            " K=", B.K, " lda=", lda, " ldc=", ldc);
  gemm_packed<kFlip>(kernel, M, PlainRows{A, lda, B.K}, B, C, ldc);
}

// 64 columns (k0 .. k0 + 63) of four rows of Bt, as the four 64-byte packed
// chunks of B's blocks k0/16 .. k0/16 + 3 (each [16 n][4 k]): the bytes of
// the rows interleaved (unpack 8, then 16 bits, within 128-bit lanes), then
// the lanes regrouped so that chunk j holds lane j of each.
__attribute__((target("avx512f,avx512bw"))) inline void interleave4(__m512i r0, __m512i r1, __m512i r2, __m512i r3,
                                                                     __m512i out[4]) {
  const __m512i a = _mm512_unpacklo_epi8(r0, r1), b = _mm512_unpackhi_epi8(r0, r1);
  const __m512i c = _mm512_unpacklo_epi8(r2, r3), d = _mm512_unpackhi_epi8(r2, r3);
  const __m512i e = _mm512_unpacklo_epi16(a, c), f = _mm512_unpackhi_epi16(a, c);
  const __m512i g = _mm512_unpacklo_epi16(b, d), h = _mm512_unpackhi_epi16(b, d);
  const __m512i t0 = _mm512_shuffle_i32x4(e, f, 0x44), t1 = _mm512_shuffle_i32x4(g, h, 0x44);
  const __m512i t2 = _mm512_shuffle_i32x4(e, f, 0xEE), t3 = _mm512_shuffle_i32x4(g, h, 0xEE);
  out[0] = _mm512_shuffle_i32x4(t0, t1, 0x88);
  out[1] = _mm512_shuffle_i32x4(t0, t1, 0xDD);
  out[2] = _mm512_shuffle_i32x4(t2, t3, 0x88);
  out[3] = _mm512_shuffle_i32x4(t2, t3, 0xDD);
}

// Where pack_chunk_avx512 writes: a layout of K4 quads a 16-column group,
// quad q of Bt landing at quad at + q.
struct PackDest {
  int8_t* data;
  int64_t K4, at;
};

// One 64-column chunk (n0 = 64 ch), quads [q0, q1); sums (64 entries) get
// the range's column sums. The OpenMP loop over chunks lives in a plain
// function: Clang outlines a parallel region into a function of its own,
// which would not inherit this one's target attribute.
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void pack_chunk_avx512(const int8_t* Bt, int64_t K,
                                                                              int64_t N, int64_t ldbt, bool flip,
                                                                              int64_t ch, int64_t q0, int64_t q1,
                                                                              const PackDest& dest, int32_t* sums) {
  const int64_t K4 = dest.K4, n0 = ch * 64;
  int8_t* data = dest.data + dest.at * 64;
  const __m512i ones = _mm512_set1_epi8(1);
  const __mmask64 live = N - n0 >= 64 ? ~__mmask64{0} : (__mmask64{1} << (N - n0)) - 1;
  // flip: the sign bits of the real bytes (the padding stays 0)
  const __m512i signs = _mm512_maskz_mov_epi8(flip ? live : 0, _mm512_set1_epi8(static_cast<char>(0x80)));
  __m512i sum[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                    _mm512_setzero_si512()};
  for (int64_t q = q0; q < q1; ++q) {
    __m512i r[4];
    for (int i = 0; i < 4; ++i) {
      const int64_t k = 4 * q + i;
      r[i] = k < K ? _mm512_xor_si512(_mm512_maskz_loadu_epi8(live, Bt + k * ldbt + n0), signs)
                   : _mm512_setzero_si512();
    }
    __m512i chunk[4];
    interleave4(r[0], r[1], r[2], r[3], chunk);
    for (int j = 0; j < 4; ++j) {
      _mm512_storeu_si512(data + (((n0 / 16 + j) * K4 + q) * 64), chunk[j]);
      // (1, 1, 1, 1) . 4 bytes: each lane adds its 4 k of column n.
      asm("vpdpbusd %2, %1, %0" : "+v"(sum[j]) : "v"(ones), "v"(chunk[j]));
    }
  }
  for (int j = 0; j < 4; ++j) _mm512_storeu_si512(sums + 16 * j, sum[j]);
}

// Chunks split in two ranges of quads where they are few (under four a
// thread) or do not share out evenly (ResNet's stem: 3 chunks; its 3x3
// convolutions over 64 channels: 9), so that two threads get equal shares;
// the ranges' column sums added after (integers: any order).
void pack_transposed_avx512(const int8_t* Bt, int64_t K, int64_t N, int64_t ldbt, bool flip, PackedB& out,
                            int32_t* sums) {
  const int64_t chunks = out.N / 64, K4 = out.K4, threads = omp_get_max_threads();
  const bool uneven = chunks % threads != 0 || chunks < 4 * threads;
  const int64_t ranges = uneven && K4 >= 2 ? 2 : 1, items = chunks * ranges;
  std::vector<int32_t> part(static_cast<size_t>(items * 64));
#pragma omp parallel for schedule(static) if (K * N >= (1 << 16))
  for (int64_t it = 0; it < items; ++it) {
    const int64_t ch = it / ranges, r = it % ranges;
    pack_chunk_avx512(Bt, K, N, ldbt, flip, ch, K4 * r / ranges, K4 * (r + 1) / ranges, {out.data.data(), K4, 0},
                      part.data() + it * 64);
  }
  if (!sums) return;
  for (int64_t ch = 0; ch < chunks; ++ch)
    for (int64_t j = 0; j < 64; ++j) {
      int32_t t = 0;
      for (int64_t r = 0; r < ranges; ++r) t += part[static_cast<size_t>((ch * ranges + r) * 64 + j)];
      sums[ch * 64 + j] = t;
    }
}

// The ymm packing is AVX2 code (no VNNI), so that the AVX2 kernel's CPUs
// pack too.
#define QAT_PACK_YMM_TARGET __attribute__((target("avx2")))

// The four-byte sums of chunk (s8) as int32 lanes, exact: vpmaddubsw by u8
// ones (pair sums within +-256, never saturated), then vpmaddwd by ones.
QAT_PACK_YMM_TARGET inline __m256i quad_sums(__m256i chunk) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), chunk), _mm256_set1_epi16(1));
}

// 32 columns (n0 .. n0 + 31) of four rows of Bt as the four 32-byte halves
// of B's blocks n0/16 and n0/16 + 1 (each [16 n][4 k]): the bytes
// interleaved within 128-bit lanes (lane 1 holds columns 16 on), then the
// lanes regrouped.
QAT_PACK_YMM_TARGET inline void interleave4_ymm(__m256i r0, __m256i r1, __m256i r2, __m256i r3, __m256i out[4]) {
  const __m256i a = _mm256_unpacklo_epi8(r0, r1), b = _mm256_unpackhi_epi8(r0, r1);
  const __m256i c = _mm256_unpacklo_epi8(r2, r3), d = _mm256_unpackhi_epi8(r2, r3);
  const __m256i e = _mm256_unpacklo_epi16(a, c), f = _mm256_unpackhi_epi16(a, c);  // n 0-3 | 16-19, 4-7 | 20-23
  const __m256i g = _mm256_unpacklo_epi16(b, d), h = _mm256_unpackhi_epi16(b, d);  // n 8-11 | 24-27, 12-15 | 28-31
  out[0] = _mm256_permute2x128_si256(e, f, 0x20);
  out[1] = _mm256_permute2x128_si256(g, h, 0x20);
  out[2] = _mm256_permute2x128_si256(e, f, 0x31);
  out[3] = _mm256_permute2x128_si256(g, h, 0x31);
}

// 32 bytes of a row of Bt from column n0, `live` of them real (the rest 0),
// sign bits flipped when asked (the real bytes only).
QAT_PACK_YMM_TARGET inline __m256i row32(const int8_t* p, int64_t live, bool flip) {
  const __m256i signs = _mm256_set1_epi8(flip ? static_cast<char>(0x80) : 0);
  if (live >= 32) return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), signs);
  alignas(32) int8_t tmp[32] = {};
  for (int64_t j = 0; j < live; ++j) tmp[j] = static_cast<int8_t>(p[j] ^ (flip ? 0x80 : 0));
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(tmp));
}

// One 32-column half (n0 = 32 hh); the OpenMP loop is outside, as for
// pack_chunk_avx512.
QAT_PACK_YMM_TARGET void pack_half_ymm(const int8_t* Bt, int64_t K, int64_t N, int64_t ldbt, bool flip, int64_t hh,
                                       PackedB& out, int32_t* sums) {
  const int64_t K4 = out.K4, n0 = hh * 32, live = N - n0;  // <= 0: a padding half (N is padded to 64)
  int8_t* data = out.data.data();
  __m256i sum[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                    _mm256_setzero_si256()};
  for (int64_t q = 0; q < K4; ++q) {
    __m256i r[4];
    for (int i = 0; i < 4; ++i) {
      const int64_t k = 4 * q + i;
      r[i] = k < K && live > 0 ? row32(Bt + k * ldbt + n0, live, flip) : _mm256_setzero_si256();
    }
    __m256i chunk[4];
    interleave4_ymm(r[0], r[1], r[2], r[3], chunk);
    for (int j = 0; j < 4; ++j) {
      int8_t* dst = data + ((n0 / 16 + j / 2) * K4 + q) * 64 + 32 * (j % 2);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), chunk[j]);
      sum[j] = _mm256_add_epi32(sum[j], quad_sums(chunk[j]));  // column n's 4 k
    }
  }
  if (sums)
    for (int j = 0; j < 4; ++j) _mm256_storeu_si256(reinterpret_cast<__m256i*>(sums + n0 + 8 * j), sum[j]);
}

void pack_transposed_ymm(const int8_t* Bt, int64_t K, int64_t N, int64_t ldbt, bool flip, PackedB& out,
                         int32_t* sums) {
  const int64_t halves = out.N / 32;
#pragma omp parallel for schedule(static) if (K * N >= (1 << 16))
  for (int64_t hh = 0; hh < halves; ++hh) pack_half_ymm(Bt, K, N, ldbt, flip, hh, out, sums);
}

void check_vnni(GemmKernel kernel) {
  QAT_CHECK(kernel == GemmKernel::avx512_vnni || kernel == GemmKernel::avx_vnni, "packed GEMM: kernel ",
            enum_name(kernel), " has no packed form (avx512_vnni, avx_vnni, avx2, amx, amx_emulated)");
}

}  // namespace

bool can_use_packed(GemmKernel kernel, int64_t N) {
  if (N <= 0 || !gemm_kernel_runs_here(kernel)) return false;
  return (kernel == GemmKernel::avx512_vnni || kernel == GemmKernel::avx_vnni || kernel == GemmKernel::avx2 ||
          is_amx(kernel)) &&
         N % 16 == 0;
}

bool any_packed_kernel_here(int64_t N) {
  for (const GemmKernel k : gemm_kernels_here())
    if (can_use_packed(k, N)) return true;
  return false;
}

namespace {
// Sixteen rows n0.. of B, quads [0, q16) (q16 a multiple of 16, 4 q16 <= K):
// each block of sixteen quads is a 16 x 16 transpose of four-byte values,
// so its sixteen 64-byte rows land whole in the packed layout.
__attribute__((target("avx512f"))) void pack_group_avx512(const int8_t* B, int64_t ldb, int64_t n0, int64_t q16,
                                                         int64_t K4, int8_t* data) {
  for (int64_t q0 = 0; q0 < q16; q0 += 16) {
    __m512 r[16];
    for (int64_t i = 0; i < 16; ++i)
      r[i] = _mm512_loadu_ps(reinterpret_cast<const float*>(B + (n0 + i) * ldb + 4 * q0));
    simd::transpose16x16(r);
    for (int64_t j = 0; j < 16; ++j)
      _mm512_storeu_ps(reinterpret_cast<float*>(data + ((n0 / 16) * K4 + q0 + j) * 64), r[j]);
  }
}
}  // namespace

PackedB pack_b_vnni(const int8_t* B, int64_t N, int64_t K, int64_t ldb) {
  QAT_CHECK(N > 0 && K > 0 && ldb >= K, "pack_b_vnni: N (", N, ") and K (", K, ") must be > 0, ldb (", ldb, ") >= K");
  PackedB p;
  p.N = packed_columns(N);
  p.K = K;
  p.K4 = (K + 3) / 4;
  p.data.assign(static_cast<size_t>(p.N * p.K4 * 4 + kAmxSlack), 0);
  // Whole groups of 16 rows and blocks of 16 quads as transposes where the
  // CPU has AVX-512; the rest quad by quad (4 bytes of K of one channel are
  // contiguous in both layouts).
  const bool wide = cpu_has_avx512bw();
  const int64_t N16 = wide ? N / 16 * 16 : 0, q16 = wide ? K / 64 * 16 : 0;
#pragma omp parallel for schedule(static) if (N * K >= (1 << 18))
  for (int64_t n0 = 0; n0 < p.N; n0 += 16) {
    if (n0 < N16 && q16 > 0) pack_group_avx512(B, ldb, n0, q16, p.K4, p.data.data());
    for (int64_t n = n0; n < std::min(N, n0 + 16); ++n) {
      int8_t* dst = p.data.data() + ((n / 16) * p.K4 * 16 + n % 16) * 4;
      const int8_t* src = B + n * ldb;
      for (int64_t q = n < N16 ? q16 : 0; q < p.K4; ++q)
        std::memcpy(dst + q * 64, src + 4 * q, static_cast<size_t>(std::min<int64_t>(4, K - 4 * q)));
    }
  }
  return p;
}

void gemm_u8s8s32_packed(GemmKernel kernel, int64_t M, const uint8_t* A, int64_t lda, const PackedB& B, int32_t* C,
                         int64_t ldc, bool a_zero_tail) {
  if (is_amx(kernel))
    return amx::gemm_s32(kernel == GemmKernel::amx_emulated, false, M, A, lda, B, B.N, C, ldc, a_zero_tail);
  if (kernel == GemmKernel::avx2) return avx2::gemm_s32(false, M, A, lda, B, B.N, C, ldc);
  check_vnni(kernel);
  gemm_packed_rows<false>(kernel, M, A, lda, B, C, ldc);
}

bool can_use_packed_window(GemmKernel kernel, int64_t N, int64_t run) {
  return (kernel == GemmKernel::avx512_vnni || kernel == GemmKernel::avx_vnni) && can_use_packed(kernel, N) &&
         run > 0 && run % 4 == 0;
}

void gemm_u8s8s32_packed_window(GemmKernel kernel, int64_t M, const WindowRows& w, const PackedB& B, int32_t* C,
                                int64_t ldc) {
  QAT_CHECK(can_use_packed_window(kernel, B.N, w.run) && w.taps * w.run == B.K && ldc >= B.N,
            "gemm_u8s8s32_packed_window: bad sizes N=", B.N, " K=", B.K, " taps=", w.taps, " run=", w.run,
            " ldc=", ldc, " (kernel ", enum_name(kernel), ")");
  gemm_packed<false>(kernel, M, WindowTileRows{w}, B, C, ldc);
}

void gemm_u8s8s32_packed_bounded(GemmKernel kernel, const GemmRanges& r, int64_t M, const uint8_t* A, int64_t lda,
                                 const PackedB& B, int32_t* C, int64_t ldc, bool a_zero_tail) {
  if (!runs_maddubs(kernel, r)) return gemm_u8s8s32_packed(kernel, M, A, lda, B, C, ldc, a_zero_tail);
  avx2::gemm_s32_maddubs(M, A, lda, B, B.N, C, ldc);
}

void gemm_s8s8s32_packed_offset(GemmKernel kernel, int64_t M, const int8_t* A, int64_t lda, const PackedB& B,
                                int32_t* C, int64_t ldc) {
  const auto* a8 = reinterpret_cast<const uint8_t*>(A);
  if (is_amx(kernel)) return amx::gemm_s32(kernel == GemmKernel::amx_emulated, true, M, a8, lda, B, B.N, C, ldc);
  if (kernel == GemmKernel::avx2) return avx2::gemm_s32(true, M, a8, lda, B, B.N, C, ldc);
  check_vnni(kernel);
  gemm_packed_rows<true>(kernel, M, a8, lda, B, C, ldc);
}

void gemm_s8s8_packed_dequant(GemmKernel kernel, int64_t M, const int8_t* A, int64_t lda, const PackedB& B,
                              const DequantEpilogue& e, float* out, int64_t ldo) {
  if (is_amx(kernel)) return amx::gemm_dequant(kernel == GemmKernel::amx_emulated, M, A, lda, B, e, out, ldo);
  if (kernel == GemmKernel::avx2) return avx2::gemm_dequant(M, A, lda, B, e, out, ldo);
  check_vnni(kernel);
  QAT_CHECK(can_use_packed(kernel, B.N) && lda >= B.K && e.n <= B.N && ldo >= e.n, "gemm_s8s8_packed_dequant: bad sizes "
            "N=", B.N, " K=", B.K, " n=", e.n, " lda=", lda, " ldo=", ldo);
  const PlainRows rows_of_a{reinterpret_cast<const uint8_t*>(A), lda, B.K};
  const Tiles<PlainRows> tl = tiles_of<true, PlainRows>(kernel, B.N);
  const int64_t groups = tl.groups, tiles = (M + kRows - 1) / kRows;
#pragma omp parallel for collapse(2) schedule(static) if (M * B.N * B.K >= (1 << 20))
  for (int64_t t = 0; t < tiles; ++t)
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t m0 = t * kRows, rows = M - m0 < kRows ? M - m0 : kRows;
      const int64_t n0 = g * tl.cols, cols = std::min<int64_t>(tl.cols, e.n - n0);
      if (cols <= 0) continue;
      alignas(64) int32_t c[kRows][16 * kBlocks];
      run_tile(tl, rows_of_a, m0, rows, B, g, &c[0][0], 16 * kBlocks);
      e.store(c[0], 16 * kBlocks, m0, rows, n0, cols, out, ldo);
    }
}

bool can_pack_transposed() { return cpu_has_avx512_vnni() || cpu_has_avx2(); }

void pack_b_vnni_transposed(const int8_t* Bt, int64_t K, int64_t N, int64_t ldbt, PackedB& out, int32_t* sums,
                            bool flip_signs, GemmKernel kernel) {
  const bool ymm = kernel == GemmKernel::avx_vnni || kernel == GemmKernel::avx2 || !cpu_has_avx512_vnni();
  QAT_CHECK(can_pack_transposed() && K > 0 && N > 0 && ldbt >= N,
            "pack_b_vnni_transposed: needs AVX-512 VNNI or AVX2, K > 0 (got ", K, "), N > 0 (got ", N, ")");
  out.N = (N + 63) / 64 * 64;
  out.K = K;
  out.K4 = (K + 3) / 4;
  out.view = nullptr, out.view_bytes = 0;  // (its own bytes again)
  out.data.resize(static_cast<size_t>(out.N * out.K4 * 4) + kAmxSlack);  // every packed byte is written below
  if (ymm) pack_transposed_ymm(Bt, K, N, ldbt, flip_signs, out, sums);
  else pack_transposed_avx512(Bt, K, N, ldbt, flip_signs, out, sums);
}

void pack_rows_vnni_transposed_at(const int8_t* Bt, int64_t rows, int64_t N, int64_t ldbt, int8_t* data, int64_t K4,
                                  int64_t at, int32_t* sums) {
  // (no check that throws: it runs inside its callers' parallel regions; the header states what they ensure)
  const int64_t chunks = (N + 63) / 64;
  for (int64_t ch = 0; ch < chunks; ++ch)
    pack_chunk_avx512(Bt, rows, N, ldbt, true, ch, 0, (rows + 3) / 4, {data, K4, at}, sums + ch * 64);
}

}  // namespace qat::quant
