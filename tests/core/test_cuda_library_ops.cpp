// The library-backed CUDA twins (linear and matmul on cuBLAS, conv2d and
// batch_norm on cuDNN; docs/cuda.md). On every machine: the refusals of
// mixed devices, of a device op without a GPU, of what cuDNN cannot take,
// the libraries' error messages, and (tag [math]) that the batch-norm
// tolerances below hold between the CPU op and a double-precision reference.
// With a GPU ([cuda]): each twin's output and every gradient against the CPU
// op on random shapes, within tolerances derived from the float-sum error
// bound (tests/core/float_sum_bounds.h; batch norm's below).
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "core/collective.h"
#include "core/cuda_runtime.h"
#include "core/generator.h"
#include "core/ops.h"
#include "tests/core/float_sum_bounds.h"
#include "tests/cuda_test_util.h"
#include "tests/test_util.h"

#if QAT_WITH_CUDA
#include "core/cuda_libraries.h"
#endif

namespace {

using Catch::Matchers::Contains;
using Catch::Matchers::Equals;
using qat::Device;
using qat::DType;
using qat::Shape;
using qat::Tensor;
using qat::testing::check_within;
using qat::testing::cuda_device_or_skip;
using qat::testing::CudaOrLabelled;
using qat::testing::OpFn;
using qat::testing::OpRun;
using qat::testing::run_abs;
using qat::testing::run_op;
using qat::testing::sum_bound;
using qat::testing::unit_roundoff;
namespace cuda = qat::cuda;

std::string no_gpu_words() {
  return cuda::built() ? "no usable CUDA device: cudaGetDeviceCount" : "this qat was built without CUDA";
}

// Normal values of spread `std` around `mean`.
Tensor normal(const Shape& shape, uint64_t seed, float mean = 0.f, float std = 1.f) {
  qat::Generator gen(seed);
  return Tensor::randn(shape, gen, mean, std);
}

// The op on both devices, output and gradients, each within its float-sum
// bound: sum_terms[i] is the number of terms summed into output (i = 0) or
// input i's gradient (i = 1 + input).
void check_gemm_like_parity(const OpFn& op, const std::vector<Tensor>& inputs, const Tensor& g,
                            const std::vector<int64_t>& sum_terms, const std::vector<std::string>& names) {
  const OpRun cpu = run_op(op, inputs, g, Device::cpu);
  const OpRun dev = run_op(op, inputs, g, Device::cuda);
  const OpRun mag = run_abs(op, inputs, g);
  check_within(dev.y, cpu.y, sum_bound(mag.y, sum_terms[0]), "forward");
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) continue;
    INFO("gradient of " << names[i]);
    REQUIRE(dev.grads[i].defined());
    check_within(dev.grads[i], cpu.grads[i], sum_bound(mag.grads[i], sum_terms[i + 1]), "d" + names[i]);
  }
}

// ------------------------------------------------------------ batch norm
//
// Tolerances of batch norm, derived from the float-sum bound: per channel,
// each of the M-term sums (the mean, the variance, sum g, sum g xhat) is
// assumed to be float sums in cuDNN (any order; gamma_M times the sum of the
// terms' absolute values), the variance possibly as E[x^2] - mean^2 (so its
// bound uses mean(x^2), not the variance); the CPU op's double sums are far
// more accurate, and counting them the same way makes the bound twice one
// implementation's. The sums' errors are carried to each output to first
// order, and each chain of elementwise operations adds a few units of
// rounding of the magnitudes it combines (8u to 16u for chains of up to five
// roundings, twice over). The [math] test below checks that the CPU op alone
// stays within half of every tolerance of a double-precision reference.

struct BatchNormCase {
  Shape shape;
  bool training, affine, running;
  float momentum = 0.1f, eps = 1e-5f;
};

struct BatchNormTolerance {
  std::vector<double> y, dx, dgamma, dbeta, running_mean, running_var;
};

// The channel c elements of a (N,C) or (N,C,H,W) tensor's values.
std::vector<double> channel_values(const std::vector<float>& v, const Shape& shape, int64_t c) {
  const int64_t C = shape[1], inner = shape.size() == 4 ? shape[2] * shape[3] : 1;
  std::vector<double> out;
  for (int64_t n = 0; n < shape[0]; ++n)
    for (int64_t i = 0; i < inner; ++i) out.push_back(v[static_cast<size_t>((n * C + c) * inner + i)]);
  return out;
}

