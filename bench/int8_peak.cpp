// The most int8 multiply-adds one core of this machine can do with VNNI, to
// put the integer model's convolutions against: 12 independent chains of
// AVX-512 vpdpbusd (64 u8 x s8 products summed into 16 int32 lanes each), in
// inline assembly so that the compiler can neither merge nor drop them; and
// the same count of 512-bit FP32 FMAs for comparison. One thread: run two
// copies at once to see both cores (each prints its own figure).
//   g++ -O2 bench/int8_peak.cpp -o /tmp/int8_peak && /tmp/int8_peak
// (A CPU without AVX-512 VNNI stops on an illegal instruction.)
#include <chrono>
#include <cstdio>

namespace {

constexpr long kLoops = 100000000;
constexpr int kChains = 12;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

#define QAT_TWELVE(op)                                                                            \
  op " %%zmm14,%%zmm15,%%zmm0\n" op " %%zmm14,%%zmm15,%%zmm1\n" op " %%zmm14,%%zmm15,%%zmm2\n" op \
     " %%zmm14,%%zmm15,%%zmm3\n" op " %%zmm14,%%zmm15,%%zmm4\n" op " %%zmm14,%%zmm15,%%zmm5\n" op \
     " %%zmm14,%%zmm15,%%zmm6\n" op " %%zmm14,%%zmm15,%%zmm7\n" op " %%zmm14,%%zmm15,%%zmm8\n" op \
     " %%zmm14,%%zmm15,%%zmm9\n" op " %%zmm14,%%zmm15,%%zmm10\n" op " %%zmm14,%%zmm15,%%zmm11\n"
#define QAT_CLOBBERS                                                                                                  \
  "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm14", "xmm15", \
      "cc"

// Instructions `op` a nanosecond: kLoops rounds of the 12 chains, timed.
#define QAT_CHAINS_PER_NS(op)                                               \
  [] {                                                                      \
    long n = kLoops;                                                        \
    const auto t0 = std::chrono::steady_clock::now();                       \
    __asm__ volatile(                                                       \
        "vpxord %%zmm14,%%zmm14,%%zmm14\n vpxord %%zmm15,%%zmm15,%%zmm15\n" \
        "1:\n" QAT_TWELVE(op) "dec %0\n jnz 1b\n"                           \
        : "+r"(n)::QAT_CLOBBERS);                                           \
    return kLoops * double{kChains} / seconds_since(t0) / 1e9;              \
  }()

}  // namespace

int main() {
  const double dp = QAT_CHAINS_PER_NS("vpdpbusd"), fma = QAT_CHAINS_PER_NS("vfmadd231ps");
  std::printf("one core: %.2f vpdpbusd zmm a ns = %.0f int8 GMAC/s; %.2f vfmadd231ps zmm a ns = %.0f FP32 GFLOP/s\n",
              dp, dp * 64, fma, fma * 32);
}
