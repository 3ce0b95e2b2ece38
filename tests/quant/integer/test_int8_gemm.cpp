// The fast integer GEMM kernels equal the scalar reference bit for bit, and
// the reference equals a plain 64-bit dot product computed here.
#include "tests/test_util.h"

#include "core/aligned_vector.h"
#include "core/cpu_features.h"
#include "quant/integer/int8_gemm.h"
#include "quant/integer/int8_gemm_packed.h"

using namespace qat;
using namespace qat::quant;

namespace {

enum class Fill { random, max_positive, max_negative };

// The kernels here that multiply packed operands (both VNNI, AVX2, AMX, AMX
// emulated).
std::vector<GemmKernel> packed_kernels_here() {
  std::vector<GemmKernel> out;
  for (const GemmKernel k : testing::gemm_kernels_here())
    if (k != GemmKernel::reference) out.push_back(k);
  return out;
}

// Runs every kernel on one shape with leading dimensions lda/ldb/ldc (>= K,
// K, N); the padding of A and B holds values that would change the result if
// read, and the padding of C must come back untouched.
void check_shape(int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc, Generator& g,
                 Fill fill = Fill::random) {
  std::vector<uint8_t> A(static_cast<size_t>(std::max<int64_t>(M * lda, 1)), 255);
  std::vector<int8_t> B(static_cast<size_t>(std::max<int64_t>(N * ldb, 1)), 127);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) {
      uint8_t& v = A[m * lda + k];
      // include the extreme 255 (where int16 pair sums would saturate)
      v = fill != Fill::random ? 255 : g.bernoulli(0.2f) ? 255 : static_cast<uint8_t>(g.below(256));
    }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      int8_t& v = B[n * ldb + k];
      if (fill == Fill::max_positive) v = 127;
      else if (fill == Fill::max_negative) v = -128;
      else if (g.bernoulli(0.1f)) v = -128;
      else if (g.bernoulli(0.1f)) v = 127;
      else v = static_cast<int8_t>(static_cast<int>(g.below(256)) - 128);
    }
  std::vector<int32_t> expect(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      int64_t s = 0;
      for (int64_t k = 0; k < K; ++k) s += int64_t{A[m * lda + k]} * int64_t{B[n * ldb + k]};
      expect[m * N + n] = static_cast<int32_t>(s);
    }
  const int32_t canary = 0x5a5a5a5a;
  std::vector<int32_t> C(static_cast<size_t>(std::max<int64_t>(M * ldc, 1)));
  for (GemmKernel kern : testing::gemm_kernels_here()) {
    INFO(gemm_kernel_name(kern) << " M=" << M << " N=" << N << " K=" << K << " lda=" << lda << " ldb=" << ldb
                                << " ldc=" << ldc);
    std::fill(C.begin(), C.end(), canary);
    gemm_u8s8s32(kern, M, N, K, A.data(), lda, B.data(), ldb, C.data(), ldc);
    bool same = true, padding_kept = true;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < ldc; ++n) {
        if (n < N) same = same && C[m * ldc + n] == expect[m * N + n];
        else padding_kept = padding_kept && C[m * ldc + n] == canary;
      }
    REQUIRE(same);
    REQUIRE(padding_kept);
  }
}

}  // namespace

TEST_CASE("int8 GEMM kernels equal the reference on edge shapes", "[quant][int8gemm]") {
  Generator g(3);
  // K around the 16-, 32- and 64-byte steps (full steps, tails, K < one step)
  const int64_t Ks[] = {1, 3, 4, 15, 16, 17, 31, 32, 33, 63, 64, 65, 95, 96, 97, 127, 128, 129, 200, 363};
  // M, N around the register blocks (4 x 4, 3 x 4) and the one-row kernels
  // (16 and 8 columns a call): single rows and columns, partial blocks on
  // either side
  const int64_t MNs[][2] = {{1, 1},  {1, 7},  {5, 1},  {3, 13}, {17, 9}, {1, 33}, {2, 17},
                            {4, 4},  {6, 20}, {7, 5},  {8, 16}, {13, 37}};
  for (int64_t K : Ks)
    for (auto& mn : MNs) check_shape(mn[0], mn[1], K, K, K, mn[1], g);
}

