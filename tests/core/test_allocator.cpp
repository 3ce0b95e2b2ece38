// The CPU allocator (core/allocator.h): blocks of 2 MiB and more start on a
// 2 MiB boundary, where transparent huge pages can back them (Note [huge
// pages for large blocks]); smaller ones on 64 bytes; freed large blocks are
// reused.
#include <cstdint>
#include <cstring>

#include "core/allocator.h"
#include "tests/test_util.h"

using namespace qat;

namespace {
uintptr_t address(const void* p) { return reinterpret_cast<uintptr_t>(p); }
}  // namespace

TEST_CASE("allocator: large blocks start on a 2 MiB boundary, small ones on 64 bytes", "[allocator]") {
  constexpr size_t kMiB = size_t{1} << 20;
  for (const size_t n : {2 * kMiB, 3 * kMiB + 12345, 17 * kMiB}) {
    void* p = cpu_allocate(n);
    CHECK(address(p) % (2 * kMiB) == 0);
    std::memset(p, 1, n);  // all of it is ours
    cpu_free(p, n);
  }
  for (const size_t n : {size_t{1}, size_t{1000}, 256 * size_t{1024}, 2 * kMiB - 64}) {
    void* p = cpu_allocate(n);
    CHECK(address(p) % 64 == 0);
    std::memset(p, 1, n);
    cpu_free(p, n);
  }
}

TEST_CASE("allocator: a freed large block is handed out again for the same size", "[allocator]") {
  const size_t n = (size_t{5} << 20) + 64;
  void* p = cpu_allocate(n);
  cpu_free(p, n);
  void* q = cpu_allocate(n);
  CHECK(q == p);
  CHECK(address(q) % (size_t{2} << 20) == 0);
  cpu_free(q, n);
}
