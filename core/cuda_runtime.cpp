#include "core/cuda_runtime.h"

#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

#include "core/error.h"

#if QAT_WITH_CUDA
#include "core/cuda_check.h"
#endif

namespace qat::cuda {

bool built() {
#if QAT_WITH_CUDA
  return true;
#else
  return false;
#endif
}

#if QAT_WITH_CUDA

std::string error_message(cudaError_t e, const char* call, const char* file, int line) {
  return detail::cat(file, ":", line, ": ", call, ": ", cudaGetErrorName(e), " (", static_cast<int>(e),
                     "): ", cudaGetErrorString(e));
}

void throw_error(cudaError_t e, const char* call, const char* file, int line) {
  (void)cudaGetLastError();  // a non-sticky error stays in the last-error slot otherwise
  throw Error(error_message(e, call, file, line));
}

namespace {

DeviceInfo query_device() {
  DeviceInfo d;
  const cudaError_t e = cudaGetDeviceCount(&d.count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    d.count = 0;
    d.reason = detail::cat("cudaGetDeviceCount failed: ", cudaGetErrorName(e), ": ", cudaGetErrorString(e));
    return d;
  }
  if (d.count == 0) {
    d.reason = "cudaGetDeviceCount reports no device";
    return d;
  }
  int dev = 0;
  cudaDeviceProp p{};
  const cudaError_t pe = cudaGetDevice(&dev) == cudaSuccess ? cudaGetDeviceProperties(&p, dev) : cudaGetLastError();
  if (pe != cudaSuccess) {
    (void)cudaGetLastError();
    d.reason = detail::cat("cudaGetDeviceProperties failed: ", cudaGetErrorName(pe), ": ", cudaGetErrorString(pe));
    return d;
  }
  d.usable = true;
  d.name = p.name;
  d.major = p.major;
  d.minor = p.minor;
  d.total_memory = p.totalGlobalMem;
  return d;
}

// Note [device block cache]: freed blocks kept by size rounded up to 512
// bytes, reused only for a request of the same rounded size (a training step
// repeats its sizes). Never destroyed: tensors may outlive static destruction,
// and the driver returns the memory at exit.
constexpr size_t kRound = 512;
size_t round_size(size_t n) { return (n + kRound - 1) / kRound * kRound; }

struct Cache {
  std::mutex mu;
  std::multimap<size_t, void*> free_blocks;  // rounded size -> block
  DeviceAllocatorStats stats;
};

Cache& cache() {
  static Cache* c = new Cache();
  return *c;
}

void release_locked(Cache& c) {
  for (auto& [n, p] : c.free_blocks) (void)cudaFree(p);  // nothing useful to do with a failure here
  (void)cudaGetLastError();
  c.free_blocks.clear();
  c.stats.cached_bytes = 0;
}

}  // namespace

const DeviceInfo& device_info() {
  static const DeviceInfo info = query_device();
  return info;
}

void* allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  require("cuda allocator");
  const size_t n = round_size(nbytes);
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  void* p = nullptr;
  auto it = c.free_blocks.find(n);
  if (it != c.free_blocks.end()) {
    p = it->second;
    c.free_blocks.erase(it);
    c.stats.cached_bytes -= n;
  } else {
    cudaError_t e = cudaMalloc(&p, n);
    ++c.stats.device_mallocs;
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      const size_t cached = c.stats.cached_bytes;
      release_locked(c);
      e = cudaMalloc(&p, n);
      ++c.stats.device_mallocs;
      if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        throw DeviceOutOfMemory(error_message(e,
                                              detail::cat("cudaMalloc(", n, " bytes) with ", c.stats.live_bytes,
                                                          " bytes live and ", cached, " cached bytes released")
                                                  .c_str(),
                                              __FILE__, __LINE__));
      }
    }
    if (e != cudaSuccess) throw_error(e, detail::cat("cudaMalloc(", n, " bytes)").c_str(), __FILE__, __LINE__);
  }
  c.stats.live_bytes += n;
  if (c.stats.live_bytes > c.stats.peak_live_bytes) c.stats.peak_live_bytes = c.stats.live_bytes;
  return p;
}

void deallocate(void* p, size_t nbytes) noexcept {
  if (!p) return;
  const size_t n = round_size(nbytes);
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.stats.live_bytes -= n;
  try {
    c.free_blocks.emplace(n, p);
  } catch (...) {  // no host memory for the cache's node (noexcept: called from ~Storage)
    (void)cudaFree(p);
    (void)cudaGetLastError();
    return;
  }
  c.stats.cached_bytes += n;
}

DeviceAllocatorStats allocator_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.stats;
}

void release_cached_memory() {
  if (!available()) return;  // nothing was ever cached
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  release_locked(c);
}

// Copies touching the device (copy() below handles host to host).
static void device_copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  const cudaMemcpyKind kind = dst_device == Device::cpu   ? cudaMemcpyDeviceToHost
                              : src_device == Device::cpu ? cudaMemcpyHostToDevice
                                                          : cudaMemcpyDeviceToDevice;
  QAT_CUDA_CHECK(cudaMemcpy(dst, src, nbytes, kind));
}

void memset_zero(void* p, size_t nbytes) {
  if (nbytes == 0) return;
  require("cuda memset");
  QAT_CUDA_CHECK(cudaMemset(p, 0, nbytes));
}

void synchronize() {
  require("cuda synchronize");
  QAT_CUDA_CHECK(cudaDeviceSynchronize());
}

#else  // !QAT_WITH_CUDA: the queries say no, everything else throws.

const DeviceInfo& device_info() {
  static const DeviceInfo info = [] {
    DeviceInfo d;
    d.reason = "this qat was built without CUDA";
    return d;
  }();
  return info;
}

void* allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  require("cuda allocator");
  return nullptr;
}

void deallocate(void*, size_t) noexcept {}

DeviceAllocatorStats allocator_stats() { return {}; }

void release_cached_memory() {}

static void device_copy(void*, Device, const void*, Device, size_t) {}  // unreachable: require() threw

void memset_zero(void*, size_t nbytes) {
  if (nbytes != 0) require("cuda memset");
}

void synchronize() { require("cuda synchronize"); }

#endif

void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  if (nbytes == 0) return;
  if (dst_device == Device::cpu && src_device == Device::cpu) {
    std::memmove(dst, src, nbytes);
    return;
  }
  require("cuda copy");
  device_copy(dst, dst_device, src, src_device, nbytes);
}

std::string describe() {
  const DeviceInfo& d = device_info();
  if (!d.usable) return "no usable CUDA device: " + d.reason;
  char mem[32];
  std::snprintf(mem, sizeof mem, "%.1f GiB", static_cast<double>(d.total_memory) / (1024.0 * 1024.0 * 1024.0));
  return detail::cat(d.name, ", compute capability ", d.major, ".", d.minor, ", ", mem, " (", d.count,
                     d.count == 1 ? " device" : " devices", ")");
}

std::string unavailable_message(const std::string& what, bool is_built, const DeviceInfo& info) {
  if (!is_built)
    return what +
           ": this qat was built without CUDA (configure with -DQAT_CUDA=ON, or AUTO where the CUDA toolkit is "
           "installed)";
  if (!info.usable) return what + ": no usable CUDA device: " + info.reason;
  return "";
}

std::string unavailable_message(const std::string& what) { return unavailable_message(what, built(), device_info()); }

void require(const std::string& what) {
  std::string msg = unavailable_message(what);
  if (!msg.empty()) throw Error(std::move(msg));
}

}  // namespace qat::cuda
