#include "core/ops/cuda_plans.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace qat::cuda_plan {

int to_int(int64_t v, const char* op, const char* what) {
  QAT_CHECK(v >= 0 && v <= INT_MAX, op, ": ", what, " = ", v, " is beyond the int range of the CUDA libraries (",
            INT_MAX, ")");
  return static_cast<int>(v);
}

const char* gemm_operand_name(GemmOperand o) {
  switch (o) {
    case GemmOperand::lhs: return "lhs";
    case GemmOperand::rhs: return "rhs";
    case GemmOperand::grad: return "grad";
  }
  return "?";
}

namespace {

GemmWork work_of(const RowMajorGemm& g) {
  if (g.m == 0 || g.n == 0) return GemmWork::nothing;
  if (g.k == 0) return g.accumulate ? GemmWork::keep_c : GemmWork::zero_c;
  return GemmWork::gemm;
}

}  // namespace

GemmPlan column_major(const RowMajorGemm& g, const char* op) {
  GemmPlan p{};
  p.work = work_of(g);
  p.first = g.b;
  p.second = g.a;
  p.trans_first = g.trans_b;
  p.trans_second = g.trans_a;
  p.m = to_int(g.n, op, "GEMM columns");
  p.n = to_int(g.m, op, "GEMM rows");
  p.k = to_int(g.k, op, "GEMM inner size");
  // cuBLAS wants every leading dimension >= 1, even of an empty operand.
  p.ld_first = to_int(std::max<int64_t>(g.ldb, 1), op, "leading dimension");
  p.ld_second = to_int(std::max<int64_t>(g.lda, 1), op, "leading dimension");
  p.ldc = to_int(std::max<int64_t>(g.ldc, 1), op, "leading dimension");
  p.beta = g.accumulate ? 1.f : 0.f;
  return p;
}

// Each RowMajorGemm below is the CPU op's sgemm call in core/ops/linear.cpp,
// argument for argument.
GemmPlan matmul_forward_plan(int64_t m, int64_t k, int64_t n) {
  return column_major({GemmOperand::lhs, GemmOperand::rhs, false, false, m, n, k, k, n, n}, "matmul");
}

GemmPlan matmul_grad_a_plan(int64_t m, int64_t k, int64_t n) {
  return column_major({GemmOperand::grad, GemmOperand::rhs, false, true, m, k, n, n, n, k}, "matmul backward");
}

GemmPlan matmul_grad_b_plan(int64_t m, int64_t k, int64_t n) {
  return column_major({GemmOperand::lhs, GemmOperand::grad, true, false, k, n, m, k, n, n}, "matmul backward");
}

GemmPlan linear_forward_plan(int64_t rows, int64_t in, int64_t out, bool has_bias) {
  RowMajorGemm g{GemmOperand::lhs, GemmOperand::rhs, false, true, rows, out, in, in, in, out};
  g.accumulate = has_bias;
  return column_major(g, "linear");
}

GemmPlan linear_grad_input_plan(int64_t rows, int64_t in, int64_t out) {
  return column_major({GemmOperand::grad, GemmOperand::rhs, false, false, rows, in, out, out, in, in},
                      "linear backward");
}

GemmPlan linear_grad_weight_plan(int64_t rows, int64_t in, int64_t out) {
  return column_major({GemmOperand::grad, GemmOperand::lhs, true, false, out, in, rows, out, in, in},
                      "linear backward");
}

namespace {

// A 4-D tensor's sizes as ints, refusing one whose element count (and so its
// largest stride) is beyond int: cuDNN's legacy descriptors take int sizes
// and strides and refuse tensors of 2^31 elements or more.
void four_ints(const int64_t (&sizes)[4], int (&out)[4], const char* op, const char* what) {
  int64_t numel = 1;
  for (int i = 0; i < 4; ++i) {
    out[i] = to_int(sizes[i], op, what);
    numel *= sizes[i];
  }
  to_int(numel, op, what);
}

}  // namespace

