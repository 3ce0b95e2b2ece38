// cuBLAS and cuDNN handles, their error messages, workspaces and cuDNN
// descriptors (core/cuda_libraries.h). CUDA builds only: empty otherwise.
#if QAT_WITH_CUDA
#include "core/cuda_libraries.h"

#include "core/cuda_runtime.h"
#include "core/error.h"

namespace qat::cuda {

std::string cublas_error_message(cublasStatus_t s, const char* call, const char* file, int line) {
  return detail::cat(file, ":", line, ": ", call, ": ", cublasGetStatusName(s), " (", static_cast<int>(s),
                     "): ", cublasGetStatusString(s));
}

std::string cudnn_error_message(cudnnStatus_t s, const char* call, const char* file, int line) {
  // cuDNN 9 keeps a more precise account of its last failure on this thread
  // (e.g. which argument it refused); reading it clears it.
  char last[512] = {0};
  cudnnGetLastErrorString(last, sizeof last);
  std::string msg = detail::cat(file, ":", line, ": ", call, ": ", cudnnGetErrorString(s), " (",
                                static_cast<int>(s), ")");
  if (last[0] != '\0') msg += detail::cat(": ", last);
  return msg;
}

void throw_cublas_error(cublasStatus_t s, const char* call, const char* file, int line) {
  throw Error(cublas_error_message(s, call, file, line));
}

void throw_cudnn_error(cudnnStatus_t s, const char* call, const char* file, int line) {
  throw Error(cudnn_error_message(s, call, file, line));
}

namespace {

// The handles are never destroyed: tensors and the caching allocator may
// outlive static destruction, and the driver releases everything at exit.
// A stream of nullptr is the legacy default stream: qat's .cu files are
// compiled without per-thread default streams, and so are the libraries.
cublasHandle_t create_cublas_handle() {
  require("cuBLAS");
  cublasHandle_t h = nullptr;
  QAT_CUBLAS_CHECK(cublasCreate(&h));
  QAT_CUBLAS_CHECK(cublasSetStream(h, nullptr));
  // Note [FP32 on the GPU]: no TF32, no emulation, whatever the environment says.
  QAT_CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH));
  // cuBLAS's default, stated: no atomics, so a product's sums repeat bit for bit.
  QAT_CUBLAS_CHECK(cublasSetAtomicsMode(h, CUBLAS_ATOMICS_NOT_ALLOWED));
  // alpha and beta are host floats.
  QAT_CUBLAS_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
  return h;
}

cudnnHandle_t create_cudnn_handle() {
  require("cuDNN");
  cudnnHandle_t h = nullptr;
  QAT_CUDNN_CHECK(cudnnCreate(&h));
  QAT_CUDNN_CHECK(cudnnSetStream(h, nullptr));
  return h;
}

}  // namespace

LibraryVersions loaded_library_versions() {
  LibraryVersions v;
  QAT_CUBLAS_CHECK(cublasGetProperty(MAJOR_VERSION, &v.cublas_major));
  QAT_CUBLAS_CHECK(cublasGetProperty(MINOR_VERSION, &v.cublas_minor));
  QAT_CUBLAS_CHECK(cublasGetProperty(PATCH_LEVEL, &v.cublas_patch));
  v.cudnn = cudnnGetVersion();
  v.cudnn_cudart = cudnnGetCudartVersion();
  return v;
}

std::string describe_libraries() {
  const LibraryVersions v = loaded_library_versions();
  return detail::cat("cuBLAS ", v.cublas_major, ".", v.cublas_minor, ".", v.cublas_patch, " (built with ",
                     CUBLAS_VER_MAJOR, ".", CUBLAS_VER_MINOR, ".", CUBLAS_VER_PATCH, "), cuDNN ", v.cudnn,
                     " (built with ", CUDNN_VERSION, ", its CUDA runtime ", v.cudnn_cudart, ")");
}

cublasHandle_t cublas_handle() {
  static const cublasHandle_t h = create_cublas_handle();  // a throw leaves it to the next call
  return h;
}

cudnnHandle_t cudnn_handle() {
  static const cudnnHandle_t h = create_cudnn_handle();
  return h;
}

DeviceBuffer::DeviceBuffer(size_t nbytes) : p_(allocate(nbytes)), n_(nbytes) {}

DeviceBuffer::~DeviceBuffer() { deallocate(p_, n_); }

TensorDescriptor::TensorDescriptor(const int (&nchw)[4]) {
  QAT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d_));
  const cudnnStatus_t s =
      cudnnSetTensor4dDescriptor(d_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, nchw[0], nchw[1], nchw[2], nchw[3]);
  if (s != CUDNN_STATUS_SUCCESS) {
    const std::string what = detail::cat("cudnnSetTensor4dDescriptor(NCHW float, ", nchw[0], "x", nchw[1], "x",
                                         nchw[2], "x", nchw[3], ")");
    cudnnDestroyTensorDescriptor(d_);
    throw_cudnn_error(s, what.c_str(), __FILE__, __LINE__);
  }
}

TensorDescriptor::~TensorDescriptor() { cudnnDestroyTensorDescriptor(d_); }

FilterDescriptor::FilterDescriptor(const int (&kcrs)[4]) {
  QAT_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d_));
  const cudnnStatus_t s =
      cudnnSetFilter4dDescriptor(d_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, kcrs[0], kcrs[1], kcrs[2], kcrs[3]);
  if (s != CUDNN_STATUS_SUCCESS) {
    const std::string what = detail::cat("cudnnSetFilter4dDescriptor(NCHW float, ", kcrs[0], "x", kcrs[1], "x",
                                         kcrs[2], "x", kcrs[3], ")");
    cudnnDestroyFilterDescriptor(d_);
    throw_cudnn_error(s, what.c_str(), __FILE__, __LINE__);
  }
}

FilterDescriptor::~FilterDescriptor() { cudnnDestroyFilterDescriptor(d_); }

ConvolutionDescriptor::ConvolutionDescriptor(int pad_h, int pad_w, int stride_h, int stride_w, int dil_h, int dil_w,
                                             int groups) {
  QAT_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d_));
  try {
    QAT_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(d_, pad_h, pad_w, stride_h, stride_w, dil_h, dil_w,
                                                    CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    QAT_CUDNN_CHECK(cudnnSetConvolutionGroupCount(d_, groups));
    QAT_CUDNN_CHECK(cudnnSetConvolutionMathType(d_, CUDNN_FMA_MATH));  // Note [FP32 on the GPU]
  } catch (...) {
    cudnnDestroyConvolutionDescriptor(d_);
    throw;
  }
}

ConvolutionDescriptor::~ConvolutionDescriptor() { cudnnDestroyConvolutionDescriptor(d_); }

}  // namespace qat::cuda
#endif  // QAT_WITH_CUDA