// The tolerance between two implementations of batch_norm for input x,
// gradient g, weight w, bias b (undefined without affine) and the running
// stats before the call (undefined without them).
BatchNormTolerance batch_norm_tolerance(const BatchNormCase& k, const Tensor& x, const Tensor& g, const Tensor& w,
                                        const Tensor& b, const Tensor& rm, const Tensor& rv) {
  const Shape& s = k.shape;
  const int64_t C = s[1], inner = s.size() == 4 ? s[2] * s[3] : 1, M = s[0] * inner;
  const double u = unit_roundoff(), gm = qat::testing::gamma_k(M);
  const bool batch_stats = k.training || !k.running;
  const std::vector<float> xv = x.to_vector(), gv = g.to_vector();
  BatchNormTolerance t;
  t.y.resize(xv.size());
  t.dx.resize(xv.size());
  for (int64_t c = 0; c < C; ++c) {
    const std::vector<double> xs = channel_values(xv, s, c), gs = channel_values(gv, s, c);
    const double gamma = w.defined() ? std::fabs(w.to_vector()[c]) : 1.0;
    const double beta = b.defined() ? std::fabs(b.to_vector()[c]) : 0.0;
    double mu = 0, abs_x = 0, sq_x = 0, var = 0;
    for (const double v : xs) mu += v, abs_x += std::fabs(v), sq_x += v * v;
    mu /= M, abs_x /= M, sq_x /= M;
    for (const double v : xs) var += (v - mu) * (v - mu);
    var /= M;
    double e_mu = 0, r = 8 * u;  // error of the mean; relative error of 1/sqrt(var + eps)
    double e_var = 0;
    if (batch_stats) {
      e_mu = 2 * gm * abs_x;
      e_var = 2 * gm * (sq_x + 2 * std::fabs(mu) * abs_x) + 4 * u * var;
      r = 0.5 * e_var / (var + k.eps) + 8 * u;
    } else {
      mu = rm.to_vector()[c];
      var = rv.to_vector()[c];
    }
    const double istd = 1.0 / std::sqrt(var + k.eps);
    double s1 = 0, s2 = 0, abs_g = 0, abs_gxhat = 0, g_dxhat = 0;
    std::vector<double> xhat(xs.size()), dxhat(xs.size());
    for (size_t j = 0; j < xs.size(); ++j) {
      xhat[j] = (xs[j] - mu) * istd;
      dxhat[j] = istd * e_mu + std::fabs(xhat[j]) * r;
      s1 += gs[j], s2 += gs[j] * xhat[j];
      abs_g += std::fabs(gs[j]), abs_gxhat += std::fabs(gs[j] * xhat[j]), g_dxhat += std::fabs(gs[j]) * dxhat[j];
    }
    const double e_s1 = 2 * gm * abs_g + 4 * u * std::fabs(s1);
    const double e_s2 = 2 * gm * abs_gxhat + g_dxhat + 4 * u * std::fabs(s2);
    t.dbeta.push_back(e_s1 + 1e-30);
    t.dgamma.push_back(e_s2 + r * std::fabs(s2) + 1e-30);
    for (size_t j = 0; j < xs.size(); ++j) {
      const int64_t n = static_cast<int64_t>(j) / inner, i = static_cast<int64_t>(j) % inner;
      const size_t at = static_cast<size_t>((n * C + c) * inner + i);
      t.y[at] = gamma * istd * (e_mu + std::fabs(xs[j] - mu) * r) +
                16 * u * (gamma * istd * (std::fabs(xs[j]) + std::fabs(mu)) + beta) + 1e-30;
      if (batch_stats) {
        const double dx = gamma * istd * (gs[j] - s1 / M - xhat[j] * s2 / M);
        t.dx[at] = gamma * istd * (e_s1 / M + dxhat[j] * std::fabs(s2) / M + std::fabs(xhat[j]) * e_s2 / M) +
                   std::fabs(dx) * r +
                   16 * u * gamma * istd * (std::fabs(gs[j]) + std::fabs(s1) / M + std::fabs(xhat[j] * s2) / M) +
                   1e-30;
      } else {
        t.dx[at] = 16 * u * gamma * istd * std::fabs(gs[j]) + 1e-30;
      }
    }
    if (k.training && k.running) {
      const double m = k.momentum, rm0 = rm.to_vector()[c], rv0 = rv.to_vector()[c];
      const double unbiased = var * M / (M - 1);
      t.running_mean.push_back(m * e_mu + 8 * u * (std::fabs(rm0) + std::fabs(mu)) + 1e-30);
      t.running_var.push_back(m * e_var * M / (M - 1) + 8 * u * (std::fabs(rv0) + unbiased) + 1e-30);
    }
  }
  return t;
}

