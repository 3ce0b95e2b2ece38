#pragma once
// The integer add of two activations on different grids, requantized onto
// the output's grid (Note [integer add]): the residual add of ResNet and
// MobileNetV2 in the integer model (issue 43; not yet a layer of it, which
// needs the graph form of the integer model).
//
// Note [integer add]
// The fake-quant model adds the two dequantized inputs in float and
// quantizes the sum onto the output grid (y's quantizer after the add, or
// after its ReLU):
//   q_y = clamp(round(R + f_y) + z_y, lo, hi),
//   R   = (s_a (q_a - z_a - f_a) + s_b (q_b - z_b - f_b)) / s_y
// (f: an LSQ+ grid's fractional zero point, else 0). The integer add computes
// R with fixed-point multipliers, as the convolutions' requantization does
// (docs/math/requantization.md), in one 64-bit sum and one rounding:
//   p   = (q_a - z_a) M_a + (q_b - z_b) M_b + E,   M = round(s / s_y 2^t),
//   E   = round((f_y - f_a s_a / s_y - f_b s_b / s_y) 2^t),
//   q_y = clamp(z_y + p / 2^t rounded half to even, lo, hi)
// with t chosen so that the larger multiplier lies in [2^30, 2^31]: |p| <
// 2^41. Each rounded constant is within 1/2 of its exact value, so p / 2^t
// is within (|q_a - z_a| + |q_b - z_b| + 1) / 2^(t+1) of R + f_y (about
// 2^-22 of a step for ratios s / s_y up to 2^8). Ties round to even, as the
// float model's nearbyint: on equal grids (M = 2^30, E = 0) the add is
// exact and equals the float model's value for value. Elsewhere the float
// model's own roundings (the two products, the sum, the product by 1 / s_y)
// can put it on the other side of a rounding boundary than the exact R: the
// two then differ by 1 (the tests count how often).
// A ReLU after the add is the lower clamp lo = z_y: round(max(x, 0) / s + f)
// = max(round(x / s + f), 0) for |f| <= 1/2.
#include <cstdint>
#include <string>

#include "core/host_device.h"
#include "core/tensor.h"

namespace qat {
enum class RowLanes;  // core/cpu_features.h (not included: CUDA sources include this header)
}  // namespace qat

namespace qat::quant {

struct ActQuant;

// The constants of one add; activations stored as q + offset (signed grids
// +128), and the zero points and clamps here are stored values too.
struct AddRequant {
  int32_t a_zero = 0, b_zero = 0;  // z_a, z_b as stored
  int64_t ma = 0, mb = 0;          // M_a, M_b: at most 2^31
  int32_t t = 1;                   // in [1, 62]
  int64_t extra = 0;               // E
  int32_t out_zero = 0;            // z_y as stored
  int32_t lo = 0, hi = 255;        // the output grid's stored range (a ReLU: lo = z_y)
};

// The constants for inputs on grids a and b and the output grid y; relu: the
// add's ReLU as the lower clamp. Throws naming `who` when a grid is invalid or
// a ratio s / s_y is 2^30 or more (no multiplier fits).
AddRequant make_add_requant(const ActQuant& a, const ActQuant& b, const ActQuant& y, bool relu, const std::string& who);

// p / 2^t rounded half to even (floor division: p may be negative).
QAT_HOST_DEVICE inline int64_t shift_round_half_even(int64_t p, int32_t t) {
  const int64_t half = int64_t{1} << (t - 1), mask = (int64_t{1} << t) - 1;
  int64_t q = (p + half) >> t;  // ties upwards
  if ((p & mask) == half && (q & 1)) q -= 1;
  return q;
}

// One input on grid a onto grid y, the same arithmetic with M_b = 0 (a
// concat's branch, Note [integer concat]): add_requant_value(x, r.b_zero, r).
AddRequant make_requant(const ActQuant& a, const ActQuant& y, const std::string& who);

// One output value from the stored inputs a and b.
QAT_HOST_DEVICE inline uint8_t add_requant_value(int32_t a, int32_t b, const AddRequant& r) {
  const int64_t p = static_cast<int64_t>(a - r.a_zero) * r.ma + static_cast<int64_t>(b - r.b_zero) * r.mb + r.extra;
  const int64_t q = r.out_zero + shift_round_half_even(p, r.t);
  return static_cast<uint8_t>(q < r.lo ? r.lo : (q > r.hi ? r.hi : q));
}

// The per-index body, for any executor (int_forward.h: Exec::each).
struct AddBody {
  const uint8_t* a;
  const uint8_t* b;
  uint8_t* y;
  AddRequant r;
  QAT_HOST_DEVICE void operator()(int64_t i) const { y[i] = add_requant_value(a[i], b[i], r); }
};

// One input of a concat into its channels [offset, offset + c_in) of y
// (c_out channels), requantized onto y's grid, or copied (Note [integer
// concat]); the per-index body over the input's elements.
struct ConcatSlice {
  const uint8_t* x;
  uint8_t* y;
  int64_t c_in, c_out, offset;
  bool copy;
  AddRequant r;
  QAT_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t pixel = i / c_in, c = i - pixel * c_in;
    y[pixel * c_out + offset + c] = copy ? x[i] : add_requant_value(x[i], r.b_zero, r);
  }
};

