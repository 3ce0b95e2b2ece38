#include "apps/yaml_value.h"

#include <algorithm>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <system_error>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include "core/error.h"
#include "core/text_file.h"

namespace qat::apps {

namespace fs = std::filesystem;

namespace {

std::string describe_node(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined: return "nothing (empty value)";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Scalar: break;
  }
  // A long value (a whole file read as one scalar) is cut: its start says enough.
  constexpr size_t kShown = 80;
  const std::string& v = n.Scalar();
  if (v.size() <= kShown) return "'" + v + "'";
  return "'" + v.substr(0, kShown) + "...' (" + std::to_string(v.size()) + " characters)";
}

std::string join_key(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }

}  // namespace

YamlValue::YamlValue(YAML::Node node, std::string file, std::string path, int line)
    : node_(std::move(node)), file_(std::move(file)), path_(std::move(path)), line_(line) {}

std::string YamlValue::where() const {
  if (!note_.empty()) return file_ + " (" + note_ + ")";
  if (line_ >= 0) return file_ + ", line " + std::to_string(line_ + 1);
  return file_;
}

YamlValue YamlValue::given_by(std::string note) const {
  YamlValue v = *this;
  v.note_ = std::move(note);
  return v;
}

void YamlValue::fail(const std::string& msg) const {
  if (path_.empty()) QAT_FAIL(where(), ": ", msg);
  QAT_FAIL(where(), ": ", path_, ": ", msg);
}

void YamlValue::fail_unknown_key(const std::string& hint) const {
  QAT_FAIL(where(), ": unknown key '", path_, "'", hint);
}

void YamlValue::fail_missing_key(const std::string& key, const std::string& hint) const {
  QAT_FAIL(where(), ": missing required key '", join_key(path_, key), "'", hint);
}

std::string YamlValue::describe() const { return describe_node(node_); }

YamlValue YamlValue::child(YAML::Node node, std::string path, int line) const {
  YamlValue v(std::move(node), file_, std::move(path), line >= 0 ? line : line_);
  v.note_ = note_;
  return v;
}

// ------------------------------------------------------------------ scalars

const std::string& YamlValue::scalar(const std::string& expected) const {
  if (!node_.IsScalar()) fail("expected " + expected + ", got " + describe());
  return node_.Scalar();
}

const std::string& YamlValue::plain_scalar(const std::string& expected) const {
  const std::string& s = scalar(expected);
  if (node_.Tag() == "!") fail("expected " + expected + ", got the quoted string " + describe());
  // "?": an untagged plain scalar. An explicit tag (!!str 1, !foo 1) says the
  // value is something else than the number or flag read here.
  if (node_.Tag() != "?")
    fail("expected " + expected + ", got " + describe() + " with the YAML tag '" + node_.Tag() +
         "' (qat reads untagged values: remove the tag)");
  return s;
}

bool YamlValue::as_bool() const {
  const std::string& s = plain_scalar("true or false");
  if (s == "true") return true;
  if (s == "false") return false;
  fail("expected true or false, got " + describe());
}

namespace {
// Well-formed UTF-8 (no overlong forms, surrogates or code points past
// U+10FFFF): YAML files are UTF-8, so only such text can be written back.
bool is_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int extra = 0;
    uint32_t cp = 0, min = 0;
    if (c < 0x80) extra = 0, cp = c;
    else if ((c & 0xE0) == 0xC0) extra = 1, cp = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0) extra = 2, cp = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0) extra = 3, cp = c & 0x07, min = 0x10000;
    else return false;
    if (i + static_cast<size_t>(extra) >= s.size()) return false;  // cut short
    for (int k = 1; k <= extra; ++k) {
      const auto b = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    if (extra > 0 && (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))) return false;
    i += static_cast<size_t>(extra) + 1;
  }
  return true;
}
}  // namespace

std::string YamlValue::as_string() const {
  const std::string& s = scalar("a string");
  if (s.empty()) fail("expected a non-empty string, got ''");
  if (!is_utf8(s)) fail("expected UTF-8 text (YAML files are UTF-8; a path with other bytes cannot be written back)");
  return s;
}

