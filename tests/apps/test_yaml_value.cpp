// apps/yaml_value: typed reading of YAML where every error names the file,
// the key path, the line and the bad value.
#include <fstream>
#include <limits>

#include "tests/test_util.h"

#include "apps/yaml_value.h"
#include "core/error.h"

using namespace qat::apps;
using Catch::Matchers::Contains;

namespace {

enum class Fruit { apple, pear_tree };
constexpr auto enum_names(Fruit) {
  return std::to_array<qat::EnumName<Fruit>>({{Fruit::apple, "apple"}, {Fruit::pear_tree, "pear_tree"}});
}

const char* kDoc =
    "top:\n"             // line 1
    "  count: 3\n"       // line 2
    "  ratio: 0.25\n"    // line 3
    "  flag: true\n"     // line 4
    "  name: alpha\n"    // line 5
    "  fruit: pear_tree\n"  // line 6
    "  sizes:\n"         // line 7
    "    - 1\n"          // line 8
    "    - two\n"        // line 9
    "  quoted: \"7\"\n"  // line 10
    "  huge: 3000000000\n"  // line 11
    "  seed: 18446744073709551615\n"  // line 12
    "  empty:\n";        // line 13

struct Doc : qat::testing::TempDir {
  std::string path = file("doc.yaml");
  explicit Doc(const char* text = kDoc) : TempDir("qat_yaml_value_") { std::ofstream(path) << text; }
  YamlValue top() const { return load_yaml_file(path).get("top"); }
};

}  // namespace

TEST_CASE("yaml_value: typed getters read plain scalars, lists and enums", "[yaml_value]") {
  Doc d;
  const YamlValue top = d.top();
  CHECK(top.get("count").as<int>() == 3);
  CHECK(top.get("count").as<int64_t>() == 3);
  CHECK(top.get("ratio").as<double>() == 0.25);
  CHECK(top.get("ratio").as<float>() == 0.25f);
  CHECK(top.get("flag").as<bool>());
  CHECK(top.get("name").as<std::string>() == "alpha");
  CHECK(top.get("fruit").as<Fruit>() == Fruit::pear_tree);
  CHECK(top.get("huge").as<int64_t>() == 3000000000);
  CHECK(top.get("seed").as<uint64_t>() == std::numeric_limits<uint64_t>::max());
  CHECK(top.get("empty").is_null());
  CHECK_FALSE(top.find("absent"));
  // Entries in file order, each with its key path.
  const auto entries = top.entries();
  REQUIRE(entries.size() == 10);
  CHECK(entries.front().first == "count");
  CHECK(entries.front().second.path() == "top.count");
  CHECK(entries.back().second.path() == "top.empty");
  const auto sizes = top.get("sizes").items();
  REQUIRE(sizes.size() == 2);
  CHECK(sizes[0].as<int>() == 1);
  CHECK(sizes[1].path() == "top.sizes[1]");
  CHECK(sizes[1].where() == d.path + ", line 9");
}

TEST_CASE("yaml_value: a wrong type names the file, the key path, the line and the value", "[yaml_value]") {
  Doc d;
  const YamlValue top = d.top();
  const std::string at = d.path + ", line ";
  REQUIRE_THROWS_WITH(top.get("sizes").items()[1].as<int>(),
                      Contains(at + "9: top.sizes[1]: expected an integer, got 'two'"));
  REQUIRE_THROWS_WITH(top.get("ratio").as<int>(), Contains(at + "3: top.ratio: expected an integer, got '0.25'"));
  REQUIRE_THROWS_WITH(top.get("name").as<double>(), Contains(at + "5: top.name: expected a number, got 'alpha'"));
  REQUIRE_THROWS_WITH(top.get("name").as<bool>(), Contains(at + "5: top.name: expected true or false, got 'alpha'"));
  REQUIRE_THROWS_WITH(top.get("quoted").as<int>(),
                      Contains(at + "10: top.quoted: expected an integer, got the quoted string '7'"));
  REQUIRE_THROWS_WITH(top.get("huge").as<int>(), Contains(at + "11: top.huge: integer out of range: '3000000000'"));
  // A tagged value is what its tag says, not the number read here (it was read as one).
  Doc tagged("a: !!str 1\nb: !foo 2.5\nc: !!bool true\n");
  const YamlValue t = load_yaml_file(tagged.path);
  REQUIRE_THROWS_WITH(t.get("a").as<int>(), Contains(tagged.path + ", line 1: a: expected an integer, got '1' with the "
                                                                   "YAML tag 'tag:yaml.org,2002:str'"));
  REQUIRE_THROWS_WITH(t.get("b").as<double>(), Contains("line 2: b: expected a number, got '2.5' with the YAML tag '!foo'"));
  REQUIRE_THROWS_WITH(t.get("c").as<bool>(), Contains("line 3: c: expected true or false"));
  REQUIRE_THROWS_WITH(top.get("sizes").as<std::string>(), Contains(at + "7: top.sizes: expected a string, got a list"));
  REQUIRE_THROWS_WITH(top.get("empty").as<double>(),
                      Contains(at + "13: top.empty: expected a number, got nothing (empty value)"));
  REQUIRE_THROWS_WITH(top.get("count").items(), Contains(at + "2: top.count: expected a list, got '3'"));
  REQUIRE_THROWS_WITH(top.get("sizes").items(3, "integers"),
                      Contains(at + "7: top.sizes: expected a list of 3 integers, got 2 element(s)"));
  REQUIRE_THROWS_WITH(top.get("count").get("x"), Contains(at + "2: top.count: expected a mapping, got '3'"));
}