// Note [the add in doubles]
// Where the float lanes do not take it (Note [the add in floats]), the
// add runs on double lanes on the CPU. Every term of p is an integer;
// when 255 (M_a + M_b) + |E| < 2^53 (add_exact_in_double; with the usual
// ratios s / s_y near 1, t is about 31 and the bound about 2^40) the
// products and sums are exact in double in any order (FMA contraction
// included), p 2^-t is exact (a power of two, |x| < 2^51), and adding then
// subtracting 1.5 2^52 rounds x to the nearest integer, ties to even, in
// the default rounding mode: the same q as shift_round_half_even, for every
// input. The clamps act on integers held exactly. Elsewhere (t near 62:
// ratios of 2^-20 and less) the scalar body runs.
bool add_exact_in_double(const AddRequant& r);

// Note [the add in floats]
// Twice as many lanes again: the value x = p 2^-t + z_y, as
//   v = q_a f_a + (q_b f_b + f_c),  f_a = M_a 2^-t,  f_b = M_b 2^-t,
//   f_c = (E - M_a z_a - M_b z_b) 2^-t + z_y
// in float (the constants exact in double, then rounded once), clamped to
// [lo, hi] and rounded to the nearest integer. Seven roundings of at most
// 2^-24 of S = 255 (|f_a| + |f_b|) + |f_c| each (three constants, two
// products, two sums; an FMA makes fewer) keep |v - x| <= 8 S 2^-24 =: e
// (with a margin). Clamping moves neither further apart (clamps to integers
// are 1-Lipschitz and commute with rounding), so where the clamped v lies
// more than e from every half-integer, x rounds to the same integer; where
// it does not (a tie of x, or near one), the vector's elements go through
// the exact body instead. Taken where e <= 2^-6 (S <= 2^15: ratios s / s_y
// summing to about 60 or less); the checks then send about 2 e of the
// elements, and each vector holding one, the slow way.
struct AddFloats {
  float fa = 0, fb = 0, fc = 0;  // f_a, f_b, f_c
  float lo = 0, hi = 0;          // the clamps, as floats
  float tie = 0;                 // 1/2 - e: an element at least this far from its integer needs the exact body
};
// Whether the float lanes take r (e <= 2^-6), and their constants.
bool add_in_floats(const AddRequant& r, AddFloats* f = nullptr);

// y[i] = add_requant_value(a[i], b[i], r) for i < n on the given lanes (the
// tests run each the CPU has). One thread. floats:
// the float lanes where add_in_floats(r) (the tests also run the doubles).
void add_requant_run(const uint8_t* a, const uint8_t* b, uint8_t* y, int64_t n, const AddRequant& r, RowLanes lanes,
                     bool floats = true);

// y = the add of two u8 tensors of one shape, on the executor's device.
template <class Exec>
Tensor integer_add(Exec& ex, const Tensor& a, const Tensor& b, const AddRequant& r) {
  Tensor y = Tensor::empty(a.sizes(), DType::u8, Exec::device);
  ex.each(a.numel(),
          AddBody{Exec::template ptr<uint8_t>(a), Exec::template ptr<uint8_t>(b), Exec::template ptr<uint8_t>(y), r});
  return y;
}

// The add on the CPU executor; a and b contiguous u8 tensors of one shape
// (else an error naming `who` and both shapes).
Tensor integer_add_cpu(const Tensor& a, const Tensor& b, const AddRequant& r, const std::string& who);

}  // namespace qat::quant