TEST_CASE("int8 GEMM kernels equal the reference at the extremes of the ranges", "[quant][int8gemm]") {
  Generator g(5);
  // all 255 times all -128 or all 127: every int16 pair sum would saturate
  for (Fill fill : {Fill::max_negative, Fill::max_positive})
    for (int64_t K : {1, 2, 63, 64, 65, 363, 1600})
      for (auto mn : {std::pair<int64_t, int64_t>{1, 1}, {1, 19}, {5, 6}, {9, 13}})
        check_shape(mn.first, mn.second, K, K, K, mn.second, g, fill);
}

TEST_CASE("int8 GEMM kernels honour lda, ldb and ldc", "[quant][int8gemm]") {
  Generator g(7);
  for (int64_t K : {1, 3, 64, 65, 127})
    for (auto mn : {std::pair<int64_t, int64_t>{1, 1}, {1, 18}, {5, 7}, {11, 9}}) {
      check_shape(mn.first, mn.second, K, K + 5, K + 64, mn.second + 3, g);
      check_shape(mn.first, mn.second, K, K + 64, K + 1, mn.second + 16, g);
    }
  // empty products: C is all zeros; no rows or columns: nothing is written
  check_shape(3, 5, 0, 0, 0, 5, g);
  check_shape(3, 5, 0, 4, 4, 8, g);
  check_shape(0, 5, 7, 7, 7, 5, g);
  check_shape(3, 0, 7, 7, 7, 2, g);
}

TEST_CASE("int8 GEMM kernels equal the reference on threaded and K-blocked shapes", "[quant][int8gemm]") {
  Generator g(11);
  for (int threads : {1, 2, 3}) {
    testing::ThreadsGuard guard(threads);
    INFO("threads=" << threads);
    check_shape(67, 45, 363, 363, 363, 45, g);      // tiles over M, edges on both sides
    check_shape(130, 70, 130, 131, 130, 72, g);     // partial tiles of rows
    check_shape(1, 300, 4000, 4000, 4000, 300, g);  // one row: split over N
    check_shape(2, 257, 2100, 2100, 2101, 257, g);  // two rows, one-row kernel
    check_shape(9, 30, 5000, 5000, 5000, 30, g);    // K over 4096: K blocks accumulate
    check_shape(5, 21, 8300, 8301, 8300, 21, g);    // three K blocks, tail in the last
  }
  // the reference itself against a hand-computed value: 255*(-128) + 1*127
  const uint8_t a[] = {255, 1};
  const int8_t b[] = {-128, 127};
  int32_t c = 0;
  gemm_u8s8s32(GemmKernel::reference, 1, 1, 2, a, 2, b, 2, &c, 1);
  REQUIRE(c == 255 * -128 + 127);
}

TEST_CASE("the packed VNNI and AMX GEMMs equal the reference", "[quant][int8gemm]") {
  std::mt19937 rng(17);
  // AMX blocks: 32 x 32 of C, 64 bytes of K (16 quads) a step; VNNI: 6 x 64;
  // AVX-VNNI: 6 x 16.
  for (const GemmKernel kern : packed_kernels_here())
  for (int64_t K : {1, 3, 4, 5, 63, 64, 65, 128, 363, 1024, 1025, 1600}) {
    for (int64_t M : {1, 5, 6, 7, 13, 16, 17, 31, 32, 33, 100}) {
      for (int64_t N : {16, 48, 64, 80, 192}) {
        if (!can_use_packed(kern, N)) continue;
        const int64_t lda = K + (M % 2 ? 3 : 0), ldc = N + (K % 2 ? 5 : 0);
        // Aligned: with K and lda multiples of 64 the AMX kernel reads A's
        // full 32-row panels in place (and copies the last, partial one).
        qat::AlignedVector<uint8_t> A(M * lda);
        std::vector<int8_t> B(N * K);
        for (auto& v : A) v = static_cast<uint8_t>(rng());
        for (auto& v : B) v = static_cast<int8_t>(rng());
        if (K == 64) std::fill(A.begin(), A.end(), 255), std::fill(B.begin(), B.end(), -128);  // extremes
        std::vector<int32_t> want(M * ldc, 7), got(M * ldc, 7);
        qat::quant::gemm_u8s8s32(qat::quant::GemmKernel::reference, M, N, K, A.data(), lda, B.data(), K, want.data(),
                                 ldc);
        const auto packed = qat::quant::pack_b_vnni(B.data(), N, K, K);
        qat::quant::gemm_u8s8s32_packed(kern, M, A.data(), lda, packed, got.data(), ldc);
        INFO(gemm_kernel_name(kern) << " M=" << M << " N=" << N << " K=" << K);
        REQUIRE(got == want);  // padding columns of C untouched too
      }
    }
  }
}