TEST_CASE("yaml_value: a long value is shown cut, with its length", "[yaml_value]") {
  const std::string text = std::string(80, 'a') + "tail that is not shown";  // 102 characters
  Doc d(("top:\n  long: " + text + "\n").c_str());
  REQUIRE_THROWS_WITH(d.top().get("long").as<int>(),
                      Contains("expected an integer, got '" + std::string(80, 'a') + "...' (102 characters)"));
  REQUIRE_THROWS_WITH(d.top().get("long").as<int>(), !Contains("tail"));
}

TEST_CASE("yaml_value: a quoted value left open at the end of the file is a syntax error", "[yaml_value]") {
  // yaml-cpp alone reads these as running to the end of the file.
  for (const char* text : {"top:\n  a: 1\n  dir: \"out/unterm\n", "top:\n  dir: 'out/x\n  b: 2\n"}) {
    Doc d(text);
    REQUIRE_THROWS_WITH(load_yaml_file(d.path),
                        Contains(d.path) && Contains("YAML syntax error: the quoted value starting here is never closed"));
  }
  Doc fine("top:\n  a: \"say \\\"hi\\\"\"\n  b: 'it''s'\n  'c': \"two\n    lines\"\n");
  REQUIRE(fine.top().get("a").as<std::string>() == "say \"hi\"");
  REQUIRE(fine.top().get("b").as<std::string>() == "it's");
  REQUIRE(fine.top().get("c").as<std::string>() == "two lines");
}

TEST_CASE("yaml_value: enum parse errors list the valid names", "[yaml_value]") {
  Doc d;
  REQUIRE_THROWS_WITH(d.top().get("name").as<Fruit>(),
                      Contains(d.path + ", line 5: top.name: expected one of apple, pear_tree, got 'alpha'"));
  REQUIRE_THROWS_WITH(d.top().get("sizes").as<Fruit>(),
                      Contains("top.sizes: expected one of apple, pear_tree, got a list"));
}

TEST_CASE("yaml_value: unknown, duplicate and missing keys name the file, the key path and the line",
          "[yaml_value]") {
  Doc d;
  REQUIRE_THROWS_WITH(d.top().only_keys({"count", "ratio", "flag", "name", "fruit", "sizes", "quoted", "huge", "seed"}),
                      Contains(d.path + ", line 13: unknown key 'top.empty' (known: count, ratio,"));
  REQUIRE_THROWS_WITH(d.top().get("missing"), Contains(d.path + ", line 1: missing required key 'top.missing'"));
  Doc dup("a:\n  b: 1\n  b: 2\n");
  REQUIRE_THROWS_WITH(load_yaml_file(dup.path).get("a").entries(), Contains(dup.path + ", line 3: a.b: duplicate key"));
}

TEST_CASE("yaml_value: a value given elsewhere says so instead of a line, and so do its elements", "[yaml_value]") {
  Doc d;
  const YamlValue sizes = d.top().get("sizes").given_by("--set top.sizes=[1, two]");
  REQUIRE_THROWS_WITH(sizes.items()[1].as<int>(),
                      Contains(d.path + " (--set top.sizes=[1, two]): top.sizes[1]: expected an integer, got 'two'"));
}

TEST_CASE("yaml_value: unreadable files and syntax errors name the file", "[yaml_value]") {
  Doc bad("a: [1, 2\nb: 3\n");
  REQUIRE_THROWS_WITH(load_yaml_file(bad.path), Contains(bad.path + ", line ") && Contains("YAML syntax error"));
  REQUIRE_THROWS_WITH(load_yaml_file(bad.file("nope.yaml")), Contains("nope.yaml") && Contains("no such file"));
  REQUIRE_THROWS_WITH(load_yaml_file(bad.dir.string()), Contains("it is a directory"));
}

