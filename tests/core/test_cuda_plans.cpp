// The host-side arithmetic of the library-backed CUDA twins
// (core/ops/cuda_plans.h and op_math's channel rules), checked on the CPU,
// where no GPU is needed:
// - each cuBLAS GemmPlan (linear: forward, dx, dW; matmul: forward, da, db)
//   executed with OpenBLAS's column-major cblas_sgemm on host buffers, as
//   run_gemm passes it to cublasSgemm, against the CPU op's result;
// - the bias broadcast and the per-channel sums, indexed as the kernels
//   index them, against the CPU ops' bias and bias/BN gradients; BN's eval
//   gradient rule bit for bit against the CPU op;
// - conv2d's descriptor numbers against the CPU op's output shapes (and, in a
//   CUDA build, against the output size cuDNN itself computes for those
//   descriptors, which needs no GPU); the algorithm order; every refusal.
#include <catch2/catch.hpp>

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "core/ops.h"
#include "core/ops/cuda_plans.h"
#include "core/ops/math.h"
#include "tests/core/float_sum_bounds.h"
#include "tests/test_util.h"

#if QAT_WITH_CUDA
#include "core/cuda_libraries.h"
#endif

namespace {

using Catch::Matchers::Contains;
using qat::Device;
using qat::Shape;
using qat::Tensor;
using qat::testing::OpRun;
using qat::testing::run_abs;
using qat::testing::run_op;
using qat::testing::sum_bound;
using namespace qat::cuda_plan;

// What run_gemm (core/ops/linear.cu) does with a plan, with OpenBLAS's
// column-major sgemm in place of cublasSgemm (the same arguments in the same
// order; alpha 1).
void execute(const GemmPlan& p, const GemmOperands& ops, Tensor& c) {
  switch (p.work) {
    case GemmWork::nothing:
    case GemmWork::keep_c:
      return;
    case GemmWork::zero_c:
      c.fill_(0.f);
      return;
    case GemmWork::gemm:
      break;
  }
  cblas_sgemm(CblasColMajor, p.trans_first ? CblasTrans : CblasNoTrans, p.trans_second ? CblasTrans : CblasNoTrans,
              p.m, p.n, p.k, 1.f, ops.of(p.first), p.ld_first, ops.of(p.second), p.ld_second, p.beta,
              c.data<float>(), p.ldc);
}

// db as the twin sums it: channel c's elements in channel_element order.
Tensor channel_sums_on_host(const Tensor& g, int64_t channels, int64_t inner) {
  const int64_t per_channel = g.numel() / channels;
  Tensor out = Tensor::empty({channels});
  const float* pg = g.data<float>();
  for (int64_t c = 0; c < channels; ++c) {
    double acc = 0;
    for (int64_t j = 0; j < per_channel; ++j) acc += pg[qat::op_math::channel_element(c, j, channels, inner)];
    out.data<float>()[c] = static_cast<float>(acc);
  }
  return out;
}

struct GemmCase {
  int64_t rows, inner, cols;  // linear: rows, in, out; matmul: m, k, n
};

const GemmCase kGemmCases[] = {{1, 1, 1}, {1, 7, 3}, {5, 1, 4}, {3, 6, 1}, {37, 53, 29}, {64, 128, 10}, {2, 300, 17}};

}  // namespace

TEST_CASE("cuda plans: linear's cuBLAS plans, run column-major on the host, give the CPU op's results", "[math]") {
  uint64_t seed = 100;
  for (const GemmCase& c : kGemmCases) {
    for (const bool with_bias : {true, false}) {
      INFO("linear rows " << c.rows << ", in " << c.inner << ", out " << c.cols << (with_bias ? ", bias" : ""));
      const Tensor x = qat::testing::rand_tensor({c.rows, c.inner}, ++seed, false);
      const Tensor w = qat::testing::rand_tensor({c.cols, c.inner}, ++seed, false);
      const Tensor b = with_bias ? qat::testing::rand_tensor({c.cols}, ++seed, false) : Tensor();
      const Tensor g = qat::testing::rand_tensor({c.rows, c.cols}, ++seed, false);
      const auto op = [](const std::vector<Tensor>& t) { return qat::linear(t[0], t[1], t[2]); };
      const OpRun cpu = run_op(op, {x, w, b}, g, Device::cpu);
      const OpRun mag = run_abs(op, {x, w, b}, g);
      const GemmOperands ops{x.data<float>(), w.data<float>(), g.data<float>()};

      // The bias broadcast as broadcast_rows_kernel indexes it, then the product on top.
      Tensor y = Tensor::empty({c.rows, c.cols});
      for (int64_t i = 0; with_bias && i < y.numel(); ++i)
        y.data<float>()[i] = b.data<float>()[qat::op_math::channel_of(i, c.cols, 1)];
      execute(linear_forward_plan(c.rows, c.inner, c.cols, with_bias), ops, y);
      qat::testing::check_within(y, cpu.y, sum_bound(mag.y, c.inner + 1), "forward");

      Tensor dx = Tensor::empty({c.rows, c.inner});
      execute(linear_grad_input_plan(c.rows, c.inner, c.cols), ops, dx);
      qat::testing::check_within(dx, cpu.grads[0], sum_bound(mag.grads[0], c.cols), "dx");

      Tensor dw = Tensor::empty({c.cols, c.inner});
      execute(linear_grad_weight_plan(c.rows, c.inner, c.cols), ops, dw);
      qat::testing::check_within(dw, cpu.grads[1], sum_bound(mag.grads[1], c.rows), "dW");

      if (with_bias) {
        const Tensor db = channel_sums_on_host(g, c.cols, 1);
        qat::testing::check_within(db, cpu.grads[2], sum_bound(mag.grads[2], c.rows), "db");
      }
    }
  }
}

