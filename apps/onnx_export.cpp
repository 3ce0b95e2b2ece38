#include "apps/onnx_export.h"

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <cerrno>
#include <vector>

#include "core/error.h"
#include "core/text_file.h"
#include "core/window.h"
#include "quant/integer/int_op.h"

namespace qat::apps {

namespace {

using quant::ActQuant;
using quant::IntLayer;
using quant::IntOp;

constexpr int64_t kOpset = 13;  // per-axis QuantizeLinear / DequantizeLinear

// The graph under construction, with unique names for what it adds.
class Builder {
 public:
  explicit Builder(onnx::GraphProto* g) : g_(g) {}

  std::string name(const std::string& base) { return base + "_" + std::to_string(next_++); }

  template <class T>
  std::string constant(const std::string& base, int32_t type, const std::vector<int64_t>& dims, const T* data,
                       int64_t n) {
    onnx::TensorProto* t = g_->add_initializer();
    const std::string nm = name(base);
    t->set_name(nm);
    t->set_data_type(type);
    for (int64_t d : dims) t->add_dims(d);
    t->set_raw_data(std::string(reinterpret_cast<const char*>(data), static_cast<size_t>(n) * sizeof(T)));
    return nm;
  }
  std::string scalar_f32(const std::string& base, float v) {
    return constant(base, onnx::TensorProto::FLOAT, {}, &v, 1);
  }
  std::string zero_point(const std::string& base, int32_t z, bool is_signed) {
    if (is_signed) {
      const auto v = static_cast<int8_t>(z);
      return constant(base, onnx::TensorProto::INT8, {}, &v, 1);
    }
    const auto v = static_cast<uint8_t>(z);
    return constant(base, onnx::TensorProto::UINT8, {}, &v, 1);
  }

  onnx::NodeProto* node(const std::string& op, const std::vector<std::string>& in, const std::string& out_base,
                        std::string* out) {
    onnx::NodeProto* n = g_->add_node();
    n->set_op_type(op);
    n->set_name(name(op));
    for (const std::string& i : in) n->add_input(i);
    *out = name(out_base);
    n->add_output(*out);
    return n;
  }
  static void ints(onnx::NodeProto* n, const std::string& attr, const std::vector<int64_t>& v) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name(attr);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  static void one_int(onnx::NodeProto* n, const std::string& attr, int64_t v) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name(attr);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }

 private:
  onnx::GraphProto* g_;
  int next_ = 0;
};

void check_grid(const ActQuant& q, const IntLayer& l, const char* which, OnnxProfile profile) {
  QAT_CHECK(q.zero_frac == 0.f, "export --format onnx: layer ", l.name, ": its ", which,
            " grid has a fractional zero point (LSQ+ offset ", q.zero_frac,
            "), which QuantizeLinear cannot express; train with quant.method lsq or an observer");
  QAT_CHECK(profile != OnnxProfile::tensorrt || (q.bits == 8 && q.is_signed && q.zero_point == 0),
            "export --onnx-profile tensorrt: layer ", l.name, ": its ", which, " grid is ",
            q.is_signed ? "int" : "uint", q.bits, " with zero point ", q.zero_point,
            "; TensorRT's explicit quantization needs int8 with zero point 0 (quant.backend: tensorrt)");
}

// x on grid q: [Clip to the grid's range when it has fewer than 8 bits] ->
// QuantizeLinear -> DequantizeLinear; returns the DQ output.
std::string qdq(Builder& b, const std::string& x, const ActQuant& q, const std::string& tag) {
  const std::string s = b.scalar_f32(tag + "_scale", q.scale), z = b.zero_point(tag + "_zero_point", q.zero_point,
                                                                                q.is_signed);
  std::string in = x;
  if (q.bits < 8) {
    const float lo = static_cast<float>(q.qmin() - q.zero_point) * q.scale;
    const float hi = static_cast<float>(q.qmax() - q.zero_point) * q.scale;
    b.node("Clip", {x, b.scalar_f32(tag + "_min", lo), b.scalar_f32(tag + "_max", hi)}, tag + "_clipped", &in);
  }
  std::string qv, dq;
  b.node("QuantizeLinear", {in, s, z}, tag + "_q", &qv);
  b.node("DequantizeLinear", {qv, s, z}, tag + "_dq", &dq);
  return dq;
}

// The weight (int8 or uint8 initializer) and its per-channel DQ.
std::string weight_dq(Builder& b, const IntLayer& l, OnnxProfile profile) {
  const int64_t O = l.out_channels;
  for (int64_t c = 0; c < O; ++c)
    QAT_CHECK(l.weight_zero_frac.data<float>()[c] == 0.f, "export --format onnx: layer ", l.name,
              ": channel ", c, " has a fractional weight zero point (LSQ+), which DequantizeLinear cannot express");
  const int32_t* zp = l.weight_zero_point.data<int32_t>();
  for (int64_t c = 0; c < O; ++c)
    QAT_CHECK(profile != OnnxProfile::tensorrt || (l.weight_signed && l.weight_bits == 8 && zp[c] == 0),
              "export --onnx-profile tensorrt: layer ", l.name, ": weights int", l.weight_bits, " ",
              l.weight_signed ? "signed" : "unsigned", " with zero point ", zp[c], " (channel ", c,
              "); TensorRT needs symmetric int8 weights");
  const bool conv = l.op == IntOp::conv;
  const Tensor w = conv ? quant::weight_oihw_from_ohwi(l.weight) : l.weight;  // int8 storage
  std::vector<int64_t> dims(w.sizes().begin(), w.sizes().end());
  const int32_t type = l.weight_signed ? onnx::TensorProto::INT8 : onnx::TensorProto::UINT8;
  const std::string wn = b.constant(l.name + "_weight", type, dims, w.data<int8_t>(), w.numel());
  const std::string sn = b.constant(l.name + "_weight_scale", onnx::TensorProto::FLOAT, {O},
                                    l.weight_scale.data<float>(), O);
  std::vector<int8_t> z8(static_cast<size_t>(O));
  for (int64_t c = 0; c < O; ++c) z8[c] = static_cast<int8_t>(zp[c]);  // (uint8 zero points: the same byte)
  const std::string zn = b.constant(l.name + "_weight_zero_point", type, {O}, z8.data(), O);
  std::string out;
  Builder::one_int(b.node("DequantizeLinear", {wn, sn, zn}, l.name + "_weight_dq", &out), "axis", 0);
  return out;
}

// The bias as qat's requantization adds it: bias[c] + residual[c] / M0[c]
// accumulator LSBs (the integer and its fraction, freeze.cpp), times
// s_x s_w[c], as a float initializer. An int32 bias with a DequantizeLinear
// would drop the fraction: up to 1/2 accumulator LSB, which is most of an
// output LSB where the weights are 4-bit (M = s_x s_w / s_y near 1).
std::string bias_float(Builder& b, const IntLayer& l) {
  const int64_t O = l.out_channels;
  std::vector<float> v(static_cast<size_t>(O));
  for (int64_t c = 0; c < O; ++c) {
    const double sxw = static_cast<double>(l.in.scale) * static_cast<double>(l.weight_scale.data<float>()[c]);
    double acc_units = l.bias.data<int32_t>()[c];
    if (!l.dequantize)
      acc_units += static_cast<double>(l.bias_residual.data<int32_t>()[c]) / l.multiplier.data<int32_t>()[c];
    v[c] = static_cast<float>(acc_units * sxw);
  }
  return b.constant(l.name + "_bias", onnx::TensorProto::FLOAT, {O}, v.data(), O);
}

// The bias as int32 + DequantizeLinear (scale s_x s_w[c]): the standard QDQ
// pattern that ONNX Runtime fuses into its integer kernels; qat's bias
// fraction is dropped (up to 1/2 accumulator LSB per output).
std::string bias_int32(Builder& b, const IntLayer& l) {
  const int64_t O = l.out_channels;
  std::vector<float> s(static_cast<size_t>(O));
  for (int64_t c = 0; c < O; ++c)
    s[c] = static_cast<float>(static_cast<double>(l.in.scale) * static_cast<double>(l.weight_scale.data<float>()[c]));
  const std::string bn = b.constant(l.name + "_bias", onnx::TensorProto::INT32, {O}, l.bias.data<int32_t>(), O);
  const std::string sn = b.constant(l.name + "_bias_scale", onnx::TensorProto::FLOAT, {O}, s.data(), O);
  std::string out;
  Builder::one_int(b.node("DequantizeLinear", {bn, sn}, l.name + "_bias_dq", &out), "axis", 0);
  return out;
}

std::string matmul_layer(Builder& b, const IntLayer& l, const std::string& x, const OnnxExportOptions& opt) {
  const OnnxProfile profile = opt.profile;
  check_grid(l.in, l, "input", profile);
  const std::string w = weight_dq(b, l, profile), bias = opt.int32_bias ? bias_int32(b, l) : bias_float(b, l);
  std::string y;
  if (l.op == IntOp::conv) {
    onnx::NodeProto* n = b.node("Conv", {x, w, bias}, l.name, &y);
    Builder::ints(n, "kernel_shape", {l.kernel_h, l.kernel_w});
    Builder::ints(n, "strides", {l.conv.stride_h, l.conv.stride_w});
    Builder::ints(n, "pads", {l.conv.pad_h, l.conv.pad_w, l.conv.pad_h, l.conv.pad_w});
    Builder::ints(n, "dilations", {l.conv.dil_h, l.conv.dil_w});
    if (l.conv.groups != 1) Builder::one_int(n, "group", l.conv.groups);
  } else {
    Builder::one_int(b.node("Gemm", {x, w, bias}, l.name, &y), "transB", 1);
  }
  if (l.clamp_max != INT32_MAX) {
    // ReLU6 (Note [ReLU6 as a clamp]): clipped at the real value of the upper clamp's grid value, which
    // QuantizeLinear then maps onto that value itself.
    const float hi = static_cast<float>(l.clamp_max - l.out.zero_point) * l.out.scale;
    b.node("Clip", {y, b.scalar_f32(l.name + "_relu6_min", 0.f), b.scalar_f32(l.name + "_relu6_max", hi)},
           l.name + "_relu6", &y);
  } else if (l.relu) {
    b.node("Relu", {y}, l.name + "_relu", &y);
  }
  if (l.dequantize) return y;  // float logits
  check_grid(l.out, l, "output", profile);
  return qdq(b, y, l.out, l.name + "_out");
}

// The largest window of adaptive pooling `in` to `out` along one dimension.
int64_t window_max(int64_t in, int64_t out) {
  int64_t m = 0;
  for (int64_t i = 0; i < out; ++i) m = std::max(m, adaptive_window(i, in, out).size());
  return m;
}

// Adaptive average pooling of x (on grid q, an (h, w) map) to (oh, ow), as
// qat's kernel: the average of the window's integers rounded half up, on the
// same grid. The pooling runs on the integers v = q - z (recovered with
// QuantizeLinear, then DequantizeLinear at scale 1): their sums are exact in
// float (below 2^24), so an average k / count is one rounding of the exact
// quotient. A tie is exactly .5 and every other average at least 1 / count
// from one, so adding 1 / (4 max_count) before QuantizeLinear (scale 1, zero
// point z; it rounds half to even) turns exactly the ties up. Windows: the
// same as qat's; AveragePool when they tile the map, else a MatMul by the
// windows' 0/1 matrix (exact sums) times 1 / count.
std::string adaptive_pool(Builder& b, const IntLayer& l, const std::string& x, int64_t h, int64_t w) {
  const int64_t oh = l.out_h, ow = l.out_w;
  if (h == oh && w == ow) return x;  // every window one value: x itself
  const ActQuant& q = l.out;
  const std::string one = b.scalar_f32(l.name + "_unit", 1.f), z = b.zero_point(l.name + "_z", q.zero_point,
                                                                                q.is_signed);
  std::string codes, v, y;
  b.node("QuantizeLinear", {x, b.scalar_f32(l.name + "_s", q.scale), z}, l.name + "_codes", &codes);
  b.node("DequantizeLinear", {codes, one, z}, l.name + "_int", &v);
  if (h % oh == 0 && w % ow == 0) {
    onnx::NodeProto* n = b.node("AveragePool", {v}, l.name, &y);
    Builder::ints(n, "kernel_shape", {h / oh, w / ow});
    Builder::ints(n, "strides", {h / oh, w / ow});
  } else {
    std::vector<float> m(static_cast<size_t>(h * w * oh * ow), 0.f), inv(static_cast<size_t>(oh * ow));
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        const AdaptiveWindow wr = adaptive_window(i, h, oh), wc = adaptive_window(j, w, ow);
        inv[static_cast<size_t>(i * ow + j)] = 1.f / static_cast<float>(wr.size() * wc.size());
        for (int64_t r = wr.begin; r < wr.end; ++r)
          for (int64_t c = wc.begin; c < wc.end; ++c) m[static_cast<size_t>((r * w + c) * oh * ow + i * ow + j)] = 1.f;
      }
    const std::vector<int64_t> flat = {0, 0, h * w}, back = {0, 0, oh, ow};
    std::string t;
    b.node("Reshape", {v, b.constant(l.name + "_flat_shape", onnx::TensorProto::INT64, {3}, flat.data(), 3)},
           l.name + "_flat", &t);
    b.node("MatMul", {t, b.constant(l.name + "_windows", onnx::TensorProto::FLOAT, {h * w, oh * ow}, m.data(),
                                    h * w * oh * ow)},
           l.name + "_sum", &t);
    b.node("Mul", {t, b.constant(l.name + "_inv_count", onnx::TensorProto::FLOAT, {oh * ow}, inv.data(), oh * ow)},
           l.name + "_avg", &t);
    b.node("Reshape", {t, b.constant(l.name + "_shape", onnx::TensorProto::INT64, {4}, back.data(), 4)}, l.name, &y);
  }
  const int64_t count = window_max(h, oh) * window_max(w, ow);
  QAT_CHECK(count * std::max(q.qmax() - q.zero_point, q.zero_point - q.qmin()) < (int64_t{1} << 24),
            "export --format onnx: layer ", l.name, ": a pooling window of ", count,
            " values: its integer sums would not be exact in float");
  b.node("Add", {y, b.scalar_f32(l.name + "_half_up", 1.f / static_cast<float>(4 * count))}, l.name + "_half_up", &y);
  std::string rq, out;
  b.node("QuantizeLinear", {y, one, z}, l.name + "_round", &rq);
  b.node("DequantizeLinear", {rq, b.scalar_f32(l.name + "_scale", q.scale), z}, l.name + "_out", &out);
  return out;
}