ConvPlan plan_conv2d(const Shape& x, const Shape& weight, const Conv2dParams& p) {
  const char* op = "conv2d on cuda";
  QAT_CHECK(x.size() == 4 && weight.size() == 4, op, ": expected 4-D input and weight, got ", x, " and ", weight);
  for (int i = 1; i < 4; ++i)
    QAT_CHECK(x[i] > 0 && weight[i - 1] > 0 && weight[i] > 0, op, ": cuDNN takes no empty input or filter "
              "dimension other than the batch, got input ", x, " and weight ", weight);
  const int64_t oh = conv_out_size(x[2], weight[2], p.stride_h, p.pad_h, p.dil_h, "conv2d");
  const int64_t ow = conv_out_size(x[3], weight[3], p.stride_w, p.pad_w, p.dil_w, "conv2d");
  ConvPlan c{};
  four_ints({x[0], x[1], x[2], x[3]}, c.x, op, "input size");
  four_ints({weight[0], weight[1], weight[2], weight[3]}, c.w, op, "weight size");
  four_ints({x[0], weight[0], oh, ow}, c.y, op, "output size");
  four_ints({1, weight[0], 1, 1}, c.bias, op, "bias size");
  c.pad_h = to_int(p.pad_h, op, "padding");
  c.pad_w = to_int(p.pad_w, op, "padding");
  c.stride_h = to_int(p.stride_h, op, "stride");
  c.stride_w = to_int(p.stride_w, op, "stride");
  c.dil_h = to_int(p.dil_h, op, "dilation");
  c.dil_w = to_int(p.dil_w, op, "dilation");
  c.groups = to_int(p.groups, op, "groups");
  return c;
}

std::vector<int> order_conv_algorithms(const std::vector<ConvAlgoCandidate>& listed) {
  std::vector<int> deterministic, other;
  for (const ConvAlgoCandidate& c : listed) {
    if (!c.status_ok || c.tensor_op_math || c.transform_based) continue;
    std::vector<int>& into = c.deterministic ? deterministic : other;
    if (std::find(into.begin(), into.end(), c.algo) == into.end()) into.push_back(c.algo);
  }
  for (const int a : other)
    if (std::find(deterministic.begin(), deterministic.end(), a) == deterministic.end()) deterministic.push_back(a);
  return deterministic;
}

BatchNormPlan plan_batch_norm(const Shape& x, double eps, double min_epsilon, bool batch_stats) {
  const char* op = "batch_norm on cuda";
  QAT_CHECK(x.size() == 2 || x.size() == 4, op, ": expected input (N,C) or (N,C,H,W), got ", x);
  QAT_CHECK(!std::isnan(eps) && eps >= min_epsilon, op, ": eps = ", eps, " is below cuDNN's minimum ",
            "CUDNN_BN_MIN_EPSILON = ", min_epsilon, "; use eps >= ", min_epsilon, " or the CPU");
  const int64_t max_batch = batch_stats ? 880801 : 65535;
  QAT_CHECK(x[0] <= max_batch, op, ": a batch of ", x[0], " is beyond the ", max_batch, " that cuDNN's ",
            batch_stats ? "training" : "inference", " kernels take; split the batch or use the CPU");
  QAT_CHECK(shape_numel(x) < int64_t{std::numeric_limits<int>::max()}, op, ": input ", x, " has ", shape_numel(x),
            " elements, beyond cuDNN's 32-bit indexing; split the batch or use the CPU");
  BatchNormPlan b{};
  const int64_t h = x.size() == 4 ? x[2] : 1, w = x.size() == 4 ? x[3] : 1;
  four_ints({x[0], x[1], h, w}, b.x, op, "input size");
  four_ints({1, x[1], 1, 1}, b.channel, op, "channel count");
  return b;
}

const float* GemmOperands::of(GemmOperand o) const {
  const float* p = o == GemmOperand::lhs ? lhs : o == GemmOperand::rhs ? rhs : grad;
  QAT_CHECK(p != nullptr, "GEMM: the plan names operand ", gemm_operand_name(o), ", which this call did not give");
  return p;
}

}  // namespace qat::cuda_plan
