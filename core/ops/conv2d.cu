// The CUDA twin of conv2d (core/ops/conv2d.cpp) on cuDNN: forward, backward
// data, backward filter, the bias added and its gradient; groups, stride,
// padding and dilation as Conv2dParams give them. The descriptors' numbers
// come from cuda_plan::plan_conv2d and the algorithm order from
// cuda_plan::order_conv_algorithms (both tested on the CPU); every
// convolution runs in CUDNN_FMA_MATH (Note [FP32 on the GPU]).
#include <optional>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/cuda_libraries.h"
#include "core/cuda_runtime.h"
#include "core/ops/common.h"
#include "core/ops/cuda_plans.h"
#include "core/ops/cuda_twins.h"

namespace qat::cuda_twin {

namespace {

using cuda_plan::ConvAlgoCandidate;
using cuda_plan::ConvPlan;

// The descriptors of one convolution. cuDNN must compute the output size the
// CPU op does (conv_out_size): checked, so that a descriptor mistake fails
// here rather than writing a wrongly shaped result.
struct ConvDescriptors {
  explicit ConvDescriptors(const ConvPlan& p)
      : x(p.x), y(p.y), bias(p.bias), w(p.w),
        conv(p.pad_h, p.pad_w, p.stride_h, p.stride_w, p.dil_h, p.dil_w, p.groups) {
    int n = 0, c = 0, h = 0, wd = 0;
    QAT_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(conv.get(), x.get(), w.get(), &n, &c, &h, &wd));
    QAT_CHECK(n == p.y[0] && c == p.y[1] && h == p.y[2] && wd == p.y[3], "conv2d on cuda: cuDNN computes an output ",
              n, "x", c, "x", h, "x", wd, " where the CPU op computes ", p.y[0], "x", p.y[1], "x", p.y[2], "x",
              p.y[3]);
  }
  cuda::TensorDescriptor x, y, bias;
  cuda::FilterDescriptor w;
  cuda::ConvolutionDescriptor conv;
};

// "Not supported" for this algorithm under these settings: try the next one.
// The category also holds setup failures (a sub-library, the driver or the
// runtime missing: 3005-3009 in cudnn_graph.h), which no other algorithm
// would get past: those throw at once.
bool not_supported(cudnnStatus_t s) {
  if (CUDNN_STATUS_CATEGORY(s) != CUDNN_STATUS_NOT_SUPPORTED) return false;
  switch (s) {
    case CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING:
    case CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE:
    case CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER:
    case CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART:
    case CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH:
      return false;
    default:
      return true;
  }
}

// The FFT and Winograd algorithms of each direction (Note [FP32 on the GPU]).
bool transform_based(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}
bool transform_based(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
bool transform_based(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

// The heuristic's list (cudnnGetConvolution*Algorithm_v7), as candidates.
template <class Perf>
std::vector<ConvAlgoCandidate> candidates_of(const Perf* perf, int count) {
  std::vector<ConvAlgoCandidate> out;
  for (int i = 0; i < count; ++i)
    out.push_back({static_cast<int>(perf[i].algo), perf[i].status == CUDNN_STATUS_SUCCESS,
                   perf[i].mathType == CUDNN_TENSOR_OP_MATH ||
                       perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION,
                   perf[i].determinism == CUDNN_DETERMINISTIC, transform_based(perf[i].algo)});
  return out;
}

std::string list_algorithms(const std::vector<ConvAlgoCandidate>& listed) {
  std::string s;
  for (const ConvAlgoCandidate& c : listed)
    s += detail::cat(s.empty() ? "" : ", ", c.algo, c.status_ok ? "" : " (status not ok)",
                     c.tensor_op_math ? " (tensor-op math)" : "", c.transform_based ? " (FFT/Winograd)" : "");
  return s.empty() ? "none" : s;
}

// Runs `what` with the first algorithm of the ordered list that cuDNN
// accepts: workspace(algo, &bytes) sizes its workspace, run(algo, workspace,
// bytes) runs it. An algorithm cuDNN answers "not supported" for (under
// CUDNN_FMA_MATH, say), or whose workspace the device has no room for (the
// GEMM algorithms can ask for gigabytes at a large batch, where implicit GEMM
// needs none), is skipped; any other failure throws.
template <class Workspace, class Run>
void run_first_accepted(const char* what, const std::vector<ConvAlgoCandidate>& listed, Workspace workspace,
                        Run run) {
  std::string skipped;  // each algorithm cuDNN declined, with its answer, for the error below
  auto skip = [&](int algo, const char* stage, const std::string& why) {
    skipped += detail::cat(skipped.empty() ? "" : "; ", algo, " (", stage, ": ", why, ")");
  };
  for (const int algo : cuda_plan::order_conv_algorithms(listed)) {
    size_t bytes = 0;
    const cudnnStatus_t ws = workspace(algo, &bytes);
    if (not_supported(ws)) {
      skip(algo, "workspace size", cudnnGetErrorString(ws));
      continue;
    }
    if (ws != CUDNN_STATUS_SUCCESS)
      cuda::throw_cudnn_error(ws, detail::cat(what, ": workspace size of algorithm ", algo).c_str(), __FILE__,
                              __LINE__);
    std::optional<cuda::DeviceBuffer> buffer;
    try {
      buffer.emplace(bytes);
    } catch (const cuda::DeviceOutOfMemory&) {
      skip(algo, "workspace", detail::cat("no room on the device for ", bytes, " bytes"));
      continue;
    }
    const cudnnStatus_t s = run(algo, buffer->get(), bytes);
    if (not_supported(s)) {
      skip(algo, "run", cudnnGetErrorString(s));
      continue;
    }
    if (s != CUDNN_STATUS_SUCCESS)
      cuda::throw_cudnn_error(s, detail::cat(what, " with algorithm ", algo).c_str(), __FILE__, __LINE__);
    return;
  }
  QAT_FAIL("conv2d on cuda: cuDNN runs none of the FP32 (FMA, no FFT/Winograd) algorithms its heuristic lists for ", what,
           "; listed: ", list_algorithms(listed), "; declined: ", skipped.empty() ? "none tried" : skipped);
}

const float kOne = 1.f, kZero = 0.f;

void forward(const ConvDescriptors& d, const float* x, const float* w, float* y) {
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int count = 0;
  const cudnnHandle_t h = cuda::cudnn_handle();
  QAT_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x.get(), d.w.get(), d.conv.get(), d.y.get(),
                                                         CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf));
  run_first_accepted(
      "cudnnConvolutionForward", candidates_of(perf, count),
      [&](int algo, size_t* bytes) {
        return cudnnGetConvolutionForwardWorkspaceSize(h, d.x.get(), d.w.get(), d.conv.get(), d.y.get(),
                                                       static_cast<cudnnConvolutionFwdAlgo_t>(algo), bytes);
      },
      [&](int algo, void* ws, size_t bytes) {
        return cudnnConvolutionForward(h, &kOne, d.x.get(), x, d.w.get(), w, d.conv.get(),
                                       static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws, bytes, &kZero, d.y.get(), y);
      });
}

void backward_data(const ConvDescriptors& d, const float* w, const float* dy, float* dx) {
  cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  int count = 0;
  const cudnnHandle_t h = cuda::cudnn_handle();
  QAT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w.get(), d.y.get(), d.conv.get(), d.x.get(),
                                                              CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf));
  run_first_accepted(
      "cudnnConvolutionBackwardData", candidates_of(perf, count),
      [&](int algo, size_t* bytes) {
        return cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w.get(), d.y.get(), d.conv.get(), d.x.get(),
                                                            static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), bytes);
      },
      [&](int algo, void* ws, size_t bytes) {
        return cudnnConvolutionBackwardData(h, &kOne, d.w.get(), w, d.y.get(), dy, d.conv.get(),
                                            static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), ws, bytes, &kZero,
                                            d.x.get(), dx);
      });
}

