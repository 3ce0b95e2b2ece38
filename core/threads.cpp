#include "core/threads.h"

#include <cblas.h>
#include <omp.h>

#include <thread>

namespace qat {

int hardware_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

int num_threads() { return omp_get_max_threads(); }

void set_num_threads(int n) {
  if (n <= 0) n = hardware_threads();
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

}  // namespace qat
