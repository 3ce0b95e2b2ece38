#pragma once
// The integers of a symmetric weight fake quantization, for INT8 training
// (quant/int8_training/int8_ops.h): its GEMMs need W = clamp(nearbyint(w / s), qmin,
// qmax) as int8, not the float s W that fake_quantize() returns.
// observe_and_quantize_codes() is what observe_and_fake_quantize() does with
// the observer and the qparams, but it writes the integers, their row sums
// and the clipped STE's few stopped gradients instead of the float tensor
// and its byte mask: one pass over the weight (read 4 bytes, write 1 per
// value) instead of three (fake quantize, then recover the integers from
// the float result). Same integers, bit for bit: W is the q the fake
// quantization multiplies by s.
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "quant/observe/observer.h"
#include "quant/qparams.h"
#include "quant/int8_training/quant_codes.h"
#include "quant/sim/fq_rows.h"

namespace qat::quant {

// Whether observe_and_quantize_codes() takes this spec: symmetric, signed,
// at most 8 bits, per tensor or per channel along axis 0.
bool codes_supported(const QuantSpec& spec);

// x: f32 contiguous, dim >= 1, x.size(0) rows. The observer observes x
// (unless obs.enabled is false); the qparams are the observer's (`used`
// receives them). A non-finite value of x is an error naming `what`.
void observe_and_quantize_codes(Observer& obs, const Tensor& x, SteKind ste, QuantCodes& out, QParams& used,
                                const std::string& what);
// The same with given qparams (the observer off), zero points 0.
void quantize_codes(const Tensor& x, const QParams& q, const QuantSpec& spec, SteKind ste, QuantCodes& out,
                    const std::string& what);

// One row with a given kernel (the instruction-set levels of fq_rows.h; the
// best one that runs is what the two above use), inv finite and > 0, 0 on the
// grid (checked): q[i] = clamp(nearbyint(x[i]
// * inv), qmin, qmax), their sum into `sum`, and the indices whose grid value
// fell outside [qmin, qmax] (NaN and inf included) appended to `outside`, in
// order. Every kernel gives the same (tests/quant/sim/test_weight_codes.cpp).
void quantize_codes_row(FqRowsKernel kernel, const float* x, int8_t* q, int64_t n, float inv, float qmin, float qmax,
                        int64_t& sum, std::vector<int64_t>& outside);

}  // namespace qat::quant