TEST_CASE("cuda plans: matmul's cuBLAS plans, run column-major on the host, give the CPU op's results", "[math]") {
  uint64_t seed = 200;
  for (const GemmCase& c : kGemmCases) {
    INFO("matmul m " << c.rows << ", k " << c.inner << ", n " << c.cols);
    const Tensor a = qat::testing::rand_tensor({c.rows, c.inner}, ++seed, false);
    const Tensor b = qat::testing::rand_tensor({c.inner, c.cols}, ++seed, false);
    const Tensor g = qat::testing::rand_tensor({c.rows, c.cols}, ++seed, false);
    const auto op = [](const std::vector<Tensor>& t) { return qat::matmul(t[0], t[1]); };
    const OpRun cpu = run_op(op, {a, b}, g, Device::cpu);
    const OpRun mag = run_abs(op, {a, b}, g);
    const GemmOperands ops{a.data<float>(), b.data<float>(), g.data<float>()};

    Tensor y = Tensor::empty({c.rows, c.cols});
    execute(matmul_forward_plan(c.rows, c.inner, c.cols), ops, y);
    qat::testing::check_within(y, cpu.y, sum_bound(mag.y, c.inner), "forward");

    Tensor da = Tensor::empty({c.rows, c.inner});
    execute(matmul_grad_a_plan(c.rows, c.inner, c.cols), ops, da);
    qat::testing::check_within(da, cpu.grads[0], sum_bound(mag.grads[0], c.cols), "da");

    Tensor db = Tensor::empty({c.inner, c.cols});
    execute(matmul_grad_b_plan(c.rows, c.inner, c.cols), ops, db);
    qat::testing::check_within(db, cpu.grads[1], sum_bound(mag.grads[1], c.rows), "db");
  }
}

TEST_CASE("cuda plans: a GEMM's plan swaps the operands and sizes into column-major and names empty work", "[math]") {
  // linear forward: (rows,out) = x W^T is, column-major, (out,rows) = W^T' x': W first (transposed), x second.
  const GemmPlan f = linear_forward_plan(5, 7, 3, true);
  CHECK(f.work == GemmWork::gemm);
  CHECK((f.first == GemmOperand::rhs && f.second == GemmOperand::lhs));
  CHECK((f.trans_first && !f.trans_second));
  CHECK((f.m == 3 && f.n == 5 && f.k == 7));
  CHECK((f.ld_first == 7 && f.ld_second == 7 && f.ldc == 3));
  CHECK(f.beta == 1.f);
  CHECK(linear_forward_plan(5, 7, 3, false).beta == 0.f);
  // Empty products: nothing to do, an empty sum (zeros, or the bias left as it is).
  CHECK(linear_forward_plan(0, 7, 3, true).work == GemmWork::nothing);
  CHECK(linear_forward_plan(5, 7, 0, false).work == GemmWork::nothing);
  CHECK(linear_forward_plan(5, 0, 3, false).work == GemmWork::zero_c);
  CHECK(linear_forward_plan(5, 0, 3, true).work == GemmWork::keep_c);
  CHECK(linear_grad_weight_plan(0, 7, 3).work == GemmWork::zero_c);  // dW of an empty batch: zeros
  CHECK(matmul_grad_a_plan(4, 6, 0).work == GemmWork::zero_c);
  const GemmPlan e = linear_forward_plan(5, 0, 3, false);
  CHECK((e.ld_first >= 1 && e.ld_second >= 1 && e.ldc >= 1));  // cuBLAS refuses ld < 1
  // Sizes beyond cuBLAS's int are refused by name.
  CHECK_THROWS_WITH(linear_forward_plan(int64_t{1} << 31, 4, 4, false),
                    Contains("linear: GEMM rows = 2147483648 is beyond the int range of the CUDA libraries"));
  CHECK_THROWS_WITH(matmul_grad_b_plan(4, int64_t{3} << 30, 4), Contains("matmul backward: ") && Contains("beyond"));
  CHECK(to_int(INT_MAX, "op", "x") == INT_MAX);
  CHECK_THROWS_WITH(to_int(-1, "op", "x"), Contains("op: x = -1 is beyond"));
}