// batch_norm in double from the same float inputs: output, dx, dgamma,
// dbeta, and the running stats after the call.
struct BatchNormReference {
  Tensor y, dx, dgamma, dbeta, running_mean, running_var;
};

BatchNormReference batch_norm_reference(const BatchNormCase& k, const Tensor& x, const Tensor& g, const Tensor& w,
                                        const Tensor& b, const Tensor& rm, const Tensor& rv) {
  const Shape& s = k.shape;
  const int64_t C = s[1], inner = s.size() == 4 ? s[2] * s[3] : 1, M = s[0] * inner;
  const bool batch_stats = k.training || !k.running;
  const std::vector<float> xv = x.to_vector(), gv = g.to_vector();
  std::vector<float> y(xv.size()), dx(xv.size()), dgamma(C), dbeta(C), rmo, rvo;
  for (int64_t c = 0; c < C; ++c) {
    const std::vector<double> xs = channel_values(xv, s, c), gs = channel_values(gv, s, c);
    const double gamma = w.defined() ? w.to_vector()[c] : 1.0, beta = b.defined() ? b.to_vector()[c] : 0.0;
    double mu = 0, var = 0;
    for (const double v : xs) mu += v;
    mu /= M;
    for (const double v : xs) var += (v - mu) * (v - mu);
    var /= M;
    if (k.training && k.running) {
      rmo.push_back(static_cast<float>((1 - k.momentum) * rm.to_vector()[c] + k.momentum * mu));
      rvo.push_back(static_cast<float>((1 - k.momentum) * rv.to_vector()[c] + k.momentum * var * M / (M - 1)));
    }
    if (!batch_stats) mu = rm.to_vector()[c], var = rv.to_vector()[c];
    const double istd = 1.0 / std::sqrt(var + k.eps);
    double s1 = 0, s2 = 0;
    for (size_t j = 0; j < xs.size(); ++j) s1 += gs[j], s2 += gs[j] * (xs[j] - mu) * istd;
    dgamma[c] = static_cast<float>(s2);
    dbeta[c] = static_cast<float>(s1);
    for (size_t j = 0; j < xs.size(); ++j) {
      const int64_t n = static_cast<int64_t>(j) / inner, i = static_cast<int64_t>(j) % inner;
      const size_t at = static_cast<size_t>((n * C + c) * inner + i);
      const double xhat = (xs[j] - mu) * istd;
      y[at] = static_cast<float>(gamma * xhat + beta);
      dx[at] = static_cast<float>(batch_stats ? gamma * istd * (gs[j] - s1 / M - xhat * s2 / M) : gamma * istd * gs[j]);
    }
  }
  BatchNormReference r{Tensor::from_vector(y, s), Tensor::from_vector(dx, s), Tensor::from_vector(dgamma, {C}),
                       Tensor::from_vector(dbeta, {C}), Tensor(), Tensor()};
  if (!rmo.empty()) r.running_mean = Tensor::from_vector(rmo, {C}), r.running_var = Tensor::from_vector(rvo, {C});
  return r;
}

// The inputs of one case: x with a mean offset (as activations have), a
// positive running variance.
struct BatchNormInputs {
  Tensor x, g, w, b, rm, rv;
};

BatchNormInputs batch_norm_inputs(const BatchNormCase& k, uint64_t seed) {
  const int64_t C = k.shape[1];
  BatchNormInputs in;
  in.x = normal(k.shape, seed, 0.5f, 2.f);
  in.g = normal(k.shape, seed + 1);
  if (k.affine) in.w = normal({C}, seed + 2, 1.f, 0.5f), in.b = normal({C}, seed + 3);
  if (k.running) in.rm = normal({C}, seed + 4), in.rv = qat::testing::abs_of(normal({C}, seed + 5, 1.f, 0.5f));
  return in;
}

// One run of batch_norm on `device`, the running stats copied there and back.
struct BatchNormRun {
  OpRun op;
  Tensor running_mean, running_var;
};

BatchNormRun run_batch_norm(const BatchNormCase& k, const BatchNormInputs& in, Device device) {
  // Fresh copies of the running stats on `device` (a clone on the CPU), so that the inputs stay as they are.
  const Tensor rm = in.rm.defined() ? in.rm.clone().to(device) : Tensor();
  const Tensor rv = in.rv.defined() ? in.rv.clone().to(device) : Tensor();
  const OpFn op = [&](const std::vector<Tensor>& t) {
    return qat::batch_norm(t[0], t[1], t[2], rm, rv, k.training, k.momentum, k.eps);
  };
  BatchNormRun r;
  r.op = run_op(op, {in.x, in.w, in.b}, in.g, device);
  if (rm.defined()) r.running_mean = rm.to(Device::cpu), r.running_var = rv.to(Device::cpu);
  return r;
}

