#include "core/cpu_features.h"

#include <cctype>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace qat {

namespace {
CpuIsa parse_max_cpu_isa() {
  const char* v = std::getenv("QAT_MAX_CPU_ISA");
  if (v == nullptr || *v == '\0') return CpuIsa::amx;
  std::string name(v);  // oneDNN's spelling (AVX2) too
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const auto isa = enum_from_name<CpuIsa>(name);
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