TEST_CASE("cuda plans: channel_of and channel_element visit every element of every channel once", "[math]") {
  for (const auto& [outer, channels, inner] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {3, 4, 1}, {2, 3, 5},
                                               {1, 7, 9}, {4, 1, 6}}) {
    INFO("(outer, channels, inner) = (" << outer << ", " << channels << ", " << inner << ")");
    std::set<int64_t> seen;
    for (int64_t c = 0; c < channels; ++c) {
      for (int64_t j = 0; j < outer * inner; ++j) {
        const int64_t i = qat::op_math::channel_element(c, j, channels, inner);
        CHECK(qat::op_math::channel_of(i, channels, inner) == c);
        CHECK(seen.insert(i).second);
      }
    }
    CHECK(static_cast<int64_t>(seen.size()) == outer * channels * inner);
    CHECK(*seen.rbegin() == outer * channels * inner - 1);
  }
}

TEST_CASE("cuda plans: per-channel sums in the kernels' order give the CPU ops' bias and BN gradients", "[math]") {
  // conv2d's db (cuDNN computes it on the GPU; the sums here check the rule) and
  // batch norm's dbeta, over (N, C, H, W) gradients.
  const Tensor x = qat::testing::rand_tensor({3, 4, 5, 6}, 301, false);
  const Tensor g = qat::testing::rand_tensor({3, 4, 5, 6}, 302, false);
  const Tensor rm = Tensor::zeros({4}), rv = Tensor::ones({4});
  const auto bn = [&](const std::vector<Tensor>& t) { return qat::batch_norm(t[0], t[1], t[2], rm, rv, false); };
  const OpRun cpu = run_op(bn, {x, Tensor::ones({4}), Tensor::zeros({4})}, g, Device::cpu);
  const OpRun mag = run_abs(bn, {x, Tensor::ones({4}), Tensor::zeros({4})}, g);
  qat::testing::check_within(channel_sums_on_host(g, 4, 30), cpu.grads[2], sum_bound(mag.grads[2], 90), "dbeta");
  const Tensor w = qat::testing::rand_tensor({4, 4, 1, 1}, 303, false);
  const auto conv = [](const std::vector<Tensor>& t) { return qat::conv2d(t[0], t[1], t[2], {}); };
  const OpRun c = run_op(conv, {x, w, Tensor::zeros({4})}, g, Device::cpu);
  const OpRun cm = run_abs(conv, {x, w, Tensor::zeros({4})}, g);
  qat::testing::check_within(channel_sums_on_host(g, 4, 30), c.grads[2], sum_bound(cm.grads[2], 90), "conv db");
}

