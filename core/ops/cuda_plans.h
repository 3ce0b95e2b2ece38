#pragma once
// The host-side arithmetic of the library-backed CUDA twins (linear, matmul
// on cuBLAS; conv2d, batch_norm on cuDNN): which library call, with which
// sizes, operands and leading dimensions. Plain functions of sizes, compiled
// in every build, so that the CPU tests ([math]) check every plan the GPU
// will run, against the CPU ops, where no GPU exists (docs/cuda.md).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "core/window.h"

namespace qat::cuda_plan {

// A value as the int the libraries take; throws naming `op` and `what` when
// it does not fit (cuBLAS's and cuDNN's sizes are int).
int to_int(int64_t v, const char* op, const char* what);

// ------------------------------------------------------------ cuBLAS GEMMs

// The tensors of a matrix product, named by their role in the op: lhs and
// rhs are matmul's a and b, linear's input and weight; grad is the gradient
// of the op's output.
enum class GemmOperand { lhs, rhs, grad };
const char* gemm_operand_name(GemmOperand o);

// The buffers a plan's operands name (device pointers for cuBLAS, host ones
// when a test runs the plan with OpenBLAS); null where the op has none.
struct GemmOperands {
  const float* lhs = nullptr;
  const float* rhs = nullptr;
  const float* grad = nullptr;
  const float* of(GemmOperand o) const;  // throws naming an operand this call did not give
};

// One row-major product, written exactly as the CPU op calls qat::sgemm:
// C(m,n) = op(A) op(B) (+ C when accumulate), op = transpose when trans_*.
struct RowMajorGemm {
  GemmOperand a, b;
  bool trans_a, trans_b;
  int64_t m, n, k, lda, ldb, ldc;
  bool accumulate = false;  // beta = 1 (C holds the bias), else beta = 0
};

// What the GEMM has to do: nothing (C is empty), zero C (k = 0, beta = 0:
// an empty sum; cuBLAS would refuse lda = 0), leave C as it is (k = 0,
// beta = 1), or the product.
enum class GemmWork { nothing, zero_c, keep_c, gemm };

// The column-major cublasSgemm call of a RowMajorGemm. A row-major (r,c)
// matrix with leading dimension ld is, read column-major, its transpose
// (c,r) with the same ld; so C = op(A) op(B) row-major is
// C^T = op(B)^T op(A)^T column-major: B goes first, A second, m and n swap,
// and each operand keeps its own transpose flag.
struct GemmPlan {
  GemmWork work;
  GemmOperand first, second;          // cublasSgemm's A and B
  bool trans_first, trans_second;     // CUBLAS_OP_T when true
  int m, n, k;                        // cuBLAS's m, n, k
  int ld_first, ld_second, ldc;
  float beta;                         // alpha is always 1
};
GemmPlan column_major(const RowMajorGemm& g, const char* op);

// The plans of core/ops/linear.cpp's products (same sizes as its sgemm calls).
// matmul: a (m,k), b (k,n).
GemmPlan matmul_forward_plan(int64_t m, int64_t k, int64_t n);   // out = a b
GemmPlan matmul_grad_a_plan(int64_t m, int64_t k, int64_t n);    // da = g b^T
GemmPlan matmul_grad_b_plan(int64_t m, int64_t k, int64_t n);    // db = a^T g
// linear: x (rows,in), weight (out,in); forward accumulates onto the bias
// already in the output when has_bias.
GemmPlan linear_forward_plan(int64_t rows, int64_t in, int64_t out, bool has_bias);  // x W^T (+ b)
GemmPlan linear_grad_input_plan(int64_t rows, int64_t in, int64_t out);              // dx = g W
GemmPlan linear_grad_weight_plan(int64_t rows, int64_t in, int64_t out);             // dW = g^T x

// ------------------------------------------------------------ cuDNN conv2d

// The numbers of conv2d's cuDNN descriptors (NCHW, float): input, filter
// (O, C/groups, KH, KW; cuDNN's group convolution takes the per-group input
// channels), output, and the convolution's padding, stride, dilation and
// group count. The output size is conv_out_size's (the CPU op's); the twin
// checks that cuDNN computes the same.
struct ConvPlan {
  int x[4], w[4], y[4];  // N,C,H,W / O,C/g,KH,KW / N,O,OH,OW
  int pad_h, pad_w, stride_h, stride_w, dil_h, dil_w, groups;
  int bias[4];           // 1,O,1,1: the bias as a tensor broadcast over y
};
// x: (N,C,H,W), weight: (O,C/groups,KH,KW), already checked by conv2d.
// Refuses sizes beyond cuDNN's int dimensions and strides, and an empty
// input or filter other than N = 0 (which the twin handles without cuDNN).
ConvPlan plan_conv2d(const Shape& x, const Shape& weight, const Conv2dParams& p);

// One algorithm cuDNN's heuristic (cudnnGetConvolution*Algorithm_v7) lists,
// in the order it lists them (fastest expected first).
struct ConvAlgoCandidate {
  int algo;
  bool status_ok;        // status == CUDNN_STATUS_SUCCESS
  bool tensor_op_math;   // mathType is CUDNN_TENSOR_OP_MATH(_ALLOW_CONVERSION)
  bool deterministic;    // determinism == CUDNN_DETERMINISTIC
  bool transform_based;  // an FFT or Winograd algorithm
};
// The algorithms to try, in order: those cuDNN says it can run, with neither
// tensor-op math nor an FFT/Winograd transform (Note [FP32 on the GPU]: a
// transform's rounding errors scale with whole tiles or planes, not with the
// terms of each output's sum, so they are not bounded the way the CPU op's
// are); deterministic ones first (a run repeats its sums, as the CPU ops do),
// cuDNN's order otherwise. The twin runs the first one cuDNN accepts with
// CUDNN_FMA_MATH.
std::vector<int> order_conv_algorithms(const std::vector<ConvAlgoCandidate>& listed);

// ------------------------------------------------------ cuDNN batch norm

// batch_norm's input as cuDNN's 4-D NCHW tensor ((N,C) is (N,C,1,1); spatial
// mode normalises each channel over N, H and W) and its (1,C,1,1) scale,
// bias, mean and variance. Refuses what cuDNN cannot take: sizes beyond int,
// and eps below cuDNN's minimum (min_epsilon: CUDNN_BN_MIN_EPSILON, 0 in
// cuDNN 9), or NaN.
struct BatchNormPlan {
  int x[4];
  int channel[4];  // 1,C,1,1
};
// batch_stats: normalised with the batch's statistics (cuDNN's training
// kernels) or with running ones (its inference kernel). Refuses what cuDNN's
// kernels are known to refuse (PyTorch keeps these cases off cuDNN): a batch
// beyond 880801 with batch statistics or 65535 with running ones, and
// inputs of INT_MAX elements or more (32-bit indexing).
BatchNormPlan plan_batch_norm(const Shape& x, double eps, double min_epsilon, bool batch_stats);

}  // namespace qat::cuda_plan