void check_batch_norm(const BatchNormRun& a, const BatchNormCase& k, const BatchNormInputs& in,
                      const BatchNormTolerance& tol, const Tensor& y, const Tensor& dx, const Tensor& dgamma,
                      const Tensor& dbeta, const Tensor& rm, const Tensor& rv) {
  check_within(a.op.y, y, tol.y, "y");
  check_within(a.op.grads[0], dx, tol.dx, "dx");
  if (k.affine) {
    check_within(a.op.grads[1], dgamma, tol.dgamma, "dgamma");
    check_within(a.op.grads[2], dbeta, tol.dbeta, "dbeta");
  } else {
    CHECK_FALSE(a.op.grads[1].defined());
    CHECK_FALSE(a.op.grads[2].defined());
  }
  if (k.training && k.running) {
    check_within(a.running_mean, rm, tol.running_mean, "running_mean");
    check_within(a.running_var, rv, tol.running_var, "running_var");
  } else if (k.running) {
    qat::testing::check_same_bits(a.running_mean, in.rm, "running_mean untouched");
    qat::testing::check_same_bits(a.running_var, in.rv, "running_var untouched");
  }
}

// Training and eval, with and without affine parameters and running stats;
// (N,C) and (N,C,H,W); (4, 5) has M = 4 values per channel, where the biased
// and the unbiased variance differ by a third.
const BatchNormCase kBatchNormCases[] = {
    {{8, 3, 5, 4}, true, true, true},      {{4, 5}, true, true, true},   {{2, 6, 3, 3}, false, true, true},
    {{16, 7}, false, true, true},          {{3, 4, 6, 2}, true, false, true}, {{5, 3, 2, 2}, true, true, false},
    {{6, 2, 3, 3}, false, false, false},   {{1, 8, 7, 5}, true, true, true, 0.3f, 1e-3f},
    {{32, 16, 1, 1}, true, true, true},
};

std::string describe(const BatchNormCase& k) {
  return qat::detail::cat("batch_norm ", qat::shape_str(k.shape), k.training ? " training" : " eval",
                          k.affine ? "" : " no-affine", k.running ? "" : " no running stats", " momentum ", k.momentum,
                          " eps ", k.eps);
}

}  // namespace

// --------------------------------------------------------------- everywhere

TEST_CASE("cuda library ops: mixed devices are refused naming the op and both devices", "[cuda]") {
  CudaOrLabelled x2(Tensor::ones({2, 3})), w2(Tensor::ones({4, 3})), x4(Tensor::ones({1, 3, 5, 5})),
      c3(Tensor::ones({3})), c4(Tensor::ones({4}));
  const Tensor cpu2 = Tensor::ones({2, 3}), cpu_w = Tensor::ones({4, 3});
  CHECK_THROWS_WITH(qat::linear(x2.t, cpu_w),
                    Equals("linear: expected all tensors on one device, but input is on cuda and weight is on cpu"));
  CHECK_THROWS_WITH(qat::linear(cpu2, cpu_w, c4.t),
                    Equals("linear: expected all tensors on one device, but input is on cpu and bias is on cuda"));
  CHECK_THROWS_WITH(qat::linear(cpu2, w2.t),
                    Equals("linear: expected all tensors on one device, but input is on cpu and weight is on cuda"));
  CHECK_THROWS_WITH(qat::matmul(x2.t, Tensor::ones({3, 2})),
                    Equals("matmul: expected all tensors on one device, but a is on cuda and b is on cpu"));
  CHECK_THROWS_WITH(qat::conv2d(x4.t, Tensor::ones({2, 3, 3, 3}), Tensor(), {}),
                    Equals("conv2d: expected all tensors on one device, but input is on cuda and weight is on cpu"));
  CHECK_THROWS_WITH(qat::conv2d(Tensor::ones({1, 3, 5, 5}), Tensor::ones({3, 1, 3, 3}), c3.t, {1, 1, 0, 0, 1, 1, 3}),
                    Equals("conv2d: expected all tensors on one device, but input is on cpu and bias is on cuda"));
  CHECK_THROWS_WITH(qat::batch_norm(x4.t, Tensor(), Tensor(), Tensor::zeros({3}), Tensor::ones({3}), false),
                    Equals("batch_norm: expected all tensors on one device, but input is on cuda and running_mean "
                           "is on cpu"));
  CHECK_THROWS_WITH(qat::batch_norm(Tensor::ones({2, 3}), c3.t, Tensor(), Tensor(), Tensor(), true),
                    Equals("batch_norm: expected all tensors on one device, but input is on cpu and weight is on cuda"));
}

