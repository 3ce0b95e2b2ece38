#pragma once
// Tolerances for comparing two float implementations of one op (the CPU op
// and its CUDA twin, or a cuBLAS plan run on the host), derived from the
// float-sum error bound rather than picked: a sum of K float terms, added in
// any order (sequential, pairwise, blocked, atomics), differs from the exact
// sum by at most gamma_K * sum|terms|, gamma_K = K u / (1 - K u), u = 2^-24
// (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., 3.1 and
// 4.2). Two implementations that each meet it differ by at most twice that.
// For a product or convolution, sum|terms| of every output is the same op
// applied to the absolute values of its inputs (and of the upstream
// gradient, for a gradient), which the CPU op computes: run_abs below.
// A wrong layout, operand or transpose breaks such a bound by orders of
// magnitude, while a correct implementation stays within it whatever its
// order of summation.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/tensor.h"

namespace qat::testing {

inline double unit_roundoff() { return std::ldexp(1.0, -24); }

inline double gamma_k(int64_t k) {
  const double ku = static_cast<double>(k) * unit_roundoff();
  return ku / (1.0 - ku);
}

// |t| elementwise, a fresh CPU tensor.
inline Tensor abs_of(const Tensor& t) {
  std::vector<float> v = t.to_vector();
  for (float& x : v) x = std::fabs(x);
  return Tensor::from_vector(v, t.sizes());
}

// An op's output and the gradients of its inputs for one upstream gradient.
struct OpRun {
  Tensor y;
  std::vector<Tensor> grads;  // one per input; undefined where none was asked
};

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Runs `op` on fresh leaves copied from `inputs` (on `device`; an undefined
// input stays undefined, no_grad[i] leaves input i without a gradient), then
// backward with `g`; results copied to the CPU.
inline OpRun run_op(const OpFn& op, const std::vector<Tensor>& inputs, const Tensor& g, Device device,
                    const std::vector<bool>& no_grad = {}) {
  std::vector<Tensor> leaves;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      leaves.emplace_back();
      continue;
    }
    Tensor l = inputs[i].detach().to(device);
    if (l.same_storage(inputs[i])) l = l.clone();
    const bool wants = i >= no_grad.size() || !no_grad[i];
    leaves.push_back(wants ? l.set_requires_grad(true) : l);
  }
  const Tensor y = op(leaves);
  OpRun r;
  r.y = y.detach().to(Device::cpu);
  if (y.requires_grad()) y.backward(g.to(device));
  for (const Tensor& l : leaves)
    r.grads.push_back(l.defined() && l.grad().defined() ? l.grad().to(Device::cpu) : Tensor());
  return r;
}

// The same op on the absolute values of the inputs and of g, on the CPU:
// every output and gradient is then the sum of the absolute values of the
// terms the real one sums.
inline OpRun run_abs(const OpFn& op, const std::vector<Tensor>& inputs, const Tensor& g,
                     const std::vector<bool>& no_grad = {}) {
  std::vector<Tensor> a;
  for (const Tensor& t : inputs) a.push_back(t.defined() ? abs_of(t) : Tensor());
  return run_op(op, a, abs_of(g), Device::cpu, no_grad);
}

// Elementwise |actual - expected| <= tolerance (all CPU tensors of one
// shape); NaN anywhere fails. On failure: how many, and the first.
inline void check_within(const Tensor& actual, const Tensor& expected, const std::vector<double>& tolerance,
                         const std::string& what) {
  INFO(what);
  REQUIRE(actual.defined());
  REQUIRE(expected.defined());
  REQUIRE(actual.sizes() == expected.sizes());
  const std::vector<float> a = actual.to_vector(), e = expected.to_vector();
  REQUIRE(tolerance.size() == a.size());
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!(std::fabs(static_cast<double>(a[i]) - e[i]) <= tolerance[i])) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++bad;
    }
  }
  if (first >= 0)
    INFO("first at flat index " << first << ": " << a[first] << " vs " << e[first] << ", tolerance "
                                << tolerance[first]);
  INFO(bad << "/" << a.size() << " elements beyond the tolerance");
  CHECK(bad == 0);
}

// 2 gamma_K * magnitude per element (plus the smallest normal float, for
// exact zeros): the bound between two float sums of K terms.
inline std::vector<double> sum_bound(const Tensor& magnitude, int64_t k) {
  const double gk = gamma_k(k);
  std::vector<double> tol;
  for (const float m : magnitude.to_vector()) tol.push_back(2 * gk * m + 1.2e-38);
  return tol;
}

}  // namespace qat::testing