// Signed x signed (INT8 training: gradients x weights): every kernel equals a
// plain 64-bit sum, on edge shapes, padded leading dimensions and the extreme
// values -128 x -128 (where the +128 shift of A meets its largest correction).
TEST_CASE("s8 x s8 GEMM equals the 64-bit sum on edge shapes with every kernel", "[quant][int8gemm]") {
  Generator g(17);
  struct Shape3 { int64_t M, N, K; };
  for (const Shape3 s : {Shape3{1, 1, 1}, Shape3{3, 5, 7}, Shape3{4, 16, 64}, Shape3{7, 33, 129}, Shape3{17, 64, 300},
                         Shape3{1, 100, 1000}, Shape3{64, 3, 4096}, Shape3{0, 4, 8}, Shape3{4, 0, 8}, Shape3{4, 4, 0}}) {
    for (const bool extreme : {false, true}) {
      const int64_t lda = s.K + 3, ldb = s.K + 5, ldc = s.N + 2;
      std::vector<int8_t> A(static_cast<size_t>(std::max<int64_t>(s.M * lda, 1)), 99);
      std::vector<int8_t> B(static_cast<size_t>(std::max<int64_t>(s.N * ldb, 1)), -99);
      auto draw = [&] { return extreme ? int8_t{-128} : static_cast<int8_t>(static_cast<int>(g.below(256)) - 128); };
      for (int64_t m = 0; m < s.M; ++m)
        for (int64_t k = 0; k < s.K; ++k) A[m * lda + k] = draw();
      for (int64_t n = 0; n < s.N; ++n)
        for (int64_t k = 0; k < s.K; ++k) B[n * ldb + k] = draw();
      std::vector<int32_t> want(static_cast<size_t>(s.M * s.N));
      for (int64_t m = 0; m < s.M; ++m)
        for (int64_t n = 0; n < s.N; ++n) {
          int64_t acc = 0;
          for (int64_t k = 0; k < s.K; ++k) acc += int64_t{A[m * lda + k]} * int64_t{B[n * ldb + k]};
          want[m * s.N + n] = static_cast<int32_t>(acc);
        }
      for (GemmKernel kern : testing::gemm_kernels_here()) {
        INFO(gemm_kernel_name(kern) << " M=" << s.M << " N=" << s.N << " K=" << s.K << " extreme=" << extreme);
        const int32_t canary = 0x5a5a5a5a;
        std::vector<int32_t> C(static_cast<size_t>(std::max<int64_t>(s.M * ldc, 1)), canary);
        gemm_s8s8s32(kern, s.M, s.N, s.K, A.data(), lda, B.data(), ldb, C.data(), ldc);
        bool same = true, padding_kept = true;
        for (int64_t m = 0; m < s.M; ++m)
          for (int64_t n = 0; n < ldc; ++n) {
            if (n < s.N) same = same && C[m * ldc + n] == want[m * s.N + n];
            else padding_kept = padding_kept && C[m * ldc + n] == canary;
          }
        REQUIRE(same);
        REQUIRE(padding_kept);
        // Its first part alone: (A + 128) B^T and the column sums, whose
        // correction gives the same product.
        std::vector<int32_t> colsum(static_cast<size_t>(std::max<int64_t>(s.N, 1)), canary);
        gemm_s8s8s32_shifted(kern, s.M, s.N, s.K, A.data(), lda, B.data(), ldb, C.data(), ldc, colsum.data());
        for (int64_t n = 0; n < s.N; ++n) {
          int64_t col = 0;
          for (int64_t k = 0; k < s.K; ++k) col += B[n * ldb + k];
          same = same && colsum[n] == col;
          for (int64_t m = 0; m < s.M; ++m)
            same = same && int64_t{C[m * ldc + n]} - 128 * int64_t{colsum[n]} == want[m * s.N + n];
        }
        REQUIRE(same);
      }
    }
  }
  std::vector<int8_t> a(70000, 1), b(70000, 1);
  int32_t c = 0;
  REQUIRE_THROWS_WITH(gemm_s8s8s32(GemmKernel::reference, 1, 1, 70000, a.data(), 70000, b.data(), 70000, &c, 1),
                      Catch::Matchers::Contains("exceeds 65536"));
}

