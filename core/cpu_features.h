#pragma once
// What this CPU can run, asked once (kernels are compiled for their own
// instruction sets with target attributes and chosen at run time).
//
// QAT_MAX_CPU_ISA caps what the kernels may use below what the CPU has, as
// oneDNN's ONEDNN_MAX_CPU_ISA does: `generic` (no AVX2 kernel), `avx2`,
// `avx_vnni` (AVX2 and the VEX vpdpbusd of Intel's client CPUs since Alder
// Lake), `avx512` (F/BW/VL/DQ and no VNNI of either kind: Skylake-X),
// `avx512_vnni` (Cascade Lake, Ice Lake-SP: no AVX-VNNI either), `amx` (no
// cap; the default; Sapphire Rapids has all). Each level allows those before
// it, except that only avx_vnni and amx allow avx_vnni (a partial order, as
// the CPUs that have them).
// It lets one machine run, test and time the kernels an older CPU gets.
#include <cpuid.h>

#include <initializer_list>

#include "core/enum_names.h"

namespace qat {

// In order, with avx_vnni beside the AVX-512 levels (cpu_isa_allows).
enum class CpuIsa { generic, avx2, avx_vnni, avx512, avx512_vnni, amx };
constexpr auto enum_names(CpuIsa) {
  return std::to_array<EnumName<CpuIsa>>({{CpuIsa::generic, "generic"},
                                          {CpuIsa::avx2, "avx2"},
                                          {CpuIsa::avx_vnni, "avx_vnni"},
                                          {CpuIsa::avx512, "avx512"},
                                          {CpuIsa::avx512_vnni, "avx512_vnni"},
                                          {CpuIsa::amx, "amx"}});
}

// The level QAT_MAX_CPU_ISA names (amx where unset), read once; an unknown
// value throws qat::Error naming the variable, its value and the choices.
CpuIsa max_cpu_isa();

// Whether a CPU of level `cap` has what `level` names.
constexpr bool isa_level_allows(CpuIsa cap, CpuIsa level) {
  if (level == CpuIsa::avx_vnni) return cap == CpuIsa::avx_vnni || cap == CpuIsa::amx;
  return static_cast<int>(level) <= static_cast<int>(cap);
}
inline bool cpu_isa_allows(CpuIsa level) { return isa_level_allows(max_cpu_isa(), level); }

inline bool cpu_has_avx2() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return cpu_isa_allows(CpuIsa::avx2) && __builtin_cpu_supports("avx2");
  }();
  return yes;
}

// AVX-VNNI: vpdpbusd on ymm with a VEX encoding (CPUID leaf 7 sub-leaf 1,
// EAX bit 4; GCC 12's __builtin_cpu_supports does not see it on AMD).
inline bool cpu_has_avx_vnni() {
  static const bool yes = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return cpu_isa_allows(CpuIsa::avx_vnni) && cpu_has_avx2() && __get_cpuid_count(7, 1, &a, &b, &c, &d) != 0 &&
           (a >> 4 & 1u) != 0;
  }();
  return yes;
}

inline bool cpu_has_avx512f() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return cpu_isa_allows(CpuIsa::avx512) && __builtin_cpu_supports("avx512f");
  }();
  return yes;
}

inline bool cpu_has_avx512bw() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return cpu_isa_allows(CpuIsa::avx512) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
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
    return cpu_isa_allows(CpuIsa::amx) && __get_cpuid_count(7, 0, &a, &b, &c, &d) != 0 && (d >> 25 & 1u) != 0;
  }();
  return yes;
}

inline bool cpu_has_avx512_vnni() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return cpu_isa_allows(CpuIsa::avx512_vnni) && cpu_has_avx512bw() && __builtin_cpu_supports("avx512vnni");
  }();
  return yes;
}

// The vector lanes of a row kernel written once over its width (a float or
// byte row on 16 or 8 float lanes): each the CPU has within the cap runs
// (the tests run every one), the best by default.
enum class RowLanes { scalar, avx2, avx512 };
inline bool row_lanes_run_here(RowLanes lanes) {
  switch (lanes) {
    case RowLanes::avx512:
      return cpu_has_avx512bw();
    case RowLanes::avx2:
      return cpu_has_avx2();
    default:
      return true;
  }
}
inline RowLanes best_row_lanes() {
  for (const RowLanes lanes : {RowLanes::avx512, RowLanes::avx2})
    if (row_lanes_run_here(lanes)) return lanes;
  return RowLanes::scalar;
}

}  // namespace qat
