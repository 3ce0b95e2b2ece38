#include "core/allocator.h"

#include <sys/mman.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "core/error.h"

namespace qat {

namespace {

constexpr size_t kAlign = 64;
constexpr size_t kCacheMin = 256 * 1024;         // smaller blocks: plain malloc is fast
constexpr size_t kCacheLimit = size_t{3} << 30;  // never hold more than 3 GiB of free blocks
constexpr size_t kHugePage = size_t{2} << 20;

// Note [huge pages for large blocks]: a block of at least 2 MiB starts on a
// 2 MiB boundary and is offered to the kernel's transparent huge pages
// (madvise: where THP is "madvise", as on many servers, nothing else gets
// them). The passes over activations (batch norm, relu6, depthwise) then
// walk one TLB entry per 2 MiB instead of per 4 KiB. A refusal (THP off, or
// another OS) leaves ordinary pages: nothing else changes. MobileNetV2 at
// 32 px, FP32 step on 2 threads (Zen 5): 215-220 -> 206-208 ms.
void* allocate_fresh(size_t n) {
  if (n < kHugePage) return std::aligned_alloc(kAlign, n);
  void* p = nullptr;
  if (posix_memalign(&p, kHugePage, n) != 0) return nullptr;
#ifdef MADV_HUGEPAGE
  madvise(p, n, MADV_HUGEPAGE);
#endif
  return p;
}

struct Cache {
  std::mutex mu;
  std::multimap<size_t, void*> free_blocks;  // rounded size -> block
  size_t cached = 0;
};

Cache& cache() {
  static Cache* c = new Cache();  // never destroyed: storages may outlive static destruction
  return *c;
}

std::atomic<size_t> g_live{0}, g_peak{0};

size_t round_size(size_t n) { return ((n == 0 ? 1 : n) + kAlign - 1) / kAlign * kAlign; }

void note_alloc(size_t n) {
  const size_t live = g_live.fetch_add(n) + n;
  size_t peak = g_peak.load();
  while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
  }
}

}  // namespace

void* cpu_allocate(size_t nbytes) {
  const size_t n = round_size(nbytes);
  note_alloc(n);
  if (n >= kCacheMin) {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.free_blocks.find(n);
    if (it != c.free_blocks.end()) {
      void* p = it->second;
      c.free_blocks.erase(it);
      c.cached -= n;
      return p;
    }
  }
  void* p = allocate_fresh(n);
  if (!p) {
    release_cached_memory();
    p = allocate_fresh(n);
  }
  QAT_CHECK(p != nullptr, "allocator: out of memory allocating ", nbytes, " bytes");
  return p;
}

void cpu_free(void* p, size_t nbytes) {
  if (!p) return;
  const size_t n = round_size(nbytes);
  g_live.fetch_sub(n);
  if (n >= kCacheMin) {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    if (c.cached + n <= kCacheLimit) {
      c.free_blocks.emplace(n, p);
      c.cached += n;
      return;
    }
  }
  std::free(p);
}

AllocatorStats allocator_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return {c.cached, g_live.load(), g_peak.load()};
}

void release_cached_memory() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  for (auto& [n, p] : c.free_blocks) std::free(p);
  c.free_blocks.clear();
  c.cached = 0;
}

}  // namespace qat