TEST_CASE("cuda library ops: on cuda without a GPU they refuse with the reason, after the argument checks", "[cuda]") {
  if (cuda::available()) {
    WARN("skipped: a GPU is present, so the no-GPU errors cannot occur here");
    return;
  }
  CudaOrLabelled x2(Tensor::ones({2, 3})), w2(Tensor::ones({4, 3})), b4(Tensor::ones({4})), m32(Tensor::ones({3, 2})),
      x4(Tensor::ones({2, 3, 5, 5})), w4(Tensor::ones({2, 3, 3, 3})), c3(Tensor::ones({3})), v3(Tensor::ones({3}));
  // CUDA built: the twin's first device allocation refuses; not built: the CPU code's data().
  const std::string why = cuda::built() ? no_gpu_words() : "is on cuda";
  CHECK_THROWS_WITH(qat::linear(x2.t, w2.t, b4.t), Contains(why));
  CHECK_THROWS_WITH(qat::matmul(x2.t, m32.t), Contains(why));
  CHECK_THROWS_WITH(qat::conv2d(x4.t, w4.t, Tensor(), {}), Contains(why));
  CHECK_THROWS_WITH(qat::batch_norm(x4.t, c3.t, c3.t, c3.t, v3.t, true), Contains(why));
  // The op's own checks come first, on any device.
  CHECK_THROWS_WITH(qat::linear(x2.t, m32.t), Contains("linear: expected input (N,2) for weight [3, 2]"));
  CudaOrLabelled one_row(Tensor::ones({1, 3}));
  CHECK_THROWS_WITH(qat::batch_norm(one_row.t, Tensor(), Tensor(), Tensor(), Tensor(), true),
                    Contains("batch_norm: training needs more than one value per channel"));
  if (!cuda::built()) return;
  // What cuDNN cannot take is refused before any device work, by name.
  CHECK_THROWS_WITH(qat::batch_norm(x4.t, c3.t, c3.t, c3.t, v3.t, true, 0.1f, -1e-3f),
                    Contains("batch_norm on cuda: eps = -0.001") && Contains("is below cuDNN's minimum"));
  CudaOrLabelled empty_c(Tensor::ones({2, 0, 5, 5})), empty_w(Tensor::ones({2, 0, 3, 3}));
  CHECK_THROWS_WITH(qat::conv2d(empty_c.t, empty_w.t, Tensor(), {}),
                    Contains("conv2d on cuda: cuDNN takes no empty input or filter dimension"));
}

TEST_CASE("cuda library ops: synchronised batch norm is refused on cuda, naming why", "[cuda]") {
  // Rank 0 of two processes; the op refuses before it would sum anything.
  qat::testing::IdentityCollective two;
  CudaOrLabelled x(Tensor::ones({4, 3}));
  qat::set_collective(&two);
  qat::set_sync_batch_norm(true);
  std::string msg;
  try {
    qat::batch_norm(x.t, Tensor(), Tensor(), Tensor(), Tensor(), true);
  } catch (const qat::Error& e) {
    msg = e.what();
  }
  qat::set_sync_batch_norm(false);
  qat::set_collective(nullptr);
  CHECK_THAT(msg, Contains("batch_norm: the statistics of the global batch of all processes (synchronised batch "
                           "norm) are computed on the CPU only; input [4, 3] is on cuda"));
}

// The versions a GPU machine loads may not be the build machine's: the GPU
// check prints them, and a different major version fails here.
TEST_CASE("cuda library ops: the cuBLAS and cuDNN loaded have the major versions built against", "[cuda]") {
#if QAT_WITH_CUDA
  const qat::cuda::LibraryVersions v = qat::cuda::loaded_library_versions();
  CHECK(v.cublas_major == CUBLAS_VER_MAJOR);
  CHECK(v.cudnn / 10000 == CUDNN_VERSION / 10000);
  CHECK(v.cudnn_cudart / 1000 == CUDART_VERSION / 1000);
  WARN("GPU libraries: " << qat::cuda::describe_libraries());
#else
  WARN("skipped: this qat was built without CUDA");
#endif
}