TEST_CASE("yaml_value: aliases that cycle or multiply are refused at load, naming the file", "[yaml_value]") {
  Doc cycle("a: &a [*a]\n");  // segfaulted: the first walk recursed through the alias forever
  REQUIRE_THROWS_WITH(load_yaml_file(cycle.path),
                      Contains(cycle.path + ", line 1: the YAML nests deeper than 64 levels once its aliases"));
  // Nine levels of nine aliases: 9^9 values (took 24 s of CPU before an error, ten of ten never ended).
  std::string laughs = "l0: &l0 [x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 10; ++i) {
    const std::string name = std::to_string(i);
    laughs += "l";
    laughs += name;
    laughs += ": &l";
    laughs += name;
    laughs += " [";
    for (int j = 0; j < 9; ++j) {
      laughs += j ? ", *l" : "*l";
      laughs += std::to_string(i - 1);
    }
    laughs += "]\n";
  }
  Doc bomb(laughs.c_str());
  REQUIRE_THROWS_WITH(load_yaml_file(bomb.path), Contains(bomb.path) && Contains("holds more than 2000000 values"));
  // Aliases as such are fine: a value used twice, nested within the bounds.
  Doc ok("base: &b {lr: 0.1, sizes: [1, 2]}\nother: *b\n");
  CHECK(load_yaml_file(ok.path).get("other").get("lr").as<double>() == 0.1);
  REQUIRE_THROWS_WITH(check_yaml_bounded(YAML::Load("&a [*a]"), "c.yaml (--set x)"),
                      Contains("c.yaml (--set x), line 1: the YAML nests deeper than 64 levels"));
}

TEST_CASE("yaml_value: a device or a huge file is refused after 64 MiB, naming it", "[yaml_value]") {
  REQUIRE_THROWS_WITH(load_yaml_file("/dev/zero"),
                      Contains("'/dev/zero' is longer than 67108864 bytes, too long for a qat text file"));
}

TEST_CASE("yaml_value: strings must be UTF-8 so that they can be written back", "[yaml_value]") {
  auto text = [](const std::string& s) { return YamlValue(YAML::Node(s), "f.yaml", "data.train", 3).as<std::string>(); };
  CHECK(text("images/caf\xc3\xa9") == "images/caf\xc3\xa9");  // é, two bytes
  CHECK(text("\xf0\x9f\x93\xb7") == "\xf0\x9f\x93\xb7");      // a four-byte code point
  for (const std::string bad : {"caf\xe9", "\xff", "\xc0\xaf", "\xe2\x82", "\xed\xa0\x80"}) {
    INFO(bad.size() << " bytes");
    REQUIRE_THROWS_WITH(text(bad), Contains("f.yaml, line 4") && Contains("data.train") && Contains("UTF-8"));
  }
}

TEST_CASE("yaml_value: a second YAML document is refused, not ignored", "[yaml_value]") {
  Doc two("top:\n  a: 1\n---\ntop:\n  a: 5\n");
  REQUIRE_THROWS_WITH(load_yaml_file(two.path), Contains(two.path + ", line 4: a second YAML document begins here"));
  Doc marked("---\ntop:\n  a: 1\n---\n");  // a leading and a trailing ---: one document
  REQUIRE(marked.top().get("a").as<int64_t>() == 1);
}

TEST_CASE("yaml_value: a float too close to 0 says so, not 'not finite'", "[yaml_value]") {
  Doc d("top:\n  tiny: 1e-50\n  huge: 1e50\n  fine: 1e-30\n");
  REQUIRE_THROWS_WITH(d.top().get("tiny").as<float>(), Contains("too close to 0") && Contains("1e-50"));
  REQUIRE_THROWS_WITH(d.top().get("huge").as<float>(), Contains("expected a finite number"));
  CHECK(d.top().get("fine").as<float>() == 1e-30f);
  CHECK(d.top().get("tiny").as<double>() == 1e-50);
}

// Found by fuzz_config (fuzz/seeds/config/yaml_cpp_parser_stall.yaml): on
// this text yaml-cpp 0.7's parser stops advancing. YAML::LoadAll looped
// forever on it and YAML::Load drops what follows the first document.
TEST_CASE("yaml_value: text the YAML parser stalls on is an error, not a hang or a half-read file", "[yaml_value]") {
  const std::string stall = std::string(QAT_SOURCE_DIR) + "/fuzz/seeds/config/yaml_cpp_parser_stall.yaml";
  REQUIRE_THROWS_WITH(load_yaml_file(stall), Contains(stall + ": YAML syntax error: the YAML parser stops before the "
                                                              "end of the file"));
}
