// QAT_MAX_CPU_ISA (core/cpu_features.h): the qat binary, run with the cap,
// names and runs the kernels of the capped level; a bad value fails before
// any work with the variable, the value and the choices.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/cpu_features.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// `qat bench` for one step of a tiny model under QAT_MAX_CPU_ISA=isa: its
// exit status, its output in *out.
int bench_under(const std::string& isa, const fs::path& log, std::string* out) {
  const std::string cmd = "QAT_MAX_CPU_ISA=" + isa + " " + QAT_BINARY +
                          " bench --steps 1 --warmup 0 --res 32 --batch 2 --model small_cnn --no-profile --threads 1 > " +
                          log.string() + " 2>&1";
  const int rc = std::system(cmd.c_str());
  *out = slurp(log);
  return rc;
}

}  // namespace

TEST_CASE("QAT_MAX_CPU_ISA caps the kernels qat runs, and a bad value fails naming it", "[cpu_features]") {
  qat::testing::TempDir t;
  std::string out;
  REQUIRE(bench_under("generic", t.dir / "generic.log", &out) == 0);
  CHECK_THAT(out, Contains("under QAT_MAX_CPU_ISA=generic: avx512 no, vnni no, avx-vnni no, amx-int8 no") &&
                      Contains("int8 GEMM reference; fake-quant rows generic; gradient quantization scalar") &&
                      Contains("train fp32:"));
  if (__builtin_cpu_supports("avx2")) {
    REQUIRE(bench_under("avx2", t.dir / "avx2.log", &out) == 0);
    CHECK_THAT(out, Contains("int8 GEMM avx2; fake-quant rows avx2; gradient quantization avx2"));
  }
  REQUIRE(bench_under("avx3", t.dir / "bad.log", &out) != 0);
  CHECK_THAT(out, Contains("qat: error: QAT_MAX_CPU_ISA='avx3' is not an instruction-set level") &&
                      Contains("generic, avx2, avx_vnni, avx512, avx512_vnni, amx"));
  CHECK_THAT(out, !Contains("train fp32"));
}

TEST_CASE("a capped level allows itself and the levels before it, AVX-VNNI only at avx_vnni and amx",
          "[cpu_features]") {
  using qat::CpuIsa;
  // The order, level by level (Skylake-X: avx512; Cascade Lake: avx512_vnni;
  // neither has AVX-VNNI).
  CHECK(qat::isa_level_allows(CpuIsa::avx512, CpuIsa::avx2));
  CHECK_FALSE(qat::isa_level_allows(CpuIsa::avx512, CpuIsa::avx_vnni));
  CHECK_FALSE(qat::isa_level_allows(CpuIsa::avx512_vnni, CpuIsa::avx_vnni));
  CHECK(qat::isa_level_allows(CpuIsa::amx, CpuIsa::avx_vnni));
  CHECK(qat::isa_level_allows(CpuIsa::avx_vnni, CpuIsa::avx_vnni));
  CHECK(qat::isa_level_allows(CpuIsa::avx_vnni, CpuIsa::avx2));
  CHECK_FALSE(qat::isa_level_allows(CpuIsa::avx_vnni, CpuIsa::avx512));
  CHECK_FALSE(qat::isa_level_allows(CpuIsa::avx2, CpuIsa::avx_vnni));
  // This process's cap (amx, no cap, unless the suite runs under one).
  const CpuIsa cap = qat::max_cpu_isa();
  for (const auto& [level, name] : enum_names(CpuIsa{})) {
    INFO(name << " under " << enum_name(cap));
    CHECK(qat::cpu_isa_allows(level) == qat::isa_level_allows(cap, level));
  }
  if (!qat::cpu_isa_allows(CpuIsa::avx2)) CHECK_FALSE(qat::cpu_has_avx2());
  if (!qat::cpu_isa_allows(CpuIsa::avx_vnni)) CHECK_FALSE(qat::cpu_has_avx_vnni());
  if (!qat::cpu_isa_allows(CpuIsa::avx512)) CHECK_FALSE((qat::cpu_has_avx512bw() || qat::cpu_has_avx512_rows()));
  if (!qat::cpu_isa_allows(CpuIsa::avx512_vnni)) CHECK_FALSE(qat::cpu_has_avx512_vnni());
  if (!qat::cpu_isa_allows(CpuIsa::amx)) CHECK_FALSE(qat::cpu_has_amx_int8());
}
