#include "apps/integer_io.h"

#include <yaml-cpp/yaml.h>

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <tuple>

#include "apps/file_digest.h"
#include "apps/output_folder.h"
#include "apps/yaml_value.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "core/text_file.h"
#include "data/transforms.h"
#include "quant/integer/requant.h"

namespace qat::apps {

namespace fs = std::filesystem;
using quant::ActQuant;
using quant::IntLayer;

std::vector<uint8_t> pack_int4(const int8_t* v, int64_t rows, int64_t k) {
  const int64_t per = (k + 1) / 2;
  std::vector<uint8_t> out(static_cast<size_t>(rows * per), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < k; ++i) {
      const uint8_t nib = static_cast<uint8_t>(v[r * k + i]) & 0x0F;
      out[r * per + i / 2] |= static_cast<uint8_t>(i % 2 ? nib << 4 : nib);
    }
  return out;
}

void unpack_int4(const uint8_t* p, int64_t rows, int64_t k, int8_t* v, bool is_signed) {
  const int64_t per = (k + 1) / 2;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < k; ++i) {
      const int nib = (p[r * per + i / 2] >> (i % 2 ? 4 : 0)) & 0x0F;
      v[r * k + i] = static_cast<int8_t>(is_signed && nib >= 8 ? nib - 16 : nib);  // sign-extend a signed nibble
    }
}

