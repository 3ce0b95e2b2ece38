#pragma once
// cuBLAS and cuDNN for the library-backed CUDA twins (linear and matmul on
// cuBLAS, conv2d and batch_norm on cuDNN; docs/cuda.md). CUDA builds only.
//
// One handle of each library, created on first use and kept for the life of
// the process, bound to the legacy default stream (Note [one GPU, one stream]
// in core/cuda_runtime.h): library calls run in issue order with qat's own
// kernels and copies, so a block the caching allocator hands out again is
// only touched after the work that freed it. Like the rest of the CUDA layer,
// the handles are for one host thread at a time (the training step's).
//
// Note [FP32 on the GPU]: float32 ops compute in real FP32, never TF32 or
// another reduced-precision emulation: the twins must agree with the CPU ops
// (whose FP32 sgemm and loops are the reference every parity test compares
// with) to within float rounding, and TF32's 10-bit mantissa would put
// differences of ~1e-3 relative into every product, far beyond the float-sum
// bounds the tests allow and visible in QAT's rounding to the grid. So cuBLAS
// runs in CUBLAS_PEDANTIC_MATH (FP32 throughout, whatever NVIDIA_TF32_OVERRIDE
// or the emulation settings of the environment say; core/ reads no
// environment switches, docs/conventions.md convention 5), and every cuDNN convolution
// in CUDNN_FMA_MATH (FMA kernels only, no tensor cores); cuDNN's batch norm
// has no math type and computes in float.
#if !QAT_WITH_CUDA
#error "core/cuda_libraries.h is for CUDA builds (QAT_WITH_CUDA)"
#endif
#include <cublas_v2.h>
#include <cudnn.h>

#include <cstddef>
#include <string>

namespace qat::cuda {

// The handles; the first call needs a usable GPU (cuda::require) and creates
// the handle on the legacy default stream, with the math mode above.
cublasHandle_t cublas_handle();
cudnnHandle_t cudnn_handle();

// The libraries as loaded and as built against, e.g. "cuBLAS 13.0.0 (built
// with 13.0.0), cuDNN 91400 (built with 91400, its CUDA runtime 13000)": a
// GPU machine may carry other versions than the build machine. Host calls:
// no GPU needed.
struct LibraryVersions {
  int cublas_major = 0, cublas_minor = 0, cublas_patch = 0;
  size_t cudnn = 0, cudnn_cudart = 0;
};
LibraryVersions loaded_library_versions();
std::string describe_libraries();

// "<file>:<line>: <call>: <status name> (<code>): <library's text>" (cuDNN:
// and the detail of cudnnGetLastErrorString when it has any).
std::string cublas_error_message(cublasStatus_t s, const char* call, const char* file, int line);
std::string cudnn_error_message(cudnnStatus_t s, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t s, const char* call, const char* file, int line);
[[noreturn]] void throw_cudnn_error(cudnnStatus_t s, const char* call, const char* file, int line);

// Scratch device memory (a cuDNN workspace) from the caching allocator,
// returned to it when the object goes (the work that uses it is issued
// before, Note [one GPU, one stream]). Zero bytes: a null pointer.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t nbytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

// cuDNN descriptors, destroyed with the object.
class TensorDescriptor {
 public:
  // A packed NCHW float tensor.
  explicit TensorDescriptor(const int (&nchw)[4]);
  ~TensorDescriptor();
  TensorDescriptor(const TensorDescriptor&) = delete;
  TensorDescriptor& operator=(const TensorDescriptor&) = delete;
  cudnnTensorDescriptor_t get() const { return d_; }

 private:
  cudnnTensorDescriptor_t d_ = nullptr;
};

class FilterDescriptor {
 public:
  // A packed KCRS (O, C/groups, KH, KW) float filter.
  explicit FilterDescriptor(const int (&kcrs)[4]);
  ~FilterDescriptor();
  FilterDescriptor(const FilterDescriptor&) = delete;
  FilterDescriptor& operator=(const FilterDescriptor&) = delete;
  cudnnFilterDescriptor_t get() const { return d_; }

 private:
  cudnnFilterDescriptor_t d_ = nullptr;
};

class ConvolutionDescriptor {
 public:
  // Cross-correlation (as PyTorch and the CPU op) in float, CUDNN_FMA_MATH.
  ConvolutionDescriptor(int pad_h, int pad_w, int stride_h, int stride_w, int dil_h, int dil_w, int groups);
  ~ConvolutionDescriptor();
  ConvolutionDescriptor(const ConvolutionDescriptor&) = delete;
  ConvolutionDescriptor& operator=(const ConvolutionDescriptor&) = delete;
  cudnnConvolutionDescriptor_t get() const { return d_; }

 private:
  cudnnConvolutionDescriptor_t d_ = nullptr;
};

}  // namespace qat::cuda

#define QAT_CUBLAS_CHECK(call)                                                                          \
  do {                                                                                                  \
    const cublasStatus_t qat_cublas_status_ = (call);                                                   \
    if (qat_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                                    \
      ::qat::cuda::throw_cublas_error(qat_cublas_status_, #call, __FILE__, __LINE__);                   \
  } while (0)

#define QAT_CUDNN_CHECK(call)                                                                           \
  do {                                                                                                  \
    const cudnnStatus_t qat_cudnn_status_ = (call);                                                     \
    if (qat_cudnn_status_ != CUDNN_STATUS_SUCCESS)                                                      \
      ::qat::cuda::throw_cudnn_error(qat_cudnn_status_, #call, __FILE__, __LINE__);                     \
  } while (0)