// INT8 training's input gradient on the packed kernel: B packed from its
// transpose (the weight as stored), columns padded to 64, A signed with its
// sign bits flipped in the broadcast; C - 128 sums equals the 64-bit sum.
TEST_CASE("the packed s8 x s8 GEMM on a transposed B equals the 64-bit sum", "[quant][int8gemm]") {
  if (packed_kernels_here().empty() || !can_pack_transposed()) {
    WARN("no VNNI here: packed s8 x s8 GEMM not tested");
    return;
  }
  Generator g(19);
  struct Shape3 { int64_t M, N, K; };
  PackedB packed;  // reused across shapes, as the training op does
  for (const Shape3 s : {Shape3{1, 1, 1}, Shape3{3, 5, 7}, Shape3{6, 64, 4}, Shape3{7, 65, 129}, Shape3{32, 200, 300},
                         Shape3{13, 128, 1}, Shape3{2, 9216, 5}, Shape3{49, 1600, 64}, Shape3{2, 64, 65536}}) {
    // extreme 1: -128 x -128 (A + 128 = 0); 2: 127 x -128 (the largest |C|)
    for (const int extreme : {0, 1, 2})
    for (const GemmKernel kern : packed_kernels_here()) {
      INFO(gemm_kernel_name(kern) << " M=" << s.M << " N=" << s.N << " K=" << s.K << " extreme " << extreme);
      const int64_t lda = s.K + 3, ldbt = s.N + 2;
      std::vector<int8_t> A(static_cast<size_t>(s.M * lda), 99), Bt(static_cast<size_t>(s.K * ldbt), -99);
      auto draw = [&](int8_t fixed) {
        return extreme ? fixed : static_cast<int8_t>(static_cast<int>(g.below(256)) - 128);
      };
      for (int64_t m = 0; m < s.M; ++m)
        for (int64_t k = 0; k < s.K; ++k) A[m * lda + k] = draw(extreme == 2 ? int8_t{127} : int8_t{-128});
      for (int64_t k = 0; k < s.K; ++k)
        for (int64_t n = 0; n < s.N; ++n) Bt[k * ldbt + n] = draw(int8_t{-128});
      std::vector<int32_t> sums(static_cast<size_t>((s.N + 63) / 64 * 64), 7);
      pack_b_vnni_transposed(Bt.data(), s.K, s.N, ldbt, packed, sums.data(), false, kern);
      REQUIRE(packed.N == (s.N + 63) / 64 * 64);
      const int64_t ldc = packed.N + 1;
      std::vector<int32_t> C(static_cast<size_t>(s.M * ldc), 5);
      gemm_s8s8s32_packed_offset(kern, s.M, A.data(), lda, packed, C.data(), ldc);
      bool ok = true;
      for (int64_t n = 0; n < packed.N; ++n) {
        int64_t col = 0;
        for (int64_t k = 0; k < s.K && n < s.N; ++k) col += Bt[k * ldbt + n];
        ok = ok && sums[n] == (n < s.N ? col : 0);
        for (int64_t m = 0; m < s.M; ++m) {
          int64_t want = 0;
          for (int64_t k = 0; k < s.K && n < s.N; ++k) want += int64_t{A[m * lda + k]} * Bt[k * ldbt + n];
          ok = ok && int64_t{C[m * ldc + n]} - 128 * int64_t{sums[n]} == want;
        }
      }
      REQUIRE(ok);
      for (int64_t m = 0; m < s.M; ++m) REQUIRE(C[m * ldc + packed.N] == 5);  // past the padded columns: untouched
    }
  }
}

