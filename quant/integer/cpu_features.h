#pragma once
// What this CPU can run, asked once (kernels are compiled for their own
// instruction sets with target attributes and chosen at run time).
namespace qat::quant {

inline bool cpu_has_avx512bw() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  }();
  return yes;
}

inline bool cpu_has_avx512_vnni() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return cpu_has_avx512bw() && __builtin_cpu_supports("avx512vnni");
  }();
  return yes;
}

}  // namespace qat::quant
