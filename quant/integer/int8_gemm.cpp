#include "quant/integer/int8_gemm.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/error.h"
#include "quant/integer/amx_tiles.h"
#include "core/cpu_features.h"
#include "quant/integer/int8_gemm_amx.h"
#include "quant/integer/int8_gemm_blocks.h"

namespace qat::quant {

const char* gemm_kernel_name(GemmKernel k) { return enum_name(k); }

bool gemm_kernel_runs_here(GemmKernel k) {
  switch (k) {
    case GemmKernel::reference:
    case GemmKernel::amx_emulated: return true;
    case GemmKernel::avx2: return cpu_has_avx2();
    case GemmKernel::avx_vnni: return cpu_has_avx_vnni();
    case GemmKernel::avx512_vnni: return cpu_has_avx512_vnni() && cpu_has_avx512_rows();
    case GemmKernel::amx: return amx::amx_hardware_usable();
  }
  return false;
}

GemmKernel best_gemm_kernel() {
  for (GemmKernel k : {GemmKernel::amx, GemmKernel::avx512_vnni, GemmKernel::avx_vnni, GemmKernel::avx2})
    if (gemm_kernel_runs_here(k)) return k;
  return GemmKernel::reference;
}

std::vector<GemmKernel> gemm_kernels_here() {
  std::vector<GemmKernel> out;
  for (const auto& [k, name] : enum_names(GemmKernel{}))
    if (gemm_kernel_runs_here(k)) out.push_back(k);
  return out;
}

bool is_amx(GemmKernel k) { return k == GemmKernel::amx || k == GemmKernel::amx_emulated; }

namespace {

// ---------------------------------------------------------------- reference

int32_t dot_reference(const uint8_t* a, const int8_t* b, int64_t K) {
  int32_t acc = 0;
  for (int64_t k = 0; k < K; ++k) acc += static_cast<int32_t>(a[k]) * static_cast<int32_t>(b[k]);
  return acc;
}

void gemm_reference(int64_t M, int64_t N, int64_t K, const uint8_t* A, int64_t lda, const int8_t* B, int64_t ldb,
                    int32_t* C, int64_t ldc) {
#pragma omp parallel for collapse(2) schedule(static) if (M * N * K > (1 << 20))
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) C[m * ldc + n] = dot_reference(A + m * lda, B + n * ldb, K);
}

// ----------------------------------------------------------------- driver
// (the micro-kernels: int8_gemm_blocks.h, one instruction set a file)

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
int64_t ceil_div(int64_t x, int64_t m) { return (x + m - 1) / m; }

// Cache blocking: K in blocks of at most 4096 bytes (an MR-row strip of A, at
// most 16 KiB, stays in L1), N in panels whose B block (nc x kc bytes, about
// 384 KiB) stays in L2 while a tile of up to 32 blocks of rows of A streams
// past it. Tiles (mc rows x nc columns of C, all of K) are independent and
// shared out to the threads, at least 4 per thread when the work is worth it;
// small M (batch-1 fully connected layers) thus splits over N. With fewer rows
// than the block kernel takes, A is one short row and B streams from memory
// once, so K is not split.
void gemm_blocked(const gemm_blocks::KernelSet& ks, int64_t M, int64_t N, int64_t K, const uint8_t* A, int64_t lda,
                  const int8_t* B, int64_t ldb, int32_t* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  const int64_t g = ks.row_nr;  // panel granularity, a multiple of ks.nr
  const int64_t nkb = M >= ks.min_rows ? std::max<int64_t>(1, ceil_div(K, 4096)) : 1;
  const int64_t kc = nkb == 1 ? std::max<int64_t>(K, 1) : round_up(ceil_div(K, nkb), 64);
  const int64_t nc_max = std::max<int64_t>(g, (384 * 1024 / kc) / g * g);
  int64_t nc = round_up(ceil_div(N, ceil_div(N, nc_max)), g);
  int64_t mc = std::min<int64_t>(round_up(M, ks.mr), 32 * ks.mr);

  const int threads = omp_get_max_threads();
  const bool parallel = threads > 1 && M * N * std::max<int64_t>(K, 1) >= (int64_t{1} << 20);
  const int64_t want = parallel ? 4 * static_cast<int64_t>(threads) : 1;
  auto tiles = [&] { return ceil_div(M, mc) * ceil_div(N, nc); };
  while (tiles() < want) {
    if (mc >= 4 * ks.mr) mc = round_up(mc / 2, ks.mr);
    else if (nc >= 2 * g) nc = round_up(nc / 2, g);
    else break;
  }
  const int64_t tiles_n = ceil_div(N, nc), ntiles = tiles();

#pragma omp parallel for schedule(dynamic, 1) if (parallel && ntiles > 1)
  for (int64_t t = 0; t < ntiles; ++t) {
    const int64_t m0 = (t / tiles_n) * mc, m1 = std::min(M, m0 + mc);
    const int64_t n0 = (t % tiles_n) * nc, n1 = std::min(N, n0 + nc);
    for (int64_t k0 = 0; k0 == 0 || k0 < K; k0 += kc) {
      const int64_t kk = std::min(kc, K - k0);
      for (int64_t m = m0; m < m1; m += ks.mr) {
        const int mr = static_cast<int>(std::min<int64_t>(ks.mr, m1 - m));
        if (mr >= ks.min_rows) {
          for (int64_t n = n0; n < n1; n += ks.nr)
            ks.block(A + m * lda + k0, lda, B + n * ldb + k0, ldb, kk, C + m * ldc + n, ldc, mr,
                     static_cast<int>(std::min<int64_t>(ks.nr, n1 - n)), k0 > 0);
        } else {
          for (int64_t i = m; i < m + mr; ++i)
            for (int64_t n = n0; n < n1; n += ks.row_nr)
              ks.row(A + i * lda + k0, lda, B + n * ldb + k0, ldb, kk, C + i * ldc + n, ldc, 1,
                     static_cast<int>(std::min<int64_t>(ks.row_nr, n1 - n)), k0 > 0);
        }
      }
    }
  }
}

// B packed for the tiles on every call (the integer model packs its weights
// once, int8_gemm_packed.h); K = 0 has nothing to pack: C = 0.
void gemm_amx_unpacked(bool emulate, int64_t M, int64_t N, int64_t K, const uint8_t* A, int64_t lda,
                       const int8_t* B, int64_t ldb, int32_t* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    for (int64_t m = 0; m < M; ++m) std::fill_n(C + m * ldc, N, 0);
    return;
  }
  amx::gemm_s32(emulate, false, M, A, lda, pack_b_vnni(B, N, K, ldb), N, C, ldc);
}

}  // namespace