template <class T>
T YamlValue::as_number() const {
  static_assert(std::is_arithmetic_v<T>);
  const char* expected = std::is_floating_point_v<T> ? "a number"
                         : std::is_signed_v<T>       ? "an integer"
                                                     : "a non-negative integer";
  const std::string& s = plain_scalar(expected);
  const char* b = s.data();
  const char* e = b + s.size();
  if (b != e && *b == '+') ++b;
  T x{};
  auto r = std::from_chars(b, e, x);
  if constexpr (std::is_floating_point_v<T>) {
    // out of range is an overflow or an underflow (1e-50 as a float): say which
    if (r.ec == std::errc::result_out_of_range && r.ptr == e && std::abs(std::strtold(b, nullptr)) < 1)
      fail("expected a number a float holds, got " + describe() + ": too close to 0 (the smallest is about 1.2e-38; "
           "write 0 for zero)");
  }
  if (r.ec == std::errc::result_out_of_range || (r.ec == std::errc() && r.ptr == e && !std::isfinite(double(x))))
    fail(std::is_floating_point_v<T> ? "expected a finite number, got " + describe()
                                     : "integer out of range: " + describe());
  if (r.ec != std::errc() || r.ptr != e || b == e) fail(std::string("expected ") + expected + ", got " + describe());
  return x;
}

template int YamlValue::as_number<int>() const;
template int64_t YamlValue::as_number<int64_t>() const;
template uint64_t YamlValue::as_number<uint64_t>() const;
template float YamlValue::as_number<float>() const;
template double YamlValue::as_number<double>() const;

// ----------------------------------------------------------------- mappings

std::vector<std::pair<std::string, YamlValue>> YamlValue::entries() const {
  std::vector<std::pair<std::string, YamlValue>> out;
  if (is_null()) return out;
  if (!is_map()) fail("expected a mapping, got " + describe());
  std::set<std::string> seen;
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    const YAML::Node key = it->first;  // a copy: `it->` returns a temporary proxy
    if (!key.IsScalar()) child(key, path_, key.Mark().line).fail("keys must be plain names, got " + describe_node(key));
    YamlValue value = child(it->second, join_key(path_, key.Scalar()), key.Mark().line);
    if (!seen.insert(key.Scalar()).second) value.fail("duplicate key");
    out.emplace_back(key.Scalar(), std::move(value));
  }
  return out;
}

std::optional<YamlValue> YamlValue::find(const std::string& key) const {
  for (auto& [k, v] : entries())
    if (k == key) return v;
  return std::nullopt;
}

YamlValue YamlValue::get(const std::string& key) const {
  if (auto v = find(key)) return *v;
  fail_missing_key(key);
}

namespace {

void check_keys(const YamlValue& map, const std::vector<std::string>& known, const std::string& hint_start) {
  std::string list;
  for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
  for (auto& [k, v] : map.entries())
    if (std::find(known.begin(), known.end(), k) == known.end()) v.fail_unknown_key(" (" + hint_start + list + ")");
}

}  // namespace

void YamlValue::only_keys(std::initializer_list<const char*> known) const {
  check_keys(*this, std::vector<std::string>(known.begin(), known.end()), "known: ");
}

void YamlValue::only_keys(const std::vector<std::string>& known, const std::string& taker) const {
  check_keys(*this, known, taker + " takes: ");
}

// -------------------------------------------------------------------- lists

std::vector<YamlValue> YamlValue::items(const std::string& expected) const {
  if (!node_.IsSequence()) fail("expected " + expected + ", got " + describe());
  std::vector<YamlValue> out;
  for (size_t i = 0; i < node_.size(); ++i)
    out.push_back(child(node_[i], path_ + "[" + std::to_string(i) + "]", node_[i].Mark().line));
  return out;
}

std::vector<YamlValue> YamlValue::items(size_t count, const std::string& what) const {
  const std::string expected = "a list of " + std::to_string(count) + " " + what;
  std::vector<YamlValue> out = items(expected);
  if (out.size() != count) fail("expected " + expected + ", got " + std::to_string(out.size()) + " element(s)");
  return out;
}