void set_tensor_type(onnx::ValueInfoProto* v, const std::string& name, const std::vector<int64_t>& dims) {
  v->set_name(name);
  onnx::TypeProto_Tensor* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  onnx::TensorShapeProto* s = t->mutable_shape();
  s->add_dim()->set_dim_param("N");
  for (int64_t d : dims) s->add_dim()->set_dim_value(d);
}

}  // namespace

void export_onnx(const quant::IntegerModel& model, const OnnxExportOptions& opt, const std::string& path) {
  QAT_CHECK(!model.layers.empty() && model.layers.front().op == IntOp::quantize_input,
            "export --format onnx: the integer model must start with quantize_input");
  QAT_CHECK(!(opt.int32_bias && opt.profile == OnnxProfile::tensorrt),
            "export: --onnx-int32-bias with --onnx-profile tensorrt: TensorRT's explicit quantization takes float "
            "biases (its Q/DQ layers are int8)");
  onnx::ModelProto m;
  m.set_ir_version(7);  // opset 13's IR
  m.set_producer_name(opt.producer);
  onnx::OperatorSetIdProto* os = m.add_opset_import();
  os->set_domain("");
  os->set_version(kOpset);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("qat_qdq");
  Builder b(g);
  set_tensor_type(g->add_input(), "input", {3, opt.image_size, opt.image_size});

  // Each layer's input shape (h, w, c) for the pools: the integer model's own inference.
  const quant::ActShape input{opt.image_size, opt.image_size, 3, false};
  const std::vector<quant::ActShape> outs = quant::layer_shapes(model.layers, input);
  std::vector<quant::ActShape> shapes;
  std::vector<std::string> names(model.layers.size());  // each layer's output tensor
  bool logits = false;
  for (size_t i = 0; i < model.layers.size(); ++i) {
    const IntLayer& l = model.layers[i];
    const std::vector<int64_t> from = quant::layer_inputs(model.layers, i);  // (Note [integer model graph])
    shapes.push_back(from[0] < 0 ? input : outs[static_cast<size_t>(from[0])]);
    std::string x = from[0] < 0 ? "input" : names[static_cast<size_t>(from[0])];
    QAT_CHECK(!logits, "export --format onnx: layer ", l.name, " follows the float output");
    switch (l.op) {
      case IntOp::add: {  // the float sum of the two dequantized inputs, then onto the output grid
        check_grid(l.out, l, "output", opt.profile);
        b.node("Add", {x, names[static_cast<size_t>(from[1])]}, l.name, &x);
        if (l.relu) b.node("Relu", {x}, l.name + "_relu", &x);
        x = qdq(b, x, l.out, l.name + "_out");
        break;
      }
      case IntOp::concat: {  // the dequantized inputs joined on channels, then onto the output grid
        check_grid(l.out, l, "output", opt.profile);
        std::vector<std::string> parts;
        for (const int64_t p : from) parts.push_back(names[static_cast<size_t>(p)]);
        Builder::one_int(b.node("Concat", parts, l.name, &x), "axis", 1);
        x = qdq(b, x, l.out, l.name + "_out");
        break;
      }
      case IntOp::quantize_input:
        check_grid(l.out, l, "output", opt.profile);
        x = qdq(b, x, l.out, l.name + "_in");
        break;
      case IntOp::conv:
      case IntOp::linear:
        x = matmul_layer(b, l, x, opt);
        logits = l.dequantize;
        break;
      case IntOp::max_pool: {
        onnx::NodeProto* n = b.node("MaxPool", {x}, l.name, &x);
        Builder::ints(n, "kernel_shape", {l.pool.kernel_h, l.pool.kernel_w});
        Builder::ints(n, "strides", {l.pool.stride_h, l.pool.stride_w});
        Builder::ints(n, "pads", {l.pool.pad_h, l.pool.pad_w, l.pool.pad_h, l.pool.pad_w});
        break;  // values stay on the input's grid
      }
      case IntOp::adaptive_avg_pool:
        check_grid(l.out, l, "output", opt.profile);
        x = adaptive_pool(b, l, x, shapes[i].h, shapes[i].w);
        break;
      case IntOp::flatten: {
        Builder::one_int(b.node("Flatten", {x}, l.name, &x), "axis", 1);
        break;
      }
      case IntOp::relu: b.node("Relu", {x}, l.name, &x); break;
      case IntOp::count_: QAT_FAIL("export --format onnx: bad layer op");
    }
    names[i] = x;
  }
  QAT_CHECK(logits && model.layers.back().op == IntOp::linear,
            "export --format onnx: the model must end in a linear layer with float output (logits (N, classes)); "
            "it ends in ", model.layers.back().name);
  // The last node's output is the graph's output.
  onnx::NodeProto* last = g->mutable_node(g->node_size() - 1);
  last->set_output(0, "logits");
  set_tensor_type(g->add_output(), "logits", {model.num_classes()});

  try {
    onnx::checker::check_model(m);
  } catch (const std::exception& e) {
    QAT_FAIL("export --format onnx: the ONNX checker refused the graph: ", e.what());
  }
  // Written beside and renamed (write_text_file_atomic, binary-safe): an existing file is replaced whole or not at
  // all, the temporary is per process and fsynced, and those of killed exports are removed (Note [dead temporaries]).
  std::string bytes;
  QAT_CHECK(m.SerializeToString(&bytes), "export --format onnx: cannot serialise the model for ", path);
  try {
    write_text_file_atomic(path, bytes);
  } catch (const Error& e) {
    QAT_FAIL("export --format onnx: ", e.what());
  }
}

}  // namespace qat::apps