void gemm_u8s8s32(GemmKernel kernel, int64_t M, int64_t N, int64_t K, const uint8_t* A, int64_t lda, const int8_t* B,
                  int64_t ldb, int32_t* C, int64_t ldc) {
  QAT_CHECK(M >= 0 && N >= 0 && K >= 0 && lda >= K && ldb >= K && ldc >= N, "gemm_u8s8s32: bad sizes M=", M, " N=", N,
            " K=", K, " lda=", lda, " ldb=", ldb, " ldc=", ldc);
  switch (kernel) {
    case GemmKernel::reference: return gemm_reference(M, N, K, A, lda, B, ldb, C, ldc);
    case GemmKernel::avx2: return gemm_blocked(gemm_blocks::kAvx2, M, N, K, A, lda, B, ldb, C, ldc);
    case GemmKernel::avx_vnni: return gemm_blocked(gemm_blocks::kAvxVnni, M, N, K, A, lda, B, ldb, C, ldc);
    case GemmKernel::avx512_vnni: return gemm_blocked(gemm_blocks::kAvx512Vnni, M, N, K, A, lda, B, ldb, C, ldc);
    case GemmKernel::amx:
      // B is packed on every call here: below a few panels of A that costs
      // more than the tiles save, and the VNNI kernel (every AMX CPU has it)
      // gives the same integers.
      if (M < 4 * 32) return gemm_blocked(gemm_blocks::kAvx512Vnni, M, N, K, A, lda, B, ldb, C, ldc);
      return gemm_amx_unpacked(false, M, N, K, A, lda, B, ldb, C, ldc);
    case GemmKernel::amx_emulated: return gemm_amx_unpacked(true, M, N, K, A, lda, B, ldb, C, ldc);
  }
}

bool pairs_fit_int16(const GemmRanges& r) {
  return r.a_max >= 0 && r.b_absmax >= 0 && 2 * static_cast<int64_t>(r.a_max) * r.b_absmax <= 32767;
}