void backward_filter(const ConvDescriptors& d, const float* x, const float* dy, float* dw) {
  cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  int count = 0;
  const cudnnHandle_t h = cuda::cudnn_handle();
  QAT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
      h, d.x.get(), d.y.get(), d.conv.get(), d.w.get(), CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, perf));
  run_first_accepted(
      "cudnnConvolutionBackwardFilter", candidates_of(perf, count),
      [&](int algo, size_t* bytes) {
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(
            h, d.x.get(), d.y.get(), d.conv.get(), d.w.get(), static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo),
            bytes);
      },
      [&](int algo, void* ws, size_t bytes) {
        return cudnnConvolutionBackwardFilter(h, &kOne, d.x.get(), x, d.y.get(), dy, d.conv.get(),
                                              static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), ws, bytes, &kZero,
                                              d.w.get(), dw);
      });
}

TensorList backward(const Tensor& gy, const Tensor& xc, const Tensor& wc, const ConvPlan& plan, const NeedGrad& need) {
  detail::check_same_device("conv2d backward", {{"input", &xc}, {"gradient", &gy}});
  QAT_CHECK(gy.sizes() == Shape({plan.y[0], plan.y[1], plan.y[2], plan.y[3]}), "conv2d backward: expected a gradient ",
            Shape({plan.y[0], plan.y[1], plan.y[2], plan.y[3]}), ", got ", gy.sizes());
  const Tensor gc = gy.contiguous();
  TensorList r(3);
  // Every gradient written whole (beta = 0), so empty tensors need no zeroing
  // except where the batch is empty and cuDNN is not called.
  const bool empty_batch = plan.x[0] == 0;
  if (need[0]) r[0] = empty_batch ? Tensor::zeros(xc.sizes(), DType::f32, Device::cuda)
                                  : Tensor::empty(xc.sizes(), DType::f32, Device::cuda);
  if (need[1]) r[1] = empty_batch ? Tensor::zeros(wc.sizes(), DType::f32, Device::cuda)
                                  : Tensor::empty(wc.sizes(), DType::f32, Device::cuda);
  if (need[2]) r[2] = empty_batch ? Tensor::zeros({plan.w[0]}, DType::f32, Device::cuda)
                                  : Tensor::empty({plan.w[0]}, DType::f32, Device::cuda);
  if (empty_batch) return r;
  const ConvDescriptors d(plan);
  const float* dy = gc.device_data<float>();
  if (need[2])
    QAT_CUDNN_CHECK(cudnnConvolutionBackwardBias(cuda::cudnn_handle(), &kOne, d.y.get(), dy, &kZero, d.bias.get(),
                                                 r[2].device_data<float>()));
  if (need[1]) backward_filter(d, xc.device_data<float>(), dy, r[1].device_data<float>());
  if (need[0]) backward_data(d, wc.device_data<float>(), dy, r[0].device_data<float>());
  return r;
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p) {
  const ConvPlan plan = cuda_plan::plan_conv2d(x.sizes(), weight.sizes(), p);
  const Tensor xc = x.contiguous(), wc = weight.contiguous();
  Tensor out = Tensor::empty({plan.y[0], plan.y[1], plan.y[2], plan.y[3]}, DType::f32, Device::cuda);
  if (plan.x[0] > 0) {
    const ConvDescriptors d(plan);
    forward(d, xc.device_data<float>(), wc.device_data<float>(), out.device_data<float>());
    if (bias.defined()) {
      const Tensor bc = bias.contiguous();
      QAT_CUDNN_CHECK(cudnnAddTensor(cuda::cudnn_handle(), &kOne, d.bias.get(), bc.device_data<float>(), &kOne,
                                     d.y.get(), out.device_data<float>()));
    }
  }
  return record(out, "conv2d", {&x, &weight, &bias},
                [sx = Saved(xc), sw = Saved(wc), plan](const Tensor& gy, const NeedGrad& need) {
                  return backward(gy, sx.get("conv2d"), sw.get("conv2d"), plan, need);
                });
}

TensorList conv2d_backward(const Tensor& gy, const Tensor& x, const Tensor& weight, const Conv2dParams& p,
                           const NeedGrad& need) {
  return backward(gy, x.contiguous(), weight.contiguous(), cuda_plan::plan_conv2d(x.sizes(), weight.sizes(), p), need);
}

}  // namespace qat::cuda_twin