namespace {

const char* kManifest = kExportManifest;
const char* kWeights = kExportWeights;

bool packed(const IntLayer& l) { return l.weight_bits <= 4; }

// ---------------------------------------------------------------- writing
void emit_act_value(YAML::Emitter& e, const ActQuant& a) {
  e << YAML::Flow << YAML::BeginMap << YAML::Key << "scale" << YAML::Value
    << a.scale << YAML::Key << "zero_point" << YAML::Value << a.zero_point << YAML::Key << "zero_point_frac"
    << YAML::Value << a.zero_frac << YAML::Key << "bits" << YAML::Value
    << a.bits << YAML::Key << "signed" << YAML::Value << a.is_signed << YAML::EndMap;
}

void emit_act(YAML::Emitter& e, const char* key, const ActQuant& a) {
  e << YAML::Key << key << YAML::Value;
  emit_act_value(e, a);
}

template <class T>
void emit_list(YAML::Emitter& e, const char* key, const Tensor& t) {
  e << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (int64_t i = 0; i < t.numel(); ++i) e << t.data<T>()[i];
  e << YAML::EndSeq;
}

void emit_pair(YAML::Emitter& e, const char* key, int64_t a, int64_t b) {
  e << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginSeq << a << b << YAML::EndSeq;
}

// OIHW (export) from (O, KH, KW, I) (kernel layout).
bool is_conv(const IntLayer& l) { return quant::int_op_def(l.op).has(quant::kConvGeometry); }
Tensor weight_oihw(const IntLayer& l) { return is_conv(l) ? quant::weight_oihw_from_ohwi(l.weight) : l.weight; }

// The fields of the layer's op (int_op.h: IntFields), in the format's order.
void emit_layer(YAML::Emitter& e, const IntLayer& l, const std::vector<IntLayer>& layers) {
  const quant::IntOpDef& op = quant::int_op_def(l.op);
  e << YAML::BeginMap << YAML::Key << "name" << YAML::Value << l.name << YAML::Key << "kind" << YAML::Value << op.name;
  if (!l.inputs.empty()) {  // Note [integer model graph]: written only off a chain
    e << YAML::Key << "inputs" << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (const int64_t p : l.inputs) e << layers[static_cast<size_t>(p)].name;
    e << YAML::EndSeq;
  }
  if (op.has(quant::kManyInputs)) {  // Note [integer concat]
    e << YAML::Key << "input_grids" << YAML::Value << YAML::BeginSeq;
    for (const ActQuant& g : l.concat_in) emit_act_value(e, g);
    e << YAML::EndSeq;
    emit_act(e, "output", l.out);
    e << YAML::EndMap;
    return;
  }
  if (op.has(quant::kTwoInputs)) {
    e << YAML::Key << "relu" << YAML::Value << l.relu;
    emit_act(e, "input", l.in);
    emit_act(e, "input2", l.in2);
    emit_act(e, "output", l.out);
    e << YAML::EndMap;
    return;
  }
  if (op.has(quant::kPoolGeometry)) {
    emit_pair(e, "kernel", l.pool.kernel_h, l.pool.kernel_w);
    emit_pair(e, "stride", l.pool.stride_h, l.pool.stride_w);
    emit_pair(e, "padding", l.pool.pad_h, l.pool.pad_w);
  }
  if (op.has(quant::kOutputSize)) emit_pair(e, "output_size", l.out_h, l.out_w);
  if (!op.has(quant::kMatmul)) {
    emit_act(e, "output", l.out);
    e << YAML::EndMap;
    return;
  }
  e << YAML::Key << "in_channels" << YAML::Value << l.in_channels << YAML::Key << "out_channels" << YAML::Value
    << l.out_channels;
  if (op.has(quant::kConvGeometry)) {
    emit_pair(e, "kernel", l.kernel_h, l.kernel_w);
    emit_pair(e, "stride", l.conv.stride_h, l.conv.stride_w);
    emit_pair(e, "padding", l.conv.pad_h, l.conv.pad_w);
    emit_pair(e, "dilation", l.conv.dil_h, l.conv.dil_w);
    // (written only when depthwise: exports of dense models read by any qat)
    if (l.conv.groups != 1) e << YAML::Key << "groups" << YAML::Value << l.conv.groups;
  }
  e << YAML::Key << "relu" << YAML::Value << l.relu;
  // (a ReLU6's upper clamp, written only where there is one)
  if (l.clamp_max != INT32_MAX) e << YAML::Key << "clamp_max" << YAML::Value << l.clamp_max;
  e << YAML::Key << "dequantize" << YAML::Value << l.dequantize;
  e << YAML::Key << "weight_bits" << YAML::Value << l.weight_bits << YAML::Key << "weight_signed" << YAML::Value
    << l.weight_signed << YAML::Key << "weight_packing" << YAML::Value
    << (packed(l) ? "int4x2" : "int8");
  emit_act(e, "input", l.in);
  if (!l.dequantize) emit_act(e, "output", l.out);
  emit_list<float>(e, "weight_scale", l.weight_scale);
  emit_list<int32_t>(e, "weight_zero_point", l.weight_zero_point);
  emit_list<float>(e, "weight_zero_point_frac", l.weight_zero_frac);
  if (!l.dequantize) {
    emit_list<int32_t>(e, "multiplier", l.multiplier);
    emit_list<int32_t>(e, "shift", l.shift);
    emit_list<int32_t>(e, "bias_residual", l.bias_residual);
  }
  e << YAML::EndMap;
}

// A conv / linear layer's tensors of weights.safetensors: weights (OIHW,
// 4-bit packed two per byte) and bias.
void add_layer_tensors(const IntLayer& l, TensorMap& tensors) {
  if (!quant::int_op_def(l.op).has(quant::kMatmul)) return;
  const Tensor w = weight_oihw(l);
  if (packed(l)) {
    const int64_t K = l.products_per_output();
    const std::vector<uint8_t> p = pack_int4(w.data<int8_t>(), l.out_channels, K);
    Tensor t = Tensor::empty({l.out_channels, (K + 1) / 2}, DType::u8);
    std::copy(p.begin(), p.end(), t.data<uint8_t>());
    tensors[l.name + ".weight"] = t;
  } else {
    tensors[l.name + ".weight"] = w;
  }
  tensors[l.name + ".bias"] = l.bias;
}

// ---------------------------------------------------------------- reading
void read_pair(const YamlValue& v, int64_t& a, int64_t& b) {
  const auto xs = v.items(2, "integers");
  a = xs[0].as<int64_t>();
  b = xs[1].as<int64_t>();
}

template <class T>
Tensor read_list(const YamlValue& v, int64_t len) {
  const auto xs = v.items(static_cast<size_t>(len), "numbers");
  Tensor t = Tensor::empty({len}, dtype_of<T>());
  for (int64_t i = 0; i < len; ++i) t.data<T>()[i] = xs[static_cast<size_t>(i)].as<T>();
  return t;
}

// A float as the manifest writes it (9 significant digits: float32 round trip).
std::string float_str(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.9g", x);
  return b;
}

// Scales and standard deviations are divided by (1 / scale of the input
// quantization, 1 / std) or multiplied together: each must be a normal float,
// and so must its reciprocal (below ~8.5e37), or the arithmetic built on it
// reaches 0, infinity or NaN.
bool normal_with_normal_inverse(float x) { return x > 0 && std::isnormal(x) && std::isnormal(1.0f / x); }
const char* kNotNormalWithInverse = " must be a normal float whose inverse is normal too (about 1.2e-38 to 8.5e37)";

ActQuant read_act(const YamlValue& v, const std::string& layer) {
  v.only_keys({"scale", "zero_point", "zero_point_frac", "bits", "signed"});
  ActQuant a{v.get("scale").as<float>(), v.get("zero_point").as<int32_t>(), v.get("zero_point_frac").as<float>(),
             v.get("bits").as<int>(), v.get("signed").as<bool>()};
  if (!a.valid())
    v.fail("invalid quantization (scale " + std::to_string(a.scale) + ", zero point " + std::to_string(a.zero_point) +
           ", bits " + std::to_string(a.bits) + ")");
  if (!normal_with_normal_inverse(a.scale))
    v.get("scale").fail("layer '" + layer + "': scale " + float_str(a.scale) + kNotNormalWithInverse);
  return a;
}

// The dequantizing layer's logits are (acc + bias - f_w Σ(q_x - z_x)) s_x s_w[c],
// the first factor below 2^32 in magnitude (|acc + bias| < 2^31: int32;
// |f_w| K 255 <= 2^21): s_x s_w[c] up to FLT_MAX / 2^34 keeps every logit
// within FLT_MAX / 4, where the softmax's and the loss's differences and sums
// of two logits stay finite.
constexpr float kMaxDequantFactor = std::numeric_limits<float>::max() / 17179869184.0f;  // 2^34

// Each s_w[c] and s_x s_w[c] (what the int32 bias counts in; the dequantizing
// layer's logit factor, computed as the kernels do) a normal float > 0.
void check_weight_scales(const YamlValue& v, const IntLayer& l) {
  const YamlValue list = v.get("weight_scale");
  const std::vector<YamlValue> items = list.items();
  const std::string layer = "layer '" + l.name + "': ";
  for (int64_t c = 0; c < l.out_channels; ++c) {
    const float sw = l.weight_scale.data<float>()[c];
    const YamlValue& at = items[static_cast<size_t>(c)];
    if (!normal_with_normal_inverse(sw))
      at.fail(layer + "weight scale " + float_str(sw) + kNotNormalWithInverse);
    const float product = static_cast<float>(static_cast<double>(l.in.scale) * sw);
    const std::string what = layer + "input scale " + float_str(l.in.scale) + " x weight scale " + float_str(sw) +
                             " = " + float_str(product);
    if (!std::isnormal(product)) at.fail(what + " is outside float's normal range");
    if (l.dequantize && !(product <= kMaxDequantFactor))
      at.fail(what + " exceeds " + float_str(kMaxDequantFactor) +
              ": the logits (up to 2^32 times it) would overflow in the softmax and the loss");
  }
}

struct WeightsFile {
  const SafetensorsFile& tensors;
  std::string path;
};

// Each channel's requantization multiplier and shift are freeze's
// quantize_multiplier(s_x s_w / s_y) of the manifest's own scales (floats
// written with 9 digits read back exactly, so the same double): another
// pair would requantize with a factor the scales do not give.
void check_multipliers(const YamlValue& v, const IntLayer& l) {
  for (int64_t c = 0; c < l.out_channels; ++c) {
    const double sxw = static_cast<double>(l.in.scale) * l.weight_scale.data<float>()[c];
    const quant::FixedPointMultiplier f = quant::quantize_multiplier(sxw / l.out.scale);
    const int32_t m0 = l.multiplier.data<int32_t>()[c], shift = l.shift.data<int32_t>()[c];
    if (m0 != f.m0 || shift != f.shift)
      v.get(m0 != f.m0 ? "multiplier" : "shift")
          .fail(detail::cat("layer '", l.name, "' channel ", c, ": multiplier ", m0, ", shift ", shift,
                            " do not match its scales (input ", l.in.scale, ", weight ", l.weight_scale.data<float>()[c],
                            ", output ", l.out.scale, ": multiplier ", f.m0, ", shift ", f.shift, ")"));
  }
}

void read_conv_or_linear(const YamlValue& v, IntLayer& l, const WeightsFile& weights) {
  l.in_channels = v.get("in_channels").as<int64_t>();
  l.out_channels = v.get("out_channels").as<int64_t>();
  if (l.in_channels < 1 || l.out_channels < 1) v.fail("in_channels and out_channels must be >= 1");
  if (is_conv(l)) {
    read_pair(v.get("kernel"), l.kernel_h, l.kernel_w);
    read_pair(v.get("stride"), l.conv.stride_h, l.conv.stride_w);
    read_pair(v.get("padding"), l.conv.pad_h, l.conv.pad_w);
    read_pair(v.get("dilation"), l.conv.dil_h, l.conv.dil_w);
    if (const std::optional<YamlValue> groups = v.find("groups")) {
      l.conv.groups = groups->as<int64_t>();
      if (l.conv.groups != l.in_channels || l.conv.groups != l.out_channels)
        groups->fail(detail::cat("must equal in_channels and out_channels (a depthwise convolution), got ",
                                l.conv.groups, " for ", l.in_channels, " -> ", l.out_channels));
    }
    if (l.kernel_h < 1 || l.kernel_w < 1 || l.conv.stride_h < 1 || l.conv.stride_w < 1 || l.conv.dil_h < 1 ||
        l.conv.dil_w < 1 || l.conv.pad_h < 0 || l.conv.pad_w < 0)
      v.fail("kernel, stride and dilation must be >= 1, padding >= 0");
  }
  const YamlValue relu = v.get("relu");
  l.relu = relu.as<bool>();
  if (const std::optional<YamlValue> clamp = v.find("clamp_max")) l.clamp_max = clamp->as<int32_t>();
  l.dequantize = v.get("dequantize").as<bool>();
  // The ReLU lives in the requantization's clamp; a dequantized float output has none (freeze never writes this).
  if (l.relu && l.dequantize) relu.fail("a dequantizing layer (float logits) has no fused ReLU: must be false");
  const YamlValue bits = v.get("weight_bits");
  l.weight_bits = bits.as<int>();
  if (l.weight_bits < 2 || l.weight_bits > 8) bits.fail("must be 2..8");
  // Absent in exports written before unsigned weights were recorded: signed.
  const std::optional<YamlValue> sign = v.find("weight_signed");
  l.weight_signed = !sign || sign->as<bool>();
  const YamlValue packing = v.get("weight_packing");
  if (packing.as<std::string>() != (packed(l) ? "int4x2" : "int8"))
    packing.fail("'" + packing.as<std::string>() + "' does not match weight_bits " + std::to_string(l.weight_bits) +
                 " (int4x2 for <= 4 bits, int8 otherwise)");
  l.in = read_act(v.get("input"), l.name);
  if (!l.dequantize) l.out = read_act(v.get("output"), l.name);
  const int64_t C = l.out_channels;
  l.weight_scale = read_list<float>(v.get("weight_scale"), C);
  l.weight_zero_point = read_list<int32_t>(v.get("weight_zero_point"), C);
  l.weight_zero_frac = read_list<float>(v.get("weight_zero_point_frac"), C);
  check_weight_scales(v, l);
  if (!l.dequantize) {
    l.multiplier = read_list<int32_t>(v.get("multiplier"), C);
    l.shift = read_list<int32_t>(v.get("shift"), C);
    l.bias_residual = read_list<int32_t>(v.get("bias_residual"), C);
    check_multipliers(v, l);
  }
  int64_t K = 0;
  try {
    K = l.products_per_output();  // before anything of the layer's size is allocated
  } catch (const Error& e) {
    v.fail(e.what());
  }
  const Shape oihw =
      is_conv(l) ? Shape{C, l.in_channels / l.conv.groups, l.kernel_h, l.kernel_w} : Shape{C, l.in_channels};
  Tensor w = Tensor::empty(oihw, DType::i8);
  if (packed(l)) {
    const Tensor& p = expect_tensor(weights.tensors, weights.path, l.name + ".weight", DType::u8, {C, (K + 1) / 2});
    unpack_int4(p.data<uint8_t>(), C, K, w.data<int8_t>(), l.weight_signed);
  } else {
    w.copy_(expect_tensor(weights.tensors, weights.path, l.name + ".weight", DType::i8, oihw));
  }
  l.bias = expect_tensor(weights.tensors, weights.path, l.name + ".bias", DType::i32, {C}).clone();
  l.weight = is_conv(l) ? quant::weight_ohwi_from_oihw(w) : w;
}

// The keys a layer of `op` may have: those emit_layer writes for it, the
// optional ones (inputs, groups, clamp_max, weight_signed) included.
std::vector<std::string> layer_keys(const quant::IntOpDef& op) {
  std::vector<std::string> keys{"name", "kind", "inputs"};
  auto add = [&](std::initializer_list<const char*> more) { keys.insert(keys.end(), more.begin(), more.end()); };
  if (op.has(quant::kManyInputs)) add({"input_grids", "output"});
  else if (op.has(quant::kTwoInputs)) add({"relu", "input", "input2", "output"});
  else if (op.has(quant::kMatmul))
    add({"in_channels", "out_channels", "relu", "clamp_max", "dequantize", "weight_bits", "weight_signed",
         "weight_packing", "input", "output", "weight_scale", "weight_zero_point", "weight_zero_point_frac",
         "multiplier", "shift", "bias_residual"});
  else add({"output"});
  if (op.has(quant::kPoolGeometry)) add({"kernel", "stride", "padding"});
  if (op.has(quant::kOutputSize)) add({"output_size"});
  if (op.has(quant::kConvGeometry)) add({"kernel", "stride", "padding", "dilation", "groups"});
  return keys;
}

IntLayer read_layer(const YamlValue& v, const WeightsFile& weights) {
  IntLayer l;
  l.name = v.get("name").as<std::string>();
  const YamlValue kind = v.get("kind");
  try {
    l.op = quant::int_op_from_name(kind.as<std::string>());
  } catch (const Error& e) {
    kind.fail(e.what());
  }
  // The field groups of the layer's op (int_op.h: IntFields).
  const quant::IntOpDef& op = quant::int_op_def(l.op);
  v.only_keys(layer_keys(op), std::string("a ") + op.name + " layer");  // (a misspelt optional key is no default)
  if (op.has(quant::kPoolGeometry)) {
    read_pair(v.get("kernel"), l.pool.kernel_h, l.pool.kernel_w);
    read_pair(v.get("stride"), l.pool.stride_h, l.pool.stride_w);
    read_pair(v.get("padding"), l.pool.pad_h, l.pool.pad_w);
    if (l.pool.kernel_h < 1 || l.pool.kernel_w < 1 || l.pool.stride_h < 1 || l.pool.stride_w < 1)
      v.fail(std::string(op.name) + " kernel and stride must be >= 1");
  }
  if (op.has(quant::kOutputSize)) {
    const YamlValue size = v.get("output_size");
    read_pair(size, l.out_h, l.out_w);
    if (l.out_h < 1 || l.out_w < 1) size.fail("must be >= 1");
  }
  if (op.has(quant::kManyInputs)) {
    for (const YamlValue& g : v.get("input_grids").items("a list of the inputs' grids"))
      l.concat_in.push_back(read_act(g, l.name));
    if (!l.concat_in.empty()) l.in = l.concat_in[0];
    l.out = read_act(v.get("output"), l.name);
  } else if (op.has(quant::kTwoInputs)) {
    l.relu = v.get("relu").as<bool>();
    l.in = read_act(v.get("input"), l.name);
    l.in2 = read_act(v.get("input2"), l.name);
    l.out = read_act(v.get("output"), l.name);
  } else if (op.has(quant::kMatmul)) {
    read_conv_or_linear(v, l, weights);
  } else {
    l.in = l.out = read_act(v.get("output"), l.name);  // kRoundsOntoInputGrid: the input is set by check_follows
  }
  return l;
}

// An image side the data pipeline accepts ([1, data::kMaxImageSide]).
int64_t read_side(const YamlValue& v) {
  const int64_t side = v.as<int64_t>();
  if (side < 1 || side > data::kMaxImageSide)
    v.fail("must be in [1, " + std::to_string(data::kMaxImageSide) + "], got " + std::to_string(side));
  return side;
}

// x = (pixel / 255 - mean) / std, as the data pipeline computes it
// (data/transforms.cpp): finite for every pixel when finite for 0 and 255.
void check_normalization(const YamlValue& v, int c, float mean, float sd) {
  const YamlValue sd_at = v.get("std").items()[static_cast<size_t>(c)];
  if (!normal_with_normal_inverse(sd))
    sd_at.fail("std " + float_str(sd) + kNotNormalWithInverse);
  for (const int pixel : {0, 255}) {
    const float x = (static_cast<float>(pixel) / 255.0f - mean) / sd;
    if (!std::isfinite(x))
      sd_at.fail(detail::cat("pixel ", pixel, " normalizes to ", float_str(x), " with input.mean[", c, "] ",
                             float_str(mean), " and input.std[", c, "] ", float_str(sd),
                             "; the network's input must be finite"));
  }
}

void read_input(const YamlValue& v, ExportedModel& m) {
  v.only_keys({"image_size", "resize", "mean", "std"});
  m.image_size = read_side(v.get("image_size"));
  m.resize = read_side(v.get("resize"));
  const Tensor mean = read_list<float>(v.get("mean"), 3), sd = read_list<float>(v.get("std"), 3);
  for (int c = 0; c < 3; ++c) {
    m.mean[c] = mean.data<float>()[c];
    m.std[c] = sd.data<float>()[c];
    check_normalization(v, c, m.mean[c], m.std[c]);
  }
}

// Each layer reads the grid the one before wrote.
// The layer reads `prev` (its input k: 0, or an add's second).
void check_follows(const YamlValue& v, IntLayer& l, const IntLayer& prev, size_t k = 0) {
  if (prev.dequantize) v.fail("comes after the dequantizing layer '" + prev.name + "'");
  const quant::IntOpDef& op = quant::int_op_def(l.op);
  if (op.has(quant::kRoundsOntoInputGrid)) l.in = prev.out;  // its output must then be the same grid
  if (op.has(quant::kManyInputs)) {
    if (!(l.input_grid(k) == prev.out))
      v.get("input_grids").fail("grid " + std::to_string(k) + " differs from the output of '" + prev.name + "'");
    return;
  }
  if (!((k == 0 ? l.in : l.in2) == prev.out))
    v.get(k == 1 ? "input2" : op.has(quant::kMatmul) || op.has(quant::kTwoInputs) ? "input" : "output")
        .fail("quantization differs from the output of '" + prev.name + "'");
}

// The layers named by `inputs`, as indices of the earlier ones (each name once among them).
std::vector<int64_t> read_inputs(const YamlValue& v, const std::vector<IntLayer>& earlier) {
  std::vector<int64_t> out;
  for (const YamlValue& name : v.items("a list of earlier layers' names")) {
    const std::string n = name.as<std::string>();
    int64_t at = -1;
    for (size_t i = 0; i < earlier.size(); ++i)
      if (earlier[i].name == n) {
        if (at >= 0) name.fail("more than one earlier layer is named '" + n + "'");
        at = static_cast<int64_t>(i);
      }
    if (at < 0) name.fail("no earlier layer is named '" + n + "'");
    out.push_back(at);
  }
  return out;
}

// Every tensor of the weights file is a layer's (its weight or bias): one
// that none reads means the manifest and the weights disagree on a name.
void check_every_tensor_read(const TensorMap& tensors, const std::string& wfile, const std::vector<IntLayer>& layers,
                             const std::string& manifest) {
  std::set<std::string> read;
  for (const IntLayer& l : layers)
    if (quant::int_op_def(l.op).has(quant::kMatmul)) read.insert({l.name + ".weight", l.name + ".bias"});
  for (const auto& [name, t] : tensors)
    QAT_CHECK(read.count(name), wfile, ": tensor '", name, "' is no layer's weight or bias in ", manifest,
              " (its conv and linear layers' names and the weights file's disagree)");
}

// `shape`: the input images'; every layer is checked against the shape the
// one before produces (int_op.h: infer) before its own setup.
void read_layers(const YamlValue& v, const WeightsFile& weights, quant::ActShape shape, quant::IntegerModel& model) {
  const auto layers = v.items("a non-empty list");
  if (layers.empty()) v.fail("expected a non-empty list");
  std::vector<quant::ActShape> shapes;  // the layers' so far
  for (const YamlValue& lv : layers) {
    const YamlValue name = lv.get("name");
    for (size_t i = 0; i < model.layers.size(); ++i)  // (a name says which weights are a layer's, which layer an input is)
      if (model.layers[i].name == name.as<std::string>())
        name.fail("'" + model.layers[i].name + "' is layer " + std::to_string(i) + "'s name too; each layer's must be its own");
    IntLayer l = read_layer(lv, weights);
    const quant::IntOpDef& op = quant::int_op_def(l.op);
    if (model.layers.empty() && !op.has(quant::kFloatInput))
      lv.get("kind").fail("the first layer must be quantize_input");
    if (!model.layers.empty() && op.has(quant::kFloatInput))
      lv.get("kind").fail("layer " + std::to_string(model.layers.size()) + " '" + l.name + "' is " + op.name +
                          ", which reads the float images: only the first layer may be");
    if (const std::optional<YamlValue> in = lv.find("inputs")) l.inputs = read_inputs(*in, model.layers);
    model.layers.push_back(std::move(l));
    IntLayer& added = model.layers.back();
    std::vector<int64_t> from;
    try {
      from = quant::layer_inputs(model.layers, model.layers.size() - 1);
    } catch (const Error& ex) {
      lv.fail(ex.what());
    }
    for (size_t k = 0; k < from.size(); ++k)
      if (from[k] >= 0) check_follows(lv, added, model.layers[static_cast<size_t>(from[k])], k);
    try {
      shapes.push_back(quant::next_shape(model.layers, shapes, shape));  // (an add's two inputs alike)
      added.finalize();
    } catch (const Error& ex) {
      lv.fail(ex.what());
    }
  }
  if (!model.layers.back().dequantize) layers.back().fail("the last layer must be a dequantizing conv/linear");
}

}  // namespace

