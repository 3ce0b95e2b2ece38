#pragma once
// qat::Error and QAT_CHECK: every failed check names the op, what it expected
// and the values/shapes it got (docs/conventions.md, convention 4).
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace qat {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& s);

inline std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << shape_str(s); }

namespace detail {
template <class... A>
std::string cat(const A&... a) {
  std::ostringstream os;
  (os << ... << a);
  return os.str();
}
}  // namespace detail

}  // namespace qat

#define QAT_CHECK(cond, ...)                                       \
  do {                                                             \
    if (!(cond)) throw ::qat::Error(::qat::detail::cat(__VA_ARGS__)); \
  } while (0)

#define QAT_FAIL(...) throw ::qat::Error(::qat::detail::cat(__VA_ARGS__))