bool runs_maddubs(GemmKernel kernel, const GemmRanges& r) {
  return kernel == GemmKernel::avx2 && pairs_fit_int16(r);
}

void gemm_u8s8s32_bounded(GemmKernel kernel, const GemmRanges& r, int64_t M, int64_t N, int64_t K, const uint8_t* A,
                          int64_t lda, const int8_t* B, int64_t ldb, int32_t* C, int64_t ldc) {
  if (!runs_maddubs(kernel, r)) return gemm_u8s8s32(kernel, M, N, K, A, lda, B, ldb, C, ldc);
  QAT_CHECK(M >= 0 && N >= 0 && K >= 0 && lda >= K && ldb >= K && ldc >= N, "gemm_u8s8s32_bounded: bad sizes M=", M,
            " N=", N, " K=", K, " lda=", lda, " ldb=", ldb, " ldc=", ldc);
  QAT_CHECK(gemm_kernel_runs_here(kernel), "gemm_u8s8s32_bounded: the ", enum_name(kernel),
            " kernel does not run on this CPU");
  gemm_blocked(gemm_blocks::kMaddubs, M, N, K, A, lda, B, ldb, C, ldc);
}

}  // namespace qat::quant

namespace qat::quant {

namespace {
void gemm_s8s8_reference(int64_t M, int64_t N, int64_t K, const int8_t* A, int64_t lda, const int8_t* B, int64_t ldb,
                         int32_t* C, int64_t ldc) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      int32_t acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += static_cast<int32_t>(A[m * lda + k]) * B[n * ldb + k];
      C[m * ldc + n] = acc;
    }
}
}  // namespace

void gemm_s8s8s32_shifted(GemmKernel kernel, int64_t M, int64_t N, int64_t K, const int8_t* A, int64_t lda,
                          const int8_t* B, int64_t ldb, int32_t* C, int64_t ldc, int32_t* colsum) {
  QAT_CHECK(M >= 0 && N >= 0 && K >= 0 && lda >= K && ldb >= K && ldc >= N, "gemm_s8s8s32: bad sizes M=", M, " N=", N,
            " K=", K, " lda=", lda, " ldb=", ldb, " ldc=", ldc);
  // 2^16 * 255 * 128 < 2^31: no shifted partial sum can overflow.
  QAT_CHECK(K <= (int64_t{1} << 16), "gemm_s8s8s32: K=", K, " exceeds 65536 (int32 accumulator bound)");
  thread_local std::vector<uint8_t> shifted;
  if (static_cast<int64_t>(shifted.size()) < M * K) shifted.resize(static_cast<size_t>(M * K));
  uint8_t* a = shifted.data();
#pragma omp parallel for schedule(static) if (M * K >= (1 << 16))
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) a[m * K + k] = static_cast<uint8_t>(A[m * lda + k] + 128);
  gemm_u8s8s32(kernel, M, N, K, a, K, B, ldb, C, ldc);
#pragma omp parallel for schedule(static) if (N * K >= (1 << 16))
  for (int64_t n = 0; n < N; ++n) {
    int32_t s = 0;
    for (int64_t k = 0; k < K; ++k) s += B[n * ldb + k];
    colsum[n] = s;
  }
}

void gemm_s8s8s32(GemmKernel kernel, int64_t M, int64_t N, int64_t K, const int8_t* A, int64_t lda, const int8_t* B,
                  int64_t ldb, int32_t* C, int64_t ldc) {
  if (kernel == GemmKernel::reference) {
    QAT_CHECK(M >= 0 && N >= 0 && K >= 0 && lda >= K && ldb >= K && ldc >= N, "gemm_s8s8s32: bad sizes M=", M,
              " N=", N, " K=", K, " lda=", lda, " ldb=", ldb, " ldc=", ldc);
    QAT_CHECK(K <= (int64_t{1} << 16), "gemm_s8s8s32: K=", K, " exceeds 65536 (int32 accumulator bound)");
    return gemm_s8s8_reference(M, N, K, A, lda, B, ldb, C, ldc);
  }
  std::vector<int32_t> colsum(static_cast<size_t>(N));
  gemm_s8s8s32_shifted(kernel, M, N, K, A, lda, B, ldb, C, ldc, colsum.data());
#pragma omp parallel for schedule(static) if (M * N >= (1 << 16))
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) C[m * ldc + n] -= 128 * colsum[n];
}

}  // namespace qat::quant
