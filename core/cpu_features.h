#pragma once
// What this CPU can run, asked once (kernels are compiled for their own
// instruction sets with target attributes and chosen at run time).
#include <cpuid.h>

namespace qat {

inline bool cpu_has_avx2() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
  }();
  return yes;
}

inline bool cpu_has_avx512bw() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  }();
  return yes;
}

// F, BW and VL: what the AVX-512 row kernels of the fake quantizers use.
inline bool cpu_has_avx512_rows() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return cpu_has_avx512bw() && __builtin_cpu_supports("avx512vl");
  }();
  return yes;
}

// F, BW, VL and DQ (64-bit multiplies): INT8 training's gradient kernels.
inline bool cpu_has_avx512_dq() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return cpu_has_avx512_rows() && __builtin_cpu_supports("avx512dq");
  }();
  return yes;
}

// AMX-INT8 (CPUID leaf 7, EDX bit 25; Clang 14 has no builtin name for it).
inline bool cpu_has_amx_int8() {
  static const bool yes = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) != 0 && (d >> 25 & 1u) != 0;
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

}  // namespace qat