data::TransformSpec eval_transform(const ExportedModel& m) {
  data::TransformSpec spec;
  spec.image_size = m.image_size;
  spec.resize = m.resize;
  spec.mean = m.mean;
  spec.std = m.std;
  return spec;
}

bool is_export_dir(const std::string& path) { return fs::is_directory(path) && fs::exists(fs::path(path) / kManifest); }

namespace {

// "data.mean[1] 0 (manifest input.mean[1] 0.456)" for each channel that differs.
void add_channel_diffs(std::string& diffs, const char* key, const std::array<float, 3>& config,
                       const std::array<float, 3>& manifest) {
  for (int c = 0; c < 3; ++c)
    if (config[c] != manifest[c])
      diffs += detail::cat(diffs.empty() ? "" : ", ", "data.", key, "[", c, "] ", float_str(config[c]),
                           " (manifest input.", key, "[", c, "] ", float_str(manifest[c]), ")");
}

}  // namespace

void check_same_model(const ExportedModel& ex, const std::string& export_dir, const std::string& config_model,
                      const std::string& config) {
  // (exports written before the model was recorded have none)
  QAT_CHECK(ex.model_name.empty() || ex.model_name == config_model, "eval: export ", export_dir, " is of model ",
            ex.model_name, " (", (fs::path(export_dir) / kManifest).string(), ": model), but config ", config,
            " builds ", config_model, " (model.name); give an export of that model, or the config it was made with");
}