// INT8 training's weight gradient: the packed product with u8 rows read as
// u - 128 and each tile dequantized in place equals the scalar formula on
// the 64-bit sum, bit for bit (same double operations), on edge shapes and
// the extremes (u = 0 or 255, A = -128 or 127).
TEST_CASE("the packed s8 x s8 GEMM with the dequantizing epilogue equals the scalar formula", "[quant][int8gemm]") {
  if (packed_kernels_here().empty() || !can_pack_transposed()) {
    WARN("no VNNI here: packed dequantizing GEMM not tested");
    return;
  }
  Generator g(23);
  struct Shape3 { int64_t M, N, K; };
  PackedB packed;
  for (const Shape3 s : {Shape3{1, 1, 1}, Shape3{7, 65, 3}, Shape3{6, 64, 32}, Shape3{13, 300, 129},
                         Shape3{64, 363, 1000}, Shape3{33, 64, 1025}}) {
    for (const int extreme : {0, 1, 2})
    for (const GemmKernel kern : packed_kernels_here()) {
      INFO(gemm_kernel_name(kern) << " M=" << s.M << " N=" << s.N << " K=" << s.K << " extreme " << extreme);
      std::vector<int8_t> A(static_cast<size_t>(s.M * s.K));
      std::vector<uint8_t> U(static_cast<size_t>(s.K * s.N));  // Bt: K rows of N u8 values
      for (auto& v : A)
        v = extreme == 1 ? int8_t{-128} : extreme == 2 ? int8_t{127} : static_cast<int8_t>(g.below(256) - 128);
      for (auto& v : U)
        v = extreme == 1 ? uint8_t{255} : extreme == 2 ? uint8_t{0} : static_cast<uint8_t>(g.below(256));
      std::vector<int32_t> sums(static_cast<size_t>((s.N + 63) / 64 * 64));
      pack_b_vnni_transposed(reinterpret_cast<const int8_t*>(U.data()), s.K, s.N, s.N, packed, sums.data(), true,
                             kern);
      std::vector<double> row_add(static_cast<size_t>(s.M));
      for (int64_t m = 0; m < s.M; ++m) row_add[m] = 0.37 * static_cast<double>(m) - 3.0;
      const double scale = 1.7e-5;
      const int64_t ldo = s.N + 2;
      std::vector<float> out(static_cast<size_t>(s.M * ldo), -1.f);
      gemm_s8s8_packed_dequant(kern, s.M, A.data(), s.K, packed, DequantEpilogue{s.N, sums.data(), row_add.data(), scale},
                               out.data(), ldo);
      bool ok = true;
      for (int64_t m = 0; m < s.M; ++m) {
        for (int64_t n = 0; n < s.N; ++n) {
          int64_t acc = 0;
          for (int64_t k = 0; k < s.K; ++k) acc += int64_t{A[m * s.K + k]} * (int64_t{U[k * s.N + n]} - 128);
          ok = ok && out[m * ldo + n] == static_cast<float>(scale * (static_cast<double>(acc) + row_add[m]));
        }
        ok = ok && out[m * ldo + s.N] == -1.f;  // beyond n: untouched
      }
      REQUIRE(ok);
    }
  }
}