TEST_CASE("cuda library ops: cuBLAS and cuDNN failures name the call, file:line and the library's status", "[cuda]") {
#if QAT_WITH_CUDA
  // Calls that fail on any machine, GPU or not: no handle, a bad descriptor size.
  std::string cublas_msg, cudnn_msg;
  const int cublas_line = __LINE__ + 2;
  try {
    QAT_CUBLAS_CHECK(cublasSetMathMode(nullptr, CUBLAS_DEFAULT_MATH));
  } catch (const qat::Error& e) {
    cublas_msg = e.what();
  }
  CHECK_THAT(cublas_msg, Contains("test_cuda_library_ops.cpp:" + std::to_string(cublas_line) +
                                  ": cublasSetMathMode(nullptr, CUBLAS_DEFAULT_MATH): CUBLAS_STATUS_NOT_INITIALIZED (1): "));
  CHECK_THAT(cublas_msg, Contains(cublasGetStatusString(CUBLAS_STATUS_NOT_INITIALIZED)));
  const int d[4] = {2, -3, 4, 5};
  CHECK_THROWS_WITH(qat::cuda::TensorDescriptor(d),
                    Contains("cuda_libraries.cpp:") &&
                        Contains("cudnnSetTensor4dDescriptor(NCHW float, 2x-3x4x5): CUDNN_STATUS_BAD_PARAM"));
  const int cudnn_line = __LINE__ + 2;
  try {
    QAT_CUDNN_CHECK(cudnnCreateTensorDescriptor(nullptr));
  } catch (const qat::Error& e) {
    cudnn_msg = e.what();
  }
  CHECK_THAT(cudnn_msg, Contains("test_cuda_library_ops.cpp:" + std::to_string(cudnn_line) +
                                 ": cudnnCreateTensorDescriptor(nullptr): CUDNN_STATUS_BAD_PARAM"));
  CHECK_THAT(qat::cuda::cudnn_error_message(CUDNN_STATUS_NOT_SUPPORTED, "call()", "f.cu", 7),
             Contains("f.cu:7: call(): CUDNN_STATUS_NOT_SUPPORTED (3000)"));
  if (!cuda::available()) {
    CHECK_THROWS_WITH(qat::cuda::cublas_handle(), Contains("cuBLAS: ") && Contains(no_gpu_words()));
    CHECK_THROWS_WITH(qat::cuda::cudnn_handle(), Contains("cuDNN: ") && Contains(no_gpu_words()));
  } else {
    CHECK(qat::cuda::cublas_handle() != nullptr);
    CHECK(qat::cuda::cudnn_handle() != nullptr);
    cublasMath_t mode{};
    QAT_CUBLAS_CHECK(cublasGetMathMode(qat::cuda::cublas_handle(), &mode));
    CHECK(mode == CUBLAS_PEDANTIC_MATH);  // Note [FP32 on the GPU]
  }
#else
  WARN("skipped: this qat was built without CUDA (cuBLAS and cuDNN exist in CUDA builds only)");
#endif
}

TEST_CASE("cuda library ops: the batch-norm tolerances hold between the CPU op and a double reference", "[math]") {
  // The tolerances are for two float implementations; the CPU op alone must
  // be within half of them of the exact (double) result, or they are too tight.
  uint64_t seed = 900;
  for (const BatchNormCase& k : kBatchNormCases) {
    INFO(describe(k));
    const BatchNormInputs in = batch_norm_inputs(k, seed += 10);
    const BatchNormRun cpu = run_batch_norm(k, in, Device::cpu);
    const BatchNormReference ref = batch_norm_reference(k, in.x, in.g, in.w, in.b, in.rm, in.rv);
    BatchNormTolerance half = batch_norm_tolerance(k, in.x, in.g, in.w, in.b, in.rm, in.rv);
    for (std::vector<double>* v : {&half.y, &half.dx, &half.dgamma, &half.dbeta, &half.running_mean, &half.running_var})
      for (double& t : *v) t /= 2;
    check_batch_norm(cpu, k, in, half, ref.y, ref.dx, ref.dgamma, ref.dbeta, ref.running_mean, ref.running_var);
  }
}

// ---------------------------------------------------------------- with a GPU

