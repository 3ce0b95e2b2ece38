#pragma once
// The per-row and per-element bodies of the losses (core/ops/loss.h), shared
// by the CPU op (core/ops/loss.cpp, which calls them) and its CUDA twin
// (core/ops/loss.cu). Scores are contiguous (N, C) rows.
//
// Note [loss on the device]: one thread per row (a row is C classes, C is
// 10 to 1000 here), and the batch mean is a sum in row order on one thread,
// the CPU's order. The bodies call exp and log: CUDA's double exp/log are
// within 1 ulp (double) and its expf within 2 ulp (CUDA C Programming Guide,
// "Mathematical Functions"), glibc's differ, so the device's values may
// differ from the CPU's in the last bits of a float; the host tests run these
// same bodies against the CPU op exactly, the GPU tests with a tolerance of
// a few float ulps.
#include <cstdint>

#include "core/host_device.h"
#include "core/ops/math.h"

namespace qat::op_math {

// out[j] = r[j] - logsumexp(r): the row max subtracted, the sum of exps in
// double.
QAT_HOST_DEVICE inline void log_softmax_row(const float* r, int64_t c, float* out) {
  float mx = r[0];
  for (int64_t j = 1; j < c; ++j) mx = mx < r[j] ? r[j] : mx;  // std::max's rule: NaN in r[0] stays
  double s = 0;
  for (int64_t j = 0; j < c; ++j) s += exp(static_cast<double>(r[j] - mx));
  const float lse = mx + static_cast<float>(log(s));
  for (int64_t j = 0; j < c; ++j) out[j] = r[j] - lse;
}

// log_softmax's backward for one row from its output y: dx = g - exp(y) sum(g)
// (the sum in double, then rounded; Note [pinned fused multiply-add]).
QAT_HOST_DEVICE inline void log_softmax_backward_row(const float* y, const float* g, int64_t c, float* dx) {
  double s = 0;
  for (int64_t j = 0; j < c; ++j) s += g[j];
  const float sum = static_cast<float>(s);
  for (int64_t j = 0; j < c; ++j) dx[j] = mul_add(-expf(y[j]), sum, g[j]);
}

// Cross-entropy's loss of one row from its log-probabilities, with the
// smoothed target q = on at the target class plus off everywhere:
// -on logp[t] - off sum_j logp[j] (row sum in double).
QAT_HOST_DEVICE inline double cross_entropy_row(const float* logp, int64_t c, int32_t target, float on, float off) {
  double row_sum = 0;
  for (int64_t j = 0; j < c; ++j) row_sum += logp[j];
  const float target_term = -on * logp[target];
  return mul_add(-static_cast<double>(off), row_sum, static_cast<double>(target_term));
}

// The batch mean of per-row losses: summed in row order in double.
QAT_HOST_DEVICE inline float mean_in_order(const double* rows, int64_t n) {
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += rows[i];
  return static_cast<float>(total / static_cast<double>(n));
}

// Cross-entropy's gradient at element i of (N, C): g/N (p - q), p = exp(logp).
// `g` is the loss's incoming gradient (a scalar).
QAT_HOST_DEVICE inline float cross_entropy_grad_at(int64_t i, const float* logp, const int32_t* target, int64_t n,
                                                   int64_t c, float on, float off, float g) {
  const int64_t row = i / c, j = i % c;
  const float scale = g / static_cast<float>(n);
  const float q = (j == target[row] ? on : 0.f) + off;
  return scale * (expf(logp[i]) - q);
}

// nll_loss: mean over rows of -logp[i, t_i], summed in row order in double.
QAT_HOST_DEVICE inline float nll_loss_value(const float* logp, const int32_t* target, int64_t n, int64_t c) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s -= logp[i * c + target[i]];
  return static_cast<float>(s / static_cast<double>(n));
}

// nll_loss's gradient at element i of (N, C): -g/N at the target, else 0.
QAT_HOST_DEVICE inline float nll_loss_grad_at(int64_t i, const int32_t* target, int64_t n, int64_t c, float g) {
  return i % c == target[i / c] ? -g / static_cast<float>(n) : 0.f;
}

}  // namespace qat::op_math
