#pragma once
// Generator: an explicitly seeded random source (xoshiro256**). Every use of
// randomness takes one by reference; there is no global RNG. Its state can be
// saved and restored (checkpoints) as four 64-bit words.
#include <array>
#include <bit>
#include <cstdint>

namespace qat {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) { manual_seed(seed); }
  void manual_seed(uint64_t seed);
  uint64_t next_u64() {  // inline: dropout draws one per element
    const uint64_t result = std::rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = std::rotl(s_[3], 45);
    return result;
  }
  // [0, 1): 24 random bits, exactly representable floats
  float uniform() { return static_cast<float>(next_u64() >> 40) * (1.0f / 16777216.0f); }
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