// gemm_u8s8s32_bounded: operands drawn within the declared ranges, their
// extremes over-represented (every pair at the extremes sums to the largest
// int16 magnitude the ranges allow), against the 64-bit sum. Ranges whose
// pair sums fit int16 run the vpmaddubsw kernel on avx2; the others, and
// every other kernel, the plain kernels.
TEST_CASE("the bounded GEMM equals the 64-bit sum on operands within its ranges, on every kernel",
          "[quant][int8gemm]") {
  Generator g(21);
  const GemmRanges ranges[] = {{127, 128}, {255, 8}, {15, 128}, {15, 8}, {255, 128}};
  REQUIRE(pairs_fit_int16(ranges[0]));
  REQUIRE_FALSE(pairs_fit_int16(ranges[4]));
  REQUIRE(pairs_fit_int16({129, 127}));        // 2 * 129 * 127 = 32766
  REQUIRE_FALSE(pairs_fit_int16({128, 128}));  // 32768: beyond (though a pair reaching -32768 alone would fit)
  const int64_t Ks[] = {1, 5, 31, 32, 33, 64, 95, 127, 128, 129, 363, 5000};
  const int64_t MNs[][2] = {{1, 1}, {1, 9}, {2, 4}, {3, 5}, {5, 13}, {17, 33}, {64, 40}};
  for (const GemmRanges& r : ranges)
    for (const int64_t K : Ks)
      for (const auto& mn : MNs) {
        const int64_t M = mn[0], N = mn[1];
        std::vector<uint8_t> A(static_cast<size_t>(M * K));
        std::vector<int8_t> B(static_cast<size_t>(N * K));
        for (uint8_t& v : A)
          v = static_cast<uint8_t>(g.bernoulli(0.3f) ? r.a_max : g.below(static_cast<uint32_t>(r.a_max) + 1));
        const int lo = -std::min(r.b_absmax, 128), hi = std::min(r.b_absmax, 127);
        for (int8_t& v : B)
          v = static_cast<int8_t>(g.bernoulli(0.2f)   ? lo
                                  : g.bernoulli(0.2f) ? hi
                                                      : lo + static_cast<int>(g.below(static_cast<uint32_t>(hi - lo + 1))));
        std::vector<int32_t> expect(static_cast<size_t>(M * N));
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < N; ++n) {
            int64_t s = 0;
            for (int64_t k = 0; k < K; ++k) s += int64_t{A[m * K + k]} * int64_t{B[n * K + k]};
            expect[m * N + n] = static_cast<int32_t>(s);
          }
        for (const GemmKernel kern : testing::gemm_kernels_here()) {
          INFO(gemm_kernel_name(kern) << (runs_maddubs(kern, r) ? " (vpmaddubsw)" : "") << " a_max=" << r.a_max
                                      << " b_absmax=" << r.b_absmax << " M=" << M << " N=" << N << " K=" << K);
          std::vector<int32_t> C(static_cast<size_t>(M * N), 0x5a5a5a5a);
          gemm_u8s8s32_bounded(kern, r, M, N, K, A.data(), K, B.data(), K, C.data(), N);
          REQUIRE(C == expect);
        }
      }
  if (!gemm_kernel_runs_here(GemmKernel::avx2)) WARN("no AVX2 here: the vpmaddubsw kernel is not reached");
  else REQUIRE(runs_maddubs(GemmKernel::avx2, ranges[0]));
}

// gemm_u8s8s32_packed_bounded: the same operands on the packed weights, on
// every packed kernel (the avx2 one multiplying bytes with vpmaddubsw where
// the ranges allow), thin strips (1, 2 rows) and uneven row blocks (49)
// included.
TEST_CASE("the packed bounded GEMM equals the 64-bit sum on operands within its ranges", "[quant][int8gemm]") {
  Generator g(23);
  const GemmRanges ranges[] = {{127, 128}, {255, 8}, {15, 8}, {255, 128}};
  for (const GemmRanges& r : ranges)
    for (const int64_t K : {1, 3, 4, 5, 33, 363, 1600})
      for (const int64_t M : {1, 2, 3, 6, 8, 13, 49, 100})
        for (const int64_t N : {16, 48, 80}) {
          const int64_t lda = K + (M % 2 ? 3 : 0), ldc = N + 5;
          std::vector<uint8_t> A(static_cast<size_t>(M * lda), 255);  // the row padding would change sums if read
          std::vector<int8_t> B(static_cast<size_t>(N * K));
          for (int64_t m = 0; m < M; ++m)
            for (int64_t k = 0; k < K; ++k)
              A[m * lda + k] =
                  static_cast<uint8_t>(g.bernoulli(0.3f) ? r.a_max : g.below(static_cast<uint32_t>(r.a_max) + 1));
          const int lo = -std::min(r.b_absmax, 128), hi = std::min(r.b_absmax, 127);
          for (int8_t& v : B)
            v = static_cast<int8_t>(g.bernoulli(0.2f)   ? lo
                                    : g.bernoulli(0.2f) ? hi
                                                        : lo + static_cast<int>(g.below(static_cast<uint32_t>(hi - lo + 1))));
          std::vector<int32_t> expect(static_cast<size_t>(M * ldc), 7);
          for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n) {
              int64_t s = 0;
              for (int64_t k = 0; k < K; ++k) s += int64_t{A[m * lda + k]} * int64_t{B[n * K + k]};
              expect[m * ldc + n] = static_cast<int32_t>(s);
            }
          const PackedB packed = pack_b_vnni(B.data(), N, K, K);
          for (const GemmKernel kern : packed_kernels_here()) {
            if (!can_use_packed(kern, N)) continue;
            INFO(gemm_kernel_name(kern) << (runs_maddubs(kern, r) ? " (vpmaddubsw)" : "") << " a_max=" << r.a_max
                                        << " b_absmax=" << r.b_absmax << " M=" << M << " N=" << N << " K=" << K);
            std::vector<int32_t> C(static_cast<size_t>(M * ldc), 7);
            gemm_u8s8s32_packed_bounded(kern, r, M, A.data(), lda, packed, C.data(), ldc);
            REQUIRE(C == expect);  // the padding columns of C untouched
          }
        }
}