TEST_CASE("cuda plans: batch norm's eval gradient rule and its sums equal the CPU op's", "[math]") {
  for (const Shape& shape : {Shape{6, 5}, Shape{2, 3, 4, 5}}) {
    INFO("shape " << qat::shape_str(shape));
    const int64_t C = shape[1], inner = shape.size() == 4 ? shape[2] * shape[3] : 1;
    const Tensor x = qat::testing::rand_tensor(shape, 401, false);
    const Tensor g = qat::testing::rand_tensor(shape, 402, false);
    const Tensor w = qat::testing::rand_tensor({C}, 403, false);
    const Tensor rm = qat::testing::rand_tensor({C}, 404, false);
    const Tensor rv = qat::testing::abs_of(qat::testing::rand_tensor({C}, 405, false));
    const float eps = 1e-3f;
    const auto bn = [&](const std::vector<Tensor>& t) {
      return qat::batch_norm(t[0], t[1], t[2], rm, rv, false, 0.1f, eps);
    };
    const OpRun cpu = run_op(bn, {x, w, Tensor::zeros({C})}, g, Device::cpu);
    // dx: op_math::bn_eval_grad with bn_inv_std, as eval_input_grad_kernel, bit for bit.
    Tensor dx = Tensor::empty(shape), dgamma = Tensor::empty({C});
    std::vector<double> sgx(C, 0.0);
    for (int64_t i = 0; i < x.numel(); ++i) {
      const int64_t c = qat::op_math::channel_of(i, C, inner);
      const float istd = qat::op_math::bn_inv_std(rv.data<float>()[c], eps);
      dx.data<float>()[i] = qat::op_math::bn_eval_grad(g.data<float>()[i], w.data<float>()[c], istd);
    }
    qat::testing::check_same_bits(dx, cpu.grads[0], "eval dx");
    // dgamma: the sum of g (x - mean) (float products, double sums) in channel_element order, times istd.
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t j = 0; j < x.numel() / C; ++j) {
        const int64_t i = qat::op_math::channel_element(c, j, C, inner);
        sgx[c] += static_cast<double>(g.data<float>()[i] * (x.data<float>()[i] - rm.data<float>()[c]));
      }
      dgamma.data<float>()[c] = static_cast<float>(sgx[c]) * qat::op_math::bn_inv_std(rv.data<float>()[c], eps);
    }
    // Both sum in double: only the last float rounding of the sum may differ.
    std::vector<double> tol;
    for (const float v : cpu.grads[1].to_vector()) tol.push_back(4 * qat::testing::unit_roundoff() * std::fabs(v));
    qat::testing::check_within(dgamma, cpu.grads[1], tol, "eval dgamma");
  }
}

TEST_CASE("cuda plans: conv2d's descriptor numbers give the CPU op's output shape", "[math]") {
  struct Case {
    Shape x, w;
    qat::Conv2dParams p;
  };
  const Case cases[] = {
      {{2, 3, 9, 7}, {4, 3, 3, 3}, {}},
      {{1, 4, 8, 8}, {6, 2, 3, 3}, {2, 2, 1, 1, 1, 1, 2}},        // groups 2, stride 2, padding 1
      {{3, 6, 11, 10}, {6, 1, 3, 2}, {1, 2, 2, 0, 2, 3, 6}},      // depthwise, dilation, unequal everything
      {{2, 5, 6, 6}, {7, 5, 1, 1}, {}},                           // 1x1
      {{0, 3, 5, 5}, {2, 3, 3, 3}, {1, 1, 1, 1, 1, 1, 1}},        // an empty batch
  };
  for (const Case& c : cases) {
    INFO("x " << qat::shape_str(c.x) << ", w " << qat::shape_str(c.w) << ", groups " << c.p.groups);
    const ConvPlan plan = plan_conv2d(c.x, c.w, c.p);
    for (int i = 0; i < 4; ++i) {
      CHECK(plan.x[i] == c.x[i]);
      CHECK(plan.w[i] == c.w[i]);
    }
    CHECK((plan.bias[0] == 1 && plan.bias[1] == c.w[0] && plan.bias[2] == 1 && plan.bias[3] == 1));
    CHECK((plan.pad_h == c.p.pad_h && plan.pad_w == c.p.pad_w && plan.stride_h == c.p.stride_h &&
           plan.stride_w == c.p.stride_w && plan.dil_h == c.p.dil_h && plan.dil_w == c.p.dil_w &&
           plan.groups == c.p.groups));
    if (c.x[0] > 0) {
      const Tensor y = qat::conv2d(Tensor::zeros(c.x), Tensor::zeros(c.w), Tensor(), c.p);
      CHECK(Shape{plan.y[0], plan.y[1], plan.y[2], plan.y[3]} == y.sizes());
    }
#if QAT_WITH_CUDA
    // cuDNN's own output size for these descriptors (host-only calls: no GPU).
    if (c.x[0] > 0) {
      const qat::cuda::TensorDescriptor xd(plan.x);
      const qat::cuda::FilterDescriptor wd(plan.w);
      const qat::cuda::ConvolutionDescriptor cd(plan.pad_h, plan.pad_w, plan.stride_h, plan.stride_w, plan.dil_h,
                                                plan.dil_w, plan.groups);
      int n = 0, o = 0, h = 0, w = 0;
      QAT_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(cd.get(), xd.get(), wd.get(), &n, &o, &h, &w));
      CHECK(Shape{n, o, h, w} == Shape{plan.y[0], plan.y[1], plan.y[2], plan.y[3]});
    }
#endif
  }
  // Refused: an empty dimension other than the batch, sizes beyond int.
  CHECK_THROWS_WITH(plan_conv2d({2, 0, 5, 5}, {3, 0, 3, 3}, {}),
                    Contains("conv2d on cuda: cuDNN takes no empty input or filter dimension"));
  CHECK_THROWS_WITH(plan_conv2d({1, 1, 1 << 16, 1 << 16}, {1, 1, 1, 1}, {}),
                    Contains("conv2d on cuda: input size = 4294967296 is beyond the int range"));
}

