// The fast integer GEMM kernels equal the scalar reference bit for bit.
#include "tests/test_util.h"

#include "quant/int8_gemm.h"

using namespace qat;
using namespace qat::quant;

TEST_CASE("int8 GEMM kernels equal the reference on edge shapes", "[quant][int8gemm]") {
  std::vector<GemmKernel> kernels = {GemmKernel::reference};
  const GemmKernel best = best_gemm_kernel();
  if (best == GemmKernel::avx512_vnni) kernels = {GemmKernel::avx2, GemmKernel::avx512_vnni};
  else if (best == GemmKernel::avx2) kernels = {GemmKernel::avx2};
  else WARN("no AVX2 on this CPU: only the reference kernel runs");
  Generator g(3);
  const int64_t Ks[] = {1, 3, 4, 15, 16, 17, 63, 64, 65, 127, 200, 363};
  const int64_t MNs[][2] = {{1, 1}, {1, 7}, {5, 1}, {3, 13}, {17, 9}};
  for (int64_t K : Ks)
    for (auto& mn : MNs) {
      const int64_t M = mn[0], N = mn[1];
      std::vector<uint8_t> A(M * K);
      std::vector<int8_t> B(N * K);
      // include the extremes 255 and -128 (where int16 pair sums would saturate)
      for (auto& v : A) v = g.bernoulli(0.2f) ? 255 : static_cast<uint8_t>(g.below(256));
      for (auto& v : B) v = g.bernoulli(0.2f) ? -128 : static_cast<int8_t>(static_cast<int>(g.below(256)) - 128);
      std::vector<int32_t> ref(M * N), got(M * N);
      gemm_u8s8s32(GemmKernel::reference, M, N, K, A.data(), K, B.data(), K, ref.data(), N);
      for (GemmKernel k : kernels) {
        INFO(gemm_kernel_name(k) << " M=" << M << " N=" << N << " K=" << K);
        std::fill(got.begin(), got.end(), 0x5a5a5a5a);
        gemm_u8s8s32(k, M, N, K, A.data(), K, B.data(), K, got.data(), N);
        REQUIRE(got == ref);
      }
    }
  // the reference itself against a hand-computed value: 255*(-128) + 1*127
  const uint8_t a[] = {255, 1};
  const int8_t b[] = {-128, 127};
  int32_t c = 0;
  gemm_u8s8s32(GemmKernel::reference, 1, 1, 2, a, 2, b, 2, &c, 1);
  REQUIRE(c == 255 * -128 + 127);
}
