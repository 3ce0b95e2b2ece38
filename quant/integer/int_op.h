#pragma once
// The integer ops and what the code around an op needs to know of it: freeze
// (quant/convert) fills the fields an op lists, the export (apps/integer_io)
// writes and reads exactly those, the integer model runs and validates a
// layer through its op's entry, and compare-layers asks where the float model
// produces the op's output.
//
// A new integer op: its IntOpDef in a file of ops/ (and there, optionally, a
// tuned CPU kernel), its generic code over an executor in int_forward.h
// (run_generic_layer), then one registration here: a value of IntOp and its
// entry in kIntOps (int_op.cpp).
#include <string>
#include <vector>

#include "core/tensor.h"
#include "quant/integer/int8_gemm.h"

namespace qat::quant {

// count_ is not an op: the number of ops (int_op.cpp checks that the table holds them all).
enum class IntOp { quantize_input, conv, linear, max_pool, adaptive_avg_pool, flatten, relu, add, concat, count_ };

struct IntLayer;

// The field groups of an IntLayer an op uses, besides name, op and its grids.
enum IntFields : unsigned {
  kMatmul = 1u << 0,        // int8 weights, int32 bias, weight qparams, in/out channels, relu,
                            // dequantize, requantization (multiplier, shift, bias residual)
  kConvGeometry = 1u << 1,  // kernel_h/w, conv (stride, padding, dilation); weights (O, KH, KW, I)
  kPoolGeometry = 1u << 2,  // pool (kernel, stride, padding)
  kOutputSize = 1u << 3,    // out_h, out_w
  kFloatInput = 1u << 4,    // reads the float images: the network's first layer
  // Output on the input's grid (the zero point's fraction included); the
  // float model rounds it onto that grid in the module after it (average
  // pooling).
  kRoundsOntoInputGrid = 1u << 5,
  // Reads two activations (in, in2) of one shape: the residual add.
  kTwoInputs = 1u << 6,
  // Reads two or more images of one height and width (each on its grid in
  // concat_in), joined on channels in order: the concat.
  kManyInputs = 1u << 7,
};

// One image's activation between integer layers: NHWC (h, w, c), or c
// features once flattened.
struct ActShape {
  int64_t h = 1, w = 1, c = 0;
  bool flat = false;
};

struct IntOpDef {
  IntOp op;
  const char* name;
  unsigned fields;  // IntFields
  // The op's tuned CPU kernel (integer tensor in, integer tensor out; f32
  // only at the two ends), or nullptr: the CPU then runs the op's generic
  // code like every other executor (int_forward.h, Note [integer ops over
  // executors]).
  Tensor (*cpu_kernel)(const IntLayer& layer, const Tensor& x, GemmKernel kernel);
  // Checks the layer's fields and fills its derived ones; throws naming the layer.
  void (*finalize)(IntLayer& layer);
  // Checks the layer's geometry against its input's shape and returns its
  // output's, with every size product checked; throws naming the layer. Run
  // on a loaded export before anything the size of an activation is allocated.
  ActShape (*infer)(const IntLayer& layer, const ActShape& in);
  bool has(unsigned f) const { return (fields & f) == f; }
};

const IntOpDef& int_op_def(IntOp op);
// The largest activation of one image any integer layer may produce, in
// elements (2^30: within every int32 index and far beyond any real network).
constexpr int64_t kMaxActivationElems = int64_t{1} << 30;

// The producers of layer i's inputs (Note [integer model graph]): its
// `inputs`, or i - 1 (-1: the model's input); throws naming the layer when
// one is not an earlier layer, or an add does not read two.
std::vector<int64_t> layer_inputs(const std::vector<IntLayer>& layers, size_t i);
// The shape after every layer, from the input's; throws naming the first
// layer that does not fit (an add: its two inputs' shapes differ).
std::vector<ActShape> layer_shapes(const std::vector<IntLayer>& layers, ActShape input);
// The shape after layer shapes.size(), given those of the layers before it.
ActShape next_shape(const std::vector<IntLayer>& layers, const std::vector<ActShape>& shapes, ActShape input);
// The last layer's.
ActShape infer_shapes(const std::vector<IntLayer>& layers, ActShape input);

// nullptr for an unknown name.
const IntOpDef* find_int_op(const std::string& name);
inline const char* int_op_name(IntOp op) { return int_op_def(op).name; }
// Throws naming the known ops on an unknown name.
IntOp int_op_from_name(const std::string& name);

}  // namespace qat::quant
