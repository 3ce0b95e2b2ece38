#include "core/generator.h"

#include <cmath>

namespace qat {

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
}  // namespace

void Generator::manual_seed(uint64_t seed) {
  uint64_t x = seed;
  for (auto& w : s_) w = splitmix64(x);
}


float Generator::normal() {
  // Box-Muller in double; u1 in (0, 1] so log() is finite.
  const double u1 = (static_cast<double>(next_u64() >> 11) + 1.0) * (1.0 / 9007199254740992.0);
  const double u2 = static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0);
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

uint64_t Generator::below(uint64_t n) {
  // Lemire's nearly-divisionless method, with rejection for exact uniformity.
  __uint128_t m = static_cast<__uint128_t>(next_u64()) * n;
  uint64_t l = static_cast<uint64_t>(m);
  if (l < n) {
    const uint64_t t = (0 - n) % n;
    while (l < t) {
      m = static_cast<__uint128_t>(next_u64()) * n;
      l = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

}  // namespace qat