void check_same_preprocessing(const ExportedModel& ex, const std::string& export_dir,
                              const data::TransformSpec& config_spec, const std::string& config) {
  std::string diffs;
  for (const auto& [key, want, got] : {std::tuple{"image_size", config_spec.image_size, ex.image_size},
                                       std::tuple{"resize", config_spec.resize, ex.resize}})
    if (want != got)
      diffs += detail::cat(diffs.empty() ? "" : ", ", "data.", key, " ", want, " (manifest input.", key, " ", got, ")");
  add_channel_diffs(diffs, "mean", config_spec.mean, ex.mean);
  add_channel_diffs(diffs, "std", config_spec.std, ex.std);
  QAT_CHECK(diffs.empty(), "eval: config ", config, " preprocesses images otherwise than export ", export_dir,
            " was made for (", (fs::path(export_dir) / kManifest).string(), "): ", diffs,
            "; evaluate with the manifest's values");
}

namespace {

std::string manifest_text(const ExportedModel& m, const std::string& weights_sha256) {
  YAML::Emitter e;
  e.SetFloatPrecision(9);  // float32 round trip
  e << YAML::BeginMap;
  e << YAML::Key << "format" << YAML::Value << "qat-integer-model";
  e << YAML::Key << "format_version" << YAML::Value << kExportFormatVersion;
  e << YAML::Key << "model" << YAML::Value << m.model_name;
  e << YAML::Key << "weights_sha256" << YAML::Value << weights_sha256;
  e << YAML::Key << "input" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "image_size" << YAML::Value << m.image_size << YAML::Key << "resize" << YAML::Value << m.resize;
  e << YAML::Key << "mean" << YAML::Value << YAML::Flow << std::vector<float>(m.mean.begin(), m.mean.end());
  e << YAML::Key << "std" << YAML::Value << YAML::Flow << std::vector<float>(m.std.begin(), m.std.end());
  e << YAML::EndMap;
  e << YAML::Key << "classes" << YAML::Value << YAML::Flow << m.classes;
  e << YAML::Key << "layers" << YAML::Value << YAML::BeginSeq;
  for (const IntLayer& l : m.model.layers) emit_layer(e, l, m.model.layers);
  e << YAML::EndSeq << YAML::EndMap;
  QAT_CHECK(e.good(), "export: could not write the manifest: ", e.GetLastError());
  return std::string("# qat integer model export; format: docs/export_format.md\n") + e.c_str() + "\n";
}

}  // namespace

