// The key paths of config_schema::fields() and suggestions for unknown keys.
#include <algorithm>
#include <cstdint>
#include <set>

#include "apps/config_schema.h"

namespace qat::apps::config_schema {

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  std::string cur;
  for (char ch : path) {
    if (ch == '.') {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  parts.push_back(cur);
  return parts;
}

std::string parent_of(const std::string& path) {
  auto dot = path.rfind('.');
  return dot == std::string::npos ? std::string() : path.substr(0, dot);
}

namespace {

std::string last_of(const std::string& path) {
  auto dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

struct Keys {
  std::set<std::string> leaves, sections;
  Keys() {
    for (auto& f : fields()) {
      leaves.insert(f.path);
      for (std::string p = parent_of(f.path); !p.empty(); p = parent_of(p)) sections.insert(p);
    }
  }
};

const Keys& keys() {
  static const Keys k;
  return k;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The known key closest to `path`: 1. a near miss among its siblings; 2. the
// same name in another section; 3. a near miss anywhere. Empty if none.
std::string closest_key(const std::string& path) {
  const Keys& k = keys();
  const std::string parent = parent_of(path), name = last_of(path);
  auto close = [&](const std::string& cand) {
    size_t d = edit_distance(name, cand);
    return d <= 2 && d * 3 <= std::max(name.size(), cand.size());
  };
  std::string best;
  size_t best_d = SIZE_MAX;
  for (auto& c : keys_in(parent))
    if (close(c) && edit_distance(name, c) < best_d) {
      best_d = edit_distance(name, c);
      best = parent.empty() ? c : parent + "." + c;
    }
  if (best.empty())
    for (auto* set : {&k.leaves, &k.sections})
      for (auto& p : *set)
        if (last_of(p) == name && best.empty()) best = p;
  if (best.empty())
    for (auto* set : {&k.leaves, &k.sections})
      for (auto& p : *set)
        if (close(last_of(p)) && edit_distance(name, last_of(p)) < best_d) {
          best_d = edit_distance(name, last_of(p));
          best = p;
        }
  return best;
}

}  // namespace

bool is_leaf(const std::string& path) { return keys().leaves.count(path) > 0; }
bool is_section(const std::string& path) { return keys().sections.count(path) > 0; }
bool is_key(const std::string& path) { return is_leaf(path) || is_section(path); }

std::vector<std::string> keys_in(const std::string& section) {
  std::vector<std::string> out;
  for (auto* set : {&keys().sections, &keys().leaves})
    for (auto& p : *set)
      if (parent_of(p) == section) out.push_back(last_of(p));
  return out;
}

std::string suggestion(const std::string& path) {
  if (std::string best = closest_key(path); !best.empty()) return " (did you mean '" + best + "'?)";
  const std::string parent = parent_of(path);
  if (!parent.empty() && !is_section(parent)) return "";
  std::string known;
  for (auto& c : keys_in(parent)) known += (known.empty() ? "" : ", ") + c;
  return " (known keys" + (parent.empty() ? std::string() : " in '" + parent + "'") + ": " + known + ")";
}

}  // namespace qat::apps::config_schema