TEST_CASE("cuda library ops: linear and matmul on cuBLAS equal the CPU ops within the float-sum bound", "[cuda]") {
  if (!cuda_device_or_skip()) return;
  struct Case {
    int64_t rows, in, out;
  };
  const Case cases[] = {{1, 1, 1}, {1, 9, 4}, {7, 1, 3}, {5, 6, 1}, {33, 65, 17}, {128, 256, 10}, {3, 1000, 7}};
  uint64_t seed = 500;
  for (const Case& c : cases) {
    for (const bool with_bias : {true, false}) {
      INFO("linear rows " << c.rows << ", in " << c.in << ", out " << c.out << (with_bias ? ", bias" : ""));
      const Tensor x = normal({c.rows, c.in}, ++seed), w = normal({c.out, c.in}, ++seed);
      const Tensor b = with_bias ? normal({c.out}, ++seed) : Tensor(), g = normal({c.rows, c.out}, ++seed);
      check_gemm_like_parity([](const std::vector<Tensor>& t) { return qat::linear(t[0], t[1], t[2]); }, {x, w, b},
                             g, {c.in + 1, c.out, c.rows, c.rows}, {"input", "weight", "bias"});
    }
    INFO("matmul m " << c.rows << ", k " << c.in << ", n " << c.out);
    const Tensor a = normal({c.rows, c.in}, ++seed), bm = normal({c.in, c.out}, ++seed);
    check_gemm_like_parity([](const std::vector<Tensor>& t) { return qat::matmul(t[0], t[1]); }, {a, bm},
                           normal({c.rows, c.out}, ++seed), {c.in, c.out, c.rows}, {"a", "b"});
  }
  // Only some gradients asked for: the others stay undefined.
  const OpRun part = run_op([](const std::vector<Tensor>& t) { return qat::linear(t[0], t[1], t[2]); },
                            {normal({4, 3}, 1), normal({2, 3}, 2), normal({2}, 3)}, normal({4, 2}, 4), Device::cuda,
                            {true, false, true});
  CHECK_FALSE(part.grads[0].defined());
  CHECK(part.grads[1].defined());
  CHECK_FALSE(part.grads[2].defined());
  // An empty batch: an empty output, zero weight and bias gradients.
  const OpRun empty = run_op([](const std::vector<Tensor>& t) { return qat::linear(t[0], t[1], t[2]); },
                             {Tensor::zeros({0, 3}), normal({2, 3}, 5), normal({2}, 6)}, Tensor::zeros({0, 2}),
                             Device::cuda);
  CHECK(empty.y.sizes() == Shape{0, 2});
  qat::testing::check_same_bits(empty.grads[1], Tensor::zeros({2, 3}), "dW of an empty batch");
  qat::testing::check_same_bits(empty.grads[2], Tensor::zeros({2}), "db of an empty batch");
  // A CPU gradient for a device graph is refused by name.
  Tensor xd = normal({4, 3}, 7).to(Device::cuda).set_requires_grad(true);
  CHECK_THROWS_WITH(qat::linear(xd, normal({2, 3}, 8).to(Device::cuda)).backward(Tensor::ones({4, 2})),
                    Contains("linear backward: expected all tensors on one device, but output is on cuda and "
                             "gradient is on cpu"));
}