// The packed kernels on shapes large enough to run on a team of threads
// (M N K >= 2^20), with 1, 2 and 3 threads: the row blocks and channel
// chunks shared out (dynamically on avx2, each thread with its own widened
// panel) give the same integers as the reference. u8 x s8, the bounded form
// (vpmaddubsw on avx2) and the s8 x s8 offset form.
TEST_CASE("the packed GEMMs equal the reference on threaded shapes", "[quant][int8gemm]") {
  Generator g(29);
  struct Size {
    int64_t M, N, K;
  };
  for (const Size& sz : {Size{100, 192, 1600}, Size{49, 256, 1100}, Size{97, 80, 363}})
    for (const int threads : {1, 2, 3}) {
      testing::ThreadsGuard tg(threads);
      const int64_t M = sz.M, N = sz.N, K = sz.K;
      std::vector<uint8_t> A(static_cast<size_t>(M * K));
      std::vector<int8_t> B(static_cast<size_t>(N * K));
      for (auto& v : A) v = static_cast<uint8_t>(g.bernoulli(0.2f) ? 127 : g.below(128));  // 7 bits: bounded too
      for (auto& v : B) v = static_cast<int8_t>(static_cast<int>(g.below(256)) - 128);
      std::vector<int32_t> want(static_cast<size_t>(M * N));
      gemm_u8s8s32(GemmKernel::reference, M, N, K, A.data(), K, B.data(), K, want.data(), N);
      std::vector<int32_t> want_s8(static_cast<size_t>(M * N));
      const auto* As8 = reinterpret_cast<const int8_t*>(A.data());
      gemm_s8s8s32(GemmKernel::reference, M, N, K, As8, K, B.data(), K, want_s8.data(), N);
      const PackedB packed = pack_b_vnni(B.data(), N, K, K);
      std::vector<int32_t> col_sum(static_cast<size_t>(N), 0);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) col_sum[n] += B[n * K + k];
      for (const GemmKernel kern : packed_kernels_here()) {
        if (!can_use_packed(kern, N)) continue;
        INFO(gemm_kernel_name(kern) << " M=" << M << " N=" << N << " K=" << K << ", " << threads << " threads");
        std::vector<int32_t> got(static_cast<size_t>(M * N), 7);
        gemm_u8s8s32_packed(kern, M, A.data(), K, packed, got.data(), N);
        REQUIRE(got == want);
        std::fill(got.begin(), got.end(), 7);
        gemm_u8s8s32_packed_bounded(kern, GemmRanges{127, 128}, M, A.data(), K, packed, got.data(), N);
        REQUIRE(got == want);
        std::fill(got.begin(), got.end(), 7);
        gemm_s8s8s32_packed_offset(kern, M, As8, K, packed, got.data(), N);  // (A + 128) B^T
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < N; ++n) got[m * N + n] -= 128 * col_sum[n];
        REQUIRE(got == want_s8);
      }
    }
}
