#pragma once
// std::vector whose buffer starts on a 64-byte boundary (a cache line, and
// the row size of an AMX tile and of a zmm register). A buffer that kernels
// read in 64-byte rows must start on one: glibc's malloc aligns to 16 only,
// and every such row then straddles two cache lines (measured on a Sapphire
// Rapids core: AMX tile loads of misaligned A and B ran the int8 GEMM's
// inner loop at 0.36x the aligned speed).
#include <cstddef>
#include <vector>

#include "core/allocator.h"

namespace qat {

template <class T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) noexcept {}
  // The tensors' allocator: 64-byte aligned blocks, large ones cached.
  T* allocate(size_t n) { return static_cast<T*>(cpu_allocate(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { cpu_free(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const CacheLineAllocator<U>&) const noexcept {
    return true;
  }
};

template <class T>
using AlignedVector = std::vector<T, CacheLineAllocator<T>>;

}  // namespace qat
