#pragma once
// Helpers of the GPU tests (tag [cuda]).
//
// cuda_device_or_skip(): true when a CUDA device is usable. Otherwise the
// test prints "skipped: <reason>" (WARN) and gets false, so it asserts only
// what holds without a GPU; under QAT_REQUIRE_GPU=1 (scripts/gpu_check.sh)
// a missing GPU fails the test instead: a GPU machine whose GPU qat cannot
// see must not pass by skipping.
//
// CudaOrLabelled: a tensor on cuda, for the checks that refuse a device
// tensor. With a GPU it is a real copy on the device. Without one it is a
// CPU tensor whose storage is *labelled* cuda for the object's lifetime (the
// label is put back before the storage is freed): the refusals look at the
// label only, so they are checked on every machine. Only for calls that must
// refuse before touching memory; nothing may keep a view of it.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "core/cuda_runtime.h"
#include "core/tensor.h"

namespace qat::testing {

inline bool gpu_required() {
  const char* v = std::getenv("QAT_REQUIRE_GPU");
  return v != nullptr && std::string(v) == "1";
}

inline std::string no_gpu_reason() {
  return cuda::built() ? "no CUDA device: " + cuda::device_info().reason : "this qat was built without CUDA";
}

inline bool cuda_device_or_skip() {
  if (cuda::available()) return true;
  if (gpu_required()) FAIL("QAT_REQUIRE_GPU=1 but there is " << no_gpu_reason());
  WARN("skipped: " << no_gpu_reason());
  return false;
}

struct CudaOrLabelled {
  explicit CudaOrLabelled(const Tensor& cpu) : labelled(!cuda::available()) {
    if (labelled) {
      t = cpu.clone();
      t.impl_ptr()->storage->device = Device::cuda;
    } else {
      t = cpu.to(Device::cuda);
    }
  }
  ~CudaOrLabelled() {
    if (labelled) t.impl_ptr()->storage->device = Device::cpu;
  }
  CudaOrLabelled(const CudaOrLabelled&) = delete;
  CudaOrLabelled& operator=(const CudaOrLabelled&) = delete;
  Tensor t;
  bool labelled;
};

}  // namespace qat::testing
