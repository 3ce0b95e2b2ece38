// Memory bandwidth of this machine for the depthwise layers' share of it
// (bench/depthwise_traffic.py): STREAM's triad a = b + s c on arrays far
// larger than the caches, on the OpenMP threads; the best of 10 runs,
// counting 3 arrays moved (the write's read-for-ownership not counted, as
// STREAM does).
//   g++ -O3 -march=native -fopenmp bench/stream_triad.cpp -o /tmp/stream_triad
//   OMP_NUM_THREADS=2 /tmp/stream_triad
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

int main() {
  const long n = 1L << 26;  // 3 arrays of 256 MiB
  std::vector<float> a(n), b(n, 1.f), c(n, 2.f);
  double best = 1e30;
  for (int r = 0; r < 10; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; ++i) a[i] = b[i] + 3.f * c[i];
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::printf("triad, %d threads: %.1f GB/s (a[0] = %.1f)\n", omp_get_max_threads(), 3.0 * n * 4 / best / 1e9, a[0]);
}