TEST_CASE("cuda plans: conv algorithms are tried deterministic first, never tensor-op or transform-based", "[math]") {
  // As cuDNN's heuristic lists them, fastest first.
  const std::vector<ConvAlgoCandidate> listed = {
      {5, true, true, true, false},   // tensor-op math: TF32, refused
      {6, true, false, true, true},   // Winograd: not a plain float sum, refused
      {0, true, false, false, false}, // non-deterministic (atomics)
      {1, true, false, true, false},
      {2, false, false, true, false}, // status not ok
      {3, true, false, true, false},
      {1, true, false, true, false},  // listed twice
  };
  CHECK(order_conv_algorithms(listed) == std::vector<int>{1, 3, 0});
  CHECK(order_conv_algorithms({}).empty());
  CHECK(order_conv_algorithms({{4, true, true, true, false}}).empty());
}

TEST_CASE("cuda plans: batch norm's cuDNN shapes, and eps below cuDNN's minimum refused", "[math]") {
  const BatchNormPlan a = plan_batch_norm({8, 3}, 1e-5, 0.0, true);
  CHECK((a.x[0] == 8 && a.x[1] == 3 && a.x[2] == 1 && a.x[3] == 1));
  CHECK((a.channel[0] == 1 && a.channel[1] == 3 && a.channel[2] == 1 && a.channel[3] == 1));
  const BatchNormPlan b = plan_batch_norm({2, 5, 7, 9}, 1e-5, 0.0, false);
  CHECK((b.x[0] == 2 && b.x[1] == 5 && b.x[2] == 7 && b.x[3] == 9));
  CHECK(b.channel[1] == 5);
  CHECK_THROWS_WITH(plan_batch_norm({2, 3}, 1e-6, 1e-5, true),
                    Contains("batch_norm on cuda: eps = 1e-06 is below cuDNN's minimum CUDNN_BN_MIN_EPSILON = 1e-05"));
  CHECK_THROWS_WITH(plan_batch_norm({2, 3}, -1.0, 0.0, true), Contains("below cuDNN's minimum"));
  CHECK_THROWS_WITH(plan_batch_norm({2, 3}, std::nan(""), 0.0, true), Contains("below cuDNN's minimum"));
  CHECK_THROWS_WITH(plan_batch_norm({1 << 15, 1 << 16}, 1e-5, 0.0, true), Contains("beyond cuDNN's 32-bit indexing"));
  // The batch sizes cuDNN's kernels take, by mode.
  CHECK_NOTHROW(plan_batch_norm({65535, 2}, 1e-5, 0.0, false));
  CHECK_THROWS_WITH(plan_batch_norm({65536, 2}, 1e-5, 0.0, false),
                    Contains("a batch of 65536 is beyond the 65535 that cuDNN's inference kernels take"));
  CHECK_NOTHROW(plan_batch_norm({880801, 2}, 1e-5, 0.0, true));
  CHECK_THROWS_WITH(plan_batch_norm({880802, 2}, 1e-5, 0.0, true), Contains("training kernels"));
#if QAT_WITH_CUDA
  // cuDNN's own parameter shape for spatial mode (a host-only call: no GPU).
  const qat::cuda::TensorDescriptor xd(b.x);
  cudnnTensorDescriptor_t derived = nullptr;
  QAT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&derived));
  QAT_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(derived, xd.get(), CUDNN_BATCHNORM_SPATIAL));
  cudnnDataType_t type{};
  int n = 0, c = 0, h = 0, w = 0, sn = 0, sc = 0, sh = 0, sw = 0;
  QAT_CUDNN_CHECK(cudnnGetTensor4dDescriptor(derived, &type, &n, &c, &h, &w, &sn, &sc, &sh, &sw));
  cudnnDestroyTensorDescriptor(derived);
  CHECK(type == CUDNN_DATA_FLOAT);
  CHECK(std::vector<int>{n, c, h, w} == std::vector<int>(std::begin(b.channel), std::end(b.channel)));
  CHECK(CUDNN_BN_MIN_EPSILON >= 0.0);
#endif
}