TEST_CASE("cuda library ops: conv2d on cuDNN equals the CPU op within the float-sum bound", "[cuda]") {
  if (!cuda_device_or_skip()) return;
  struct Case {
    Shape x, w;
    qat::Conv2dParams p;
    bool bias;
  };
  const Case cases[] = {
      {{2, 3, 9, 7}, {4, 3, 3, 3}, {}, true},
      {{1, 3, 16, 16}, {8, 3, 3, 3}, {2, 2, 1, 1, 1, 1, 1}, true},        // batch 1, stride 2, padding 1
      {{2, 4, 8, 8}, {6, 2, 3, 3}, {2, 2, 1, 1, 1, 1, 2}, true},          // groups 2
      {{3, 6, 11, 10}, {6, 1, 3, 2}, {1, 2, 2, 0, 2, 3, 6}, false},       // depthwise, dilation, unequal
      {{2, 5, 6, 6}, {7, 5, 1, 1}, {}, true},                             // 1x1
      {{4, 8, 5, 5}, {16, 8, 1, 1}, {2, 2, 0, 0, 1, 1, 1}, false},        // 1x1 stride 2
      {{2, 3, 13, 13}, {5, 3, 5, 5}, {1, 1, 2, 2, 2, 2, 1}, true},        // dilated 5x5
      {{8, 16, 7, 7}, {32, 16, 3, 3}, {1, 1, 1, 1, 1, 1, 1}, true},       // a network's 3x3 layer
      {{2, 3, 32, 32}, {8, 3, 11, 11}, {4, 4, 2, 2, 1, 1, 1}, true},      // AlexNet's first layer, smaller
  };
  uint64_t seed = 700;
  for (const Case& c : cases) {
    INFO("conv2d x " << qat::shape_str(c.x) << ", w " << qat::shape_str(c.w) << ", stride " << c.p.stride_h << ","
                     << c.p.stride_w << ", pad " << c.p.pad_h << "," << c.p.pad_w << ", dil " << c.p.dil_h << ","
                     << c.p.dil_w << ", groups " << c.p.groups << (c.bias ? ", bias" : ""));
    const Tensor x = normal(c.x, ++seed), w = normal(c.w, ++seed);
    const Tensor b = c.bias ? normal({c.w[0]}, ++seed) : Tensor();
    const Tensor y0 = qat::conv2d(x, w, b, c.p);
    const Tensor g = normal(y0.sizes(), ++seed);
    const int64_t out_pixels = y0.size(0) * y0.size(2) * y0.size(3);
    const int64_t per_output = c.w[1] * c.w[2] * c.w[3] + 1;       // C/g * KH * KW (+ bias)
    const int64_t per_input = c.w[0] / c.p.groups * c.w[2] * c.w[3];  // O/g * KH * KW at most
    check_gemm_like_parity([&c](const std::vector<Tensor>& t) { return qat::conv2d(t[0], t[1], t[2], c.p); },
                           {x, w, b}, g, {per_output, per_input, out_pixels, out_pixels}, {"input", "weight", "bias"});
  }
  // The same call twice: the same bits (deterministic algorithms first).
  const Tensor x = normal({4, 8, 9, 9}, 1), w = normal({8, 8, 3, 3}, 2), g = normal({4, 8, 9, 9}, 3);
  const auto conv = [](const std::vector<Tensor>& t) { return qat::conv2d(t[0], t[1], t[2], {1, 1, 1, 1, 1, 1, 1}); };
  const OpRun first = run_op(conv, {x, w, Tensor()}, g, Device::cuda);
  const OpRun second = run_op(conv, {x, w, Tensor()}, g, Device::cuda);
  qat::testing::check_same_bits(second.y, first.y, "forward, run twice");
  qat::testing::check_same_bits(second.grads[0], first.grads[0], "dx, run twice");
  qat::testing::check_same_bits(second.grads[1], first.grads[1], "dW, run twice");
  // An empty batch: an empty output and zero gradients.
  const OpRun empty = run_op(conv, {Tensor::zeros({0, 8, 9, 9}), w, normal({8}, 4)}, Tensor::zeros({0, 8, 9, 9}),
                             Device::cuda);
  CHECK(empty.y.sizes() == Shape{0, 8, 9, 9});
  qat::testing::check_same_bits(empty.grads[1], Tensor::zeros({8, 8, 3, 3}), "dW of an empty batch");
  qat::testing::check_same_bits(empty.grads[2], Tensor::zeros({8}), "db of an empty batch");
}

TEST_CASE("cuda library ops: batch_norm on cuDNN equals the CPU op, running stats included", "[cuda]") {
  if (!cuda_device_or_skip()) return;
  uint64_t seed = 1900;
  for (const BatchNormCase& k : kBatchNormCases) {
    INFO(describe(k));
    const BatchNormInputs in = batch_norm_inputs(k, seed += 10);
    const BatchNormRun cpu = run_batch_norm(k, in, Device::cpu);
    const BatchNormRun dev = run_batch_norm(k, in, Device::cuda);
    const BatchNormTolerance tol = batch_norm_tolerance(k, in.x, in.g, in.w, in.b, in.rm, in.rv);
    check_batch_norm(dev, k, in, tol, cpu.op.y, cpu.op.grads[0], cpu.op.grads[1], cpu.op.grads[2], cpu.running_mean,
                     cpu.running_var);
  }
  // Eval with running stats: the gradient rules are the CPU op's, bit for bit.
  const BatchNormCase eval{{4, 3, 5, 5}, false, true, true};
  const BatchNormInputs in = batch_norm_inputs(eval, 77);
  const BatchNormRun cpu = run_batch_norm(eval, in, Device::cpu), dev = run_batch_norm(eval, in, Device::cuda);
  qat::testing::check_same_bits(dev.op.grads[0], cpu.op.grads[0], "eval dx");
  // eps below cuDNN's minimum is refused, never computed differently.
  CHECK_THROWS_WITH(qat::batch_norm(in.x.to(Device::cuda), Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1f, -1.f),
                    Contains("below cuDNN's minimum"));
}