namespace {

// Where the quoted scalar opening at text[at] closes, or npos. YAML's
// escapes: \" (and any \x) inside double quotes, '' inside single quotes.
size_t closing_quote(const std::string& text, size_t at) {
  const char q = text[at];
  for (size_t i = at + 1; i < text.size(); ++i) {
    if (q == '"' && text[i] == '\\') {
      ++i;
    } else if (text[i] == q) {
      if (q == '\'' && i + 1 < text.size() && text[i + 1] == '\'') {
        ++i;
        continue;
      }
      return i;
    }
  }
  return std::string::npos;
}

// The walk of a loaded document (aliases expanded) stops here: an alias
// inside its own anchor (a: &a [*a]) makes a cycle, and aliases of aliases
// grow exponentially (nine levels of nine: 387 million nodes); qat's largest
// files (a manifest of thousands of layers) hold a few hundred thousand.
constexpr int kMaxYamlDepth = 64;
constexpr int64_t kMaxYamlNodes = 2'000'000;

struct WalkBudget {
  int64_t nodes = 0;
};

void check_size(const YAML::Node& n, int depth, WalkBudget& budget, const std::string& file) {
  if (depth <= kMaxYamlDepth && ++budget.nodes <= kMaxYamlNodes) return;
  QAT_FAIL(file, ", line ", n.Mark().line + 1, ": the YAML ",
           depth > kMaxYamlDepth ? detail::cat("nests deeper than ", kMaxYamlDepth, " levels")
                                 : detail::cat("holds more than ", kMaxYamlNodes, " values"),
           " once its aliases (*name) are expanded: an alias inside its own anchor, or aliases of aliases?");
}

// Every node of n (aliases expanded), bounded by check_size; visit(node) on each.
template <class Visit>
void walk_bounded(const YAML::Node& n, int depth, WalkBudget& budget, const std::string& where, const Visit& visit) {
  check_size(n, depth, budget, where);
  visit(n);
  if (n.IsMap())
    for (auto it = n.begin(); it != n.end(); ++it)
      walk_bounded(it->first, depth + 1, budget, where, visit), walk_bounded(it->second, depth + 1, budget, where, visit);
  else if (n.IsSequence())
    for (auto it = n.begin(); it != n.end(); ++it) walk_bounded(*it, depth + 1, budget, where, visit);
}

// yaml-cpp takes a quoted value left open at the end of the file as running
// to the end (a trailing newline included) instead of failing: every quoted
// scalar must close.
void check_quote_closes(const YAML::Node& n, const std::string& text, const std::string& file) {
  if (!n.IsScalar() || n.Tag() != "!") return;  // "!": a quoted scalar
  const auto at = static_cast<size_t>(n.Mark().pos);
  if (at >= text.size() || (text[at] != '"' && text[at] != '\'')) return;
  QAT_CHECK(closing_quote(text, at) != std::string::npos, file, ", line ", n.Mark().line + 1,
            ": YAML syntax error: the quoted value starting here is never closed (a missing ", text[at], ")");
}

// The nodes a document holds, and where the first one is (yaml-cpp's parser events).
struct DocumentContent : YAML::EventHandler {
  int64_t nodes = 0;
  int first_line = -1;
  void seen(const YAML::Mark& m) {
    if (nodes++ == 0) first_line = m.line;
  }
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark& m, YAML::anchor_t) override { seen(m); }
  void OnScalar(const YAML::Mark& m, const std::string&, YAML::anchor_t, const std::string&) override { seen(m); }
  void OnSequenceStart(const YAML::Mark& m, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    seen(m);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& m, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    seen(m);
  }
  void OnMapEnd() override {}
};

// YAML::Load reads the first document only: a second one (after ---) would
// be ignored, its settings silently lost. The documents are walked here with
// a cap, not with YAML::LoadAll: on some malformed text (found by
// fuzz_config) yaml-cpp 0.7's parser stops advancing and hands out empty
// documents forever, and Load then drops the rest of the file unread.
void check_one_document(const std::string& text, const std::string& file) {
  constexpr int kMaxDocuments = 64;  // empty ones included (--- lines with nothing between)
  std::istringstream in(text);
  YAML::Parser parser(in);
  for (int doc = 0; doc < kMaxDocuments; ++doc) {
    DocumentContent c;
    if (!parser.HandleNextDocument(c)) return;
    QAT_CHECK(doc == 0 || c.nodes == 0, file, ", line ", c.first_line + 1, ": a second YAML document begins here "
              "(after a ---); a qat file is one document: merge the two or remove the ---");
  }
  QAT_FAIL(file, ": YAML syntax error: the YAML parser stops before the end of the file (past the first document) "
           "without naming a line; check its indentation and punctuation");
}

}  // namespace

void check_yaml_bounded(const YAML::Node& node, const std::string& where) {
  WalkBudget budget;
  walk_bounded(node, 0, budget, where, [](const YAML::Node&) {});
}

YamlValue load_yaml_file(const std::string& file) {
  const std::string text = read_text_file(file);
  YAML::Node root;
  try {
    root = YAML::Load(text);
    check_one_document(text, file);
  } catch (const YAML::ParserException& e) {
    QAT_FAIL(file, ", line ", e.mark.line + 1, ": YAML syntax error: ", e.msg);
  } catch (const YAML::Exception& e) {
    QAT_FAIL(file, ": YAML error: ", e.what());
  }
  WalkBudget budget;  // the first walk of every loaded file
  walk_bounded(root, 0, budget, file, [&](const YAML::Node& n) { check_quote_closes(n, text, file); });
  return YamlValue(root, file, "", 0);
}

}  // namespace qat::apps
