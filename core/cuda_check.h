#pragma once
// QAT_CUDA_CHECK(call): runs a CUDA runtime call and throws qat::Error naming
// the file:line, the call, and the CUDA error's name and text when it fails
// (docs/conventions.md, convention 4). CUDA builds only: includes the runtime's header.
#if !QAT_WITH_CUDA
#error "core/cuda_check.h is for CUDA builds (QAT_WITH_CUDA); include core/cuda_runtime.h instead"
#endif
#include <cuda_runtime_api.h>

#include <string>

namespace qat::cuda {

// "<file>:<line>: <call>: <cudaErrorName> (<code>): <cudaGetErrorString>".
std::string error_message(cudaError_t e, const char* call, const char* file, int line);
// Throws qat::Error with error_message(); first clears the runtime's
// last-error slot, so that the next check does not report this error again.
[[noreturn]] void throw_error(cudaError_t e, const char* call, const char* file, int line);

}  // namespace qat::cuda

#define QAT_CUDA_CHECK(call)                                                                    \
  do {                                                                                          \
    const cudaError_t qat_cuda_err_ = (call);                                                   \
    if (qat_cuda_err_ != cudaSuccess) ::qat::cuda::throw_error(qat_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch (<<<...>>>): a bad launch configuration or a missing
// kernel image. A fault inside the kernel surfaces later (Note [one GPU, one stream]).
#define QAT_CUDA_CHECK_LAUNCH(kernel)                                                           \
  do {                                                                                          \
    const cudaError_t qat_cuda_err_ = cudaGetLastError();                                       \
    if (qat_cuda_err_ != cudaSuccess)                                                           \
      ::qat::cuda::throw_error(qat_cuda_err_, "launch of " #kernel, __FILE__, __LINE__);        \
  } while (0)