// Note [output folder]: the two files are staged and swapped in whole; a
// folder holding anything else is refused.
void save_export(const std::string& dir, const ExportedModel& m) {
  OutputFolder out({"export", "--out", {kManifest, kWeights}}, dir);
  TensorMap tensors;
  for (const IntLayer& l : m.model.layers) add_layer_tensors(l, tensors);
  save_safetensors(out.staged(kWeights), tensors, {{"format", "qat-integer-model"}});
  const std::string manifest = manifest_text(m, sha256_file(out.staged(kWeights)));
  write_text_file_atomic(out.staged(kManifest), manifest);  // its error names the file and errno
  out.publish();
}

ExportedModel load_export(const std::string& dir) {
  const std::string file = (fs::path(dir) / kManifest).string(), wfile = (fs::path(dir) / kWeights).string();
  QAT_CHECK(fs::exists(file), "export ", dir, ": no ", kManifest, " (is this a `qat export` folder?)");
  const YamlValue root = load_yaml_file(file);
  root.only_keys({"format", "format_version", "model", "weights_sha256", "input", "classes", "layers"});
  const YamlValue format = root.get("format");
  if (format.as<std::string>() != "qat-integer-model")
    format.fail("must be qat-integer-model, got " + format.describe());
  const YamlValue version = root.get("format_version");
  if (version.as<int>() != kExportFormatVersion)
    version.fail("unknown version " + version.node().Scalar() + " (this qat reads version " +
                 std::to_string(kExportFormatVersion) + ")");
  ExportedModel m;
  if (auto name = root.find("model")) m.model_name = name->as<std::string>();
  read_input(root.get("input"), m);
  const YamlValue classes = root.get("classes");
  for (const YamlValue& c : classes.items("a list of class names")) m.classes.push_back(c.as<std::string>());
  // Exports before the digest was recorded have none; every later one must match.
  if (auto digest = root.find("weights_sha256")) {
    const std::string want = digest->as<std::string>(), got = sha256_file(wfile);
    if (got != want)
      digest->fail("does not match " + wfile + " (sha256 " + got +
                   "): the weights file is not the one this manifest was written with");
  }
  const SafetensorsFile weights = load_safetensors(wfile);
  read_layers(root.get("layers"), {weights, wfile}, {m.image_size, m.image_size, 3, false}, m.model);
  check_every_tensor_read(weights.tensors, wfile, m.model.layers, file);
  const int64_t outputs = m.model.layers.back().out_channels;
  if (static_cast<int64_t>(m.classes.size()) != outputs)
    classes.fail(std::to_string(m.classes.size()) + " names for " + std::to_string(outputs) +
                 " outputs of the last layer");
  return m;
}

}  // namespace qat::apps
