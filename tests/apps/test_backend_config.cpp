// apps/backend_config: the shipped backend files, and errors that name the
// file, the key path and the line.
#include <fstream>

#include "tests/test_util.h"

#include "apps/backend_config.h"

using namespace qat;
using namespace qat::apps;
using Catch::Matchers::Contains;

namespace {

const char* kBackend =
    "name: mine\n"                           // line 1
    "patterns: [conv+bn+relu, linear]\n"     // line 2
    "weight:\n"                              // line 3
    "  dtype: int8\n"                        // line 4
    "  symmetric: auto\n"                    // line 5
    "  per_channel: true\n"                  // line 6
    "  formula: power_of_two\n"              // line 7
    "  bits: [4, 8]\n"                       // line 8
    "activation:\n"                          // line 9
    "  dtype: uint8\n"                       // line 10
    "min_scale: 0.000244140625\n";           // line 11

// kBackend with line `n` (1-based) replaced by `text`.
std::string with_line(int n, const std::string& text) {
  std::string s = kBackend;
  size_t at = 0;
  for (int i = 1; i < n; ++i) at = s.find('\n', at) + 1;
  return s.replace(at, s.find('\n', at) - at, text);
}

struct BackendFile : testing::TempDir {
  std::string path = file("mine.yaml");
  explicit BackendFile(const std::string& text) : TempDir("qat_backend_config_") { std::ofstream(path) << text; }
  quant::Backend load() const { return load_backend(path, dir.string()); }
};

}  // namespace

TEST_CASE("backend_config: a backend file with every key", "[backend_config]") {
  const quant::Backend b = BackendFile(kBackend).load();
  CHECK(b.name == "mine");
  CHECK(b.patterns == std::set<quant::Pattern>{quant::Pattern::conv_bn_relu, quant::Pattern::linear});
  CHECK(b.weight.is_signed);
  CHECK_FALSE(b.weight.symmetric.has_value());
  CHECK(b.weight.per_channel == std::optional<bool>(true));
  CHECK(b.weight.formula == std::optional<quant::ScaleFormula>(quant::ScaleFormula::power_of_two));
  CHECK(b.weight.min_bits == 4);
  CHECK(b.weight.max_bits == 8);
  CHECK_FALSE(b.activation.is_signed);
  CHECK(b.min_scale == 0.000244140625f);
}

TEST_CASE("backend_config: the shipped backends load by name", "[backend_config]") {
  for (const char* name : {"default", "power_of_two", "tensorrt"}) {
    INFO(name);
    const quant::Backend b = load_backend(name, ".");
    CHECK(b.name == name);
    CHECK(b.patterns.size() == 11);  // the chain patterns and conv+bn+relu6, conv+relu6, add+relu, add, concat
  }
  CHECK(load_backend("tensorrt", ".").weight.narrow_range);
}

TEST_CASE("backend_config: errors name the file, the key path and the line", "[backend_config]") {
  struct Case {
    int line;
    std::string text, expect;
  };
  const std::vector<Case> cases = {
      {5, "  symmetric: maybe", "line 5: weight.symmetric: expected one of auto, true, false, got 'maybe'"},
      {7, "  formula: log", "line 7: weight.formula: expected one of auto, minmax, power_of_two, amax_over_qmax, got 'log'"},
      {2, "patterns: [conv, conv+bnn]", "line 2: patterns[1]: expected one of conv, conv+relu, conv+bn, conv+bn+relu"},
      {4, "  dtype: int4", "line 4: weight.dtype: expected int8 or uint8, got 'int4'"},
      {4, "  dtypo: int8", "line 4: unknown key 'weight.dtypo' (known: dtype, symmetric,"},
      {8, "  bits: [4]", "line 8: weight.bits: expected a list of 2 integers [min, max], got 1 element(s)"},
      {8, "  bits: [4, 9]", "line 8: weight.bits: expected 2 <= min <= max <= 8"},
      {10, "  dtype: uint8\n  per_channel: true", "line 11: unknown key 'activation.per_channel'"},
      {10, "  symmetric: true", "line 9: missing required key 'activation.dtype'"},
      {11, "min_scale: -1", "line 11: min_scale: must be >= 0"},
      {11, "min_scale: tiny", "line 11: min_scale: expected a number, got 'tiny'"},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    const BackendFile f(with_line(c.line, c.text));
    REQUIRE_THROWS_WITH(f.load(), Contains(f.path + ", " + c.expect));
  }
}
