#pragma once
// CPU memory for tensor storage: 64-byte aligned blocks, with a cache of
// freed large blocks keyed by size. A training step allocates the same sizes
// every iteration; without the cache every large block is a fresh mmap that
// the kernel must fault in and zero (measured: a large share of an AlexNet
// step), and glibc never keeps blocks above its 32 MiB mmap threshold.
#include <cstddef>

namespace qat {

void* cpu_allocate(size_t nbytes);
void cpu_free(void* p, size_t nbytes);

struct AllocatorStats {
  size_t cached_bytes;   // held in the cache, ready for reuse
  size_t live_bytes;     // handed out and not yet freed (all sizes)
  size_t peak_live_bytes;
};
AllocatorStats allocator_stats();
// Returns every cached block to the system.
void release_cached_memory();

}  // namespace qat
