#pragma once
// Generator: an explicitly seeded random source (xoshiro256**). Every use of
// randomness takes one by reference; there is no global RNG. Its state can be
// saved and restored (checkpoints) as four 64-bit words.
#include <array>
#include <cstdint>

namespace qat {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) { manual_seed(seed); }
  void manual_seed(uint64_t seed);
  uint64_t next_u64();
  float uniform();                        // [0, 1)
  float uniform(float lo, float hi) { return lo + (hi - lo) * uniform(); }
  float normal();                         // standard normal (Box-Muller)
  uint64_t below(uint64_t n);             // uniform integer in [0, n)
  bool bernoulli(float p) { return uniform() < p; }

  using State = std::array<uint64_t, 4>;
  State state() const { return s_; }
  void set_state(const State& s) { s_ = s; }

 private:
  State s_{};
};

}  // namespace qat
