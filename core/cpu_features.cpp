#include "core/cpu_features.h"

#include <cstdlib>

#include "core/error.h"

namespace qat {

namespace {
CpuIsa parse_max_cpu_isa() {
  const char* v = std::getenv("QAT_MAX_CPU_ISA");
  if (v == nullptr || *v == '\0') return CpuIsa::amx;
  const auto isa = enum_from_name<CpuIsa>(v);
  QAT_CHECK(isa.has_value(), "QAT_MAX_CPU_ISA='", v, "' is not an instruction-set level; use one of ",
            enum_name_list<CpuIsa>(), " (or leave it unset: no cap)");
  return *isa;
}
}  // namespace

CpuIsa max_cpu_isa() {
  static const CpuIsa cap = parse_max_cpu_isa();
  return cap;
}

}  // namespace qat
