#pragma once
// The CUDA runtime layer (docs/cuda.md): whether this qat was built with
// CUDA and whether a usable GPU is present, device memory through a caching
// allocator, and copies between host and device. Compiled into every build;
// without CUDA (QAT_WITH_CUDA unset) everything that needs a GPU throws
// saying so, and the queries answer "no".
//
// Note [one GPU, one stream]: qat uses the CUDA runtime's current device
// (device 0 unless the process changed it) and the legacy default stream.
// Kernels and copies therefore run in the order they are issued, a block the
// allocator hands out again is only touched by work issued after the work
// that freed it, and a copy to the host returns once every kernel before it
// has finished. Kernels run asynchronously: a fault inside one surfaces at the
// next copy to the host or synchronize(), as the CUDA error of that call.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/error.h"

namespace qat::cuda {

// What allocate throws when the device has no room even after the cache was
// given back: a caller with a cheaper way (a convolution algorithm that
// needs less workspace) catches it and takes that way.
struct DeviceOutOfMemory : Error {
  using Error::Error;
};

// True when this qat was compiled with CUDA (QAT_CUDA=AUTO with the toolkit
// present at configure time, or QAT_CUDA=ON).
bool built();

struct DeviceInfo {
  bool usable = false;     // built, and the runtime reports at least one device
  int count = 0;           // devices the runtime reports
  std::string reason;      // why not usable; empty when usable
  std::string name;        // device 0 (when usable)
  int major = 0, minor = 0;  // its compute capability
  size_t total_memory = 0;   // its memory in bytes
};
// Asked of the runtime once (cudaGetDeviceCount, then device 0's properties)
// and remembered for the life of the process.
const DeviceInfo& device_info();
inline bool available() { return device_info().usable; }
// "NVIDIA H200, compute capability 9.0, 139.8 GiB" or the reason there is none.
std::string describe();

// "" when a device is usable; else the error require(what) throws:
//   "<what>: this qat was built without CUDA (...)" or
//   "<what>: no usable CUDA device: <reason>".
std::string unavailable_message(const std::string& what);
// The same for the given facts (built(), device_info()), for callers that test their own messages.
std::string unavailable_message(const std::string& what, bool is_built, const DeviceInfo& info);
void require(const std::string& what);

// Device memory, 256-byte aligned, from a cache of freed blocks keyed by
// (rounded) size: cudaMalloc synchronises the device and costs far more than
// a kernel, and a training step frees and allocates the same sizes every
// iteration. allocate(0) returns nullptr. allocate throws (require()) without
// a device; when the device is out of memory it returns the cache to the
// device and tries once more before throwing DeviceOutOfMemory with the sizes.
void* allocate(size_t nbytes);
void deallocate(void* p, size_t nbytes) noexcept;

struct DeviceAllocatorStats {
  size_t cached_bytes = 0;      // freed blocks held for reuse
  size_t live_bytes = 0;        // handed out and not yet freed
  size_t peak_live_bytes = 0;
  uint64_t device_mallocs = 0;  // cudaMalloc calls so far (a cache hit makes none)
};
DeviceAllocatorStats allocator_stats();
// Gives every cached block back to the device (cudaFree).
void release_cached_memory();

// Copies nbytes between any two places (host<->device, device->device, or
// host->host). Returns once the bytes are in place when dst is the host;
// copies to the device are ordered before later kernels (Note [one GPU, one stream]).
void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);
void memset_zero(void* p, size_t nbytes);  // device memory
// Waits for every kernel and copy issued so far; throws the first error one of them hit.
void synchronize();

}  // namespace qat::cuda
