#include "apps/integer_io.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/safetensors.h"

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

void unpack_int4(const uint8_t* p, int64_t rows, int64_t k, int8_t* v) {
  const int64_t per = (k + 1) / 2;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < k; ++i) {
      const int nib = (p[r * per + i / 2] >> (i % 2 ? 4 : 0)) & 0x0F;
      v[r * k + i] = static_cast<int8_t>(nib >= 8 ? nib - 16 : nib);  // sign-extend the nibble
    }
}

namespace {

const char* kManifest = "manifest.yaml";
const char* kWeights = "weights.safetensors";

bool packed(const IntLayer& l) { return l.weight_bits <= 4; }
int64_t weight_k(const IntLayer& l) { return l.kernel_h * l.kernel_w * l.in_channels; }

// ---------------------------------------------------------------- writing
void emit_act(YAML::Emitter& e, const char* key, const ActQuant& a) {
  e << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "scale" << YAML::Value
    << a.scale << YAML::Key << "zero_point" << YAML::Value << a.zero_point << YAML::Key << "zero_point_frac"
    << YAML::Value << a.zero_frac << YAML::Key << "bits" << YAML::Value
    << a.bits << YAML::Key << "signed" << YAML::Value << a.is_signed << YAML::EndMap;
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
void emit_layer(YAML::Emitter& e, const IntLayer& l, TensorMap& tensors) {
  const quant::IntOpDef& op = quant::int_op_def(l.op);
  e << YAML::BeginMap << YAML::Key << "name" << YAML::Value << l.name << YAML::Key << "kind" << YAML::Value << op.name;
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
  }
  e << YAML::Key << "relu" << YAML::Value << l.relu << YAML::Key << "dequantize" << YAML::Value << l.dequantize;
  e << YAML::Key << "weight_bits" << YAML::Value << l.weight_bits << YAML::Key << "weight_packing" << YAML::Value
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
  const Tensor w = weight_oihw(l);
  if (packed(l)) {
    const std::vector<uint8_t> p = pack_int4(w.data<int8_t>(), l.out_channels, weight_k(l));
    Tensor t = Tensor::empty({l.out_channels, (weight_k(l) + 1) / 2}, DType::u8);
    std::copy(p.begin(), p.end(), t.data<uint8_t>());
    tensors[l.name + ".weight"] = t;
  } else {
    tensors[l.name + ".weight"] = w;
  }
  tensors[l.name + ".bias"] = l.bias;
  e << YAML::EndMap;
}

// ---------------------------------------------------------------- reading
struct ManifestReader {
  std::string file;
  [[noreturn]] void fail(const YAML::Node& n, const std::string& field, const std::string& msg) const {
    QAT_FAIL(file, ", line ", n.Mark().line + 1, ": ", field, ": ", msg);
  }
  YAML::Node need(const YAML::Node& n, const std::string& key, const std::string& path) const {
    if (!n.IsMap()) fail(n, path, "expected a mapping");
    if (!n[key]) QAT_FAIL(file, ", line ", n.Mark().line + 1, ": missing field '", path.empty() ? key : path + "." + key, "'");
    return n[key];
  }
  template <class T>
  T get(const YAML::Node& n, const std::string& key, const std::string& path) const {
    const YAML::Node v = need(n, key, path);
    try {
      return v.as<T>();
    } catch (const YAML::Exception&) {
      fail(v, path + "." + key, "wrong type or value '" + (v.IsScalar() ? v.Scalar() : std::string("(not a scalar)")) + "'");
    }
  }
  void pair(const YAML::Node& n, const std::string& key, const std::string& path, int64_t& a, int64_t& b) const {
    const YAML::Node v = need(n, key, path);
    if (!v.IsSequence() || v.size() != 2) fail(v, path + "." + key, "expected a list of two integers");
    a = get_index<int64_t>(v, 0, path + "." + key);
    b = get_index<int64_t>(v, 1, path + "." + key);
  }
  template <class T>
  T get_index(const YAML::Node& seq, size_t i, const std::string& path) const {
    try {
      return seq[i].as<T>();
    } catch (const YAML::Exception&) {
      fail(seq[i], path + "[" + std::to_string(i) + "]", "wrong type or value");
    }
  }
  template <class T>
  Tensor list(const YAML::Node& n, const std::string& key, const std::string& path, int64_t len) const {
    const YAML::Node v = need(n, key, path);
    if (!v.IsSequence() || static_cast<int64_t>(v.size()) != len)
      fail(v, path + "." + key, "expected a list of " + std::to_string(len) + " numbers, got " +
                                    (v.IsSequence() ? std::to_string(v.size()) + " entries" : std::string("no list")));
    Tensor t = Tensor::empty({len}, dtype_of<T>());
    for (int64_t i = 0; i < len; ++i) t.data<T>()[i] = get_index<T>(v, static_cast<size_t>(i), path + "." + key);
    return t;
  }
  ActQuant act(const YAML::Node& n, const std::string& key, const std::string& path) const {
    const YAML::Node v = need(n, key, path);
    const std::string p = path + "." + key;
    ActQuant a{get<float>(v, "scale", p), get<int32_t>(v, "zero_point", p), get<float>(v, "zero_point_frac", p),
               get<int>(v, "bits", p), get<bool>(v, "signed", p)};
    if (!(a.scale > 0) || a.bits < 2 || a.bits > 8 || a.zero_point < a.qmin() || a.zero_point > a.qmax() ||
        !(std::abs(a.zero_frac) <= 0.5f))
      fail(v, p, "invalid quantization (scale " + std::to_string(a.scale) + ", zero point " +
                     std::to_string(a.zero_point) + ", bits " + std::to_string(a.bits) + ")");
    return a;
  }

  IntLayer layer(const YAML::Node& n, const std::string& path, const SafetensorsFile& weights,
                 const std::string& weights_path) const {
    IntLayer l;
    l.name = get<std::string>(n, "name", path);
    const YAML::Node kind = need(n, "kind", path);
    try {
      l.op = quant::int_op_from_name(kind.Scalar());
    } catch (const Error& e) {
      fail(kind, path + ".kind", e.what());
    }
    const quant::IntOpDef& op = quant::int_op_def(l.op);
    if (op.has(quant::kPoolGeometry)) {
      pair(n, "kernel", path, l.pool.kernel_h, l.pool.kernel_w);
      pair(n, "stride", path, l.pool.stride_h, l.pool.stride_w);
      pair(n, "padding", path, l.pool.pad_h, l.pool.pad_w);
      if (l.pool.kernel_h < 1 || l.pool.kernel_w < 1 || l.pool.stride_h < 1 || l.pool.stride_w < 1)
        fail(n, path, std::string(op.name) + " kernel and stride must be >= 1");
    }
    if (op.has(quant::kOutputSize)) {
      pair(n, "output_size", path, l.out_h, l.out_w);
      if (l.out_h < 1 || l.out_w < 1) fail(n, path + ".output_size", "must be >= 1");
    }
    if (op.has(quant::kMatmul)) conv_or_linear(n, path, l, weights, weights_path);
    else l.in = l.out = act(n, "output", path);  // kRoundsOntoInputGrid: the input is set in load_export
    return l;
  }

  void conv_or_linear(const YAML::Node& n, const std::string& path, IntLayer& l, const SafetensorsFile& weights,
                      const std::string& weights_path) const {
    l.in_channels = get<int64_t>(n, "in_channels", path);
    l.out_channels = get<int64_t>(n, "out_channels", path);
    if (l.in_channels < 1 || l.out_channels < 1) fail(n, path, "in_channels and out_channels must be >= 1");
    if (is_conv(l)) {
      pair(n, "kernel", path, l.kernel_h, l.kernel_w);
      pair(n, "stride", path, l.conv.stride_h, l.conv.stride_w);
      pair(n, "padding", path, l.conv.pad_h, l.conv.pad_w);
      pair(n, "dilation", path, l.conv.dil_h, l.conv.dil_w);
      if (l.kernel_h < 1 || l.kernel_w < 1 || l.conv.stride_h < 1 || l.conv.stride_w < 1 || l.conv.dil_h < 1 ||
          l.conv.dil_w < 1 || l.conv.pad_h < 0 || l.conv.pad_w < 0)
        fail(n, path, "kernel, stride and dilation must be >= 1, padding >= 0");
    }
    l.relu = get<bool>(n, "relu", path);
    l.dequantize = get<bool>(n, "dequantize", path);
    l.weight_bits = get<int>(n, "weight_bits", path);
    if (l.weight_bits < 2 || l.weight_bits > 8) fail(n["weight_bits"], path + ".weight_bits", "must be 2..8");
    const std::string packing = get<std::string>(n, "weight_packing", path);
    if (packing != (packed(l) ? "int4x2" : "int8"))
      fail(n["weight_packing"], path + ".weight_packing",
           "'" + packing + "' does not match weight_bits " + std::to_string(l.weight_bits) +
               " (int4x2 for <= 4 bits, int8 otherwise)");
    l.in = act(n, "input", path);
    if (!l.dequantize) l.out = act(n, "output", path);
    const int64_t C = l.out_channels;
    l.weight_scale = list<float>(n, "weight_scale", path, C);
    l.weight_zero_point = list<int32_t>(n, "weight_zero_point", path, C);
    l.weight_zero_frac = list<float>(n, "weight_zero_point_frac", path, C);
    if (!l.dequantize) {
      l.multiplier = list<int32_t>(n, "multiplier", path, C);
      l.shift = list<int32_t>(n, "shift", path, C);
      l.bias_residual = list<int32_t>(n, "bias_residual", path, C);
    }
    const int64_t K = weight_k(l);
    const Shape oihw = is_conv(l) ? Shape{C, l.in_channels, l.kernel_h, l.kernel_w} : Shape{C, l.in_channels};
    Tensor w = Tensor::empty(oihw, DType::i8);
    if (packed(l)) {
      const Tensor& p = expect_tensor(weights, weights_path, l.name + ".weight", DType::u8, {C, (K + 1) / 2});
      unpack_int4(p.data<uint8_t>(), C, K, w.data<int8_t>());
    } else {
      w.copy_(expect_tensor(weights, weights_path, l.name + ".weight", DType::i8, oihw));
    }
    l.bias = expect_tensor(weights, weights_path, l.name + ".bias", DType::i32, {C}).clone();
    l.weight = is_conv(l) ? quant::weight_ohwi_from_oihw(w) : w;
  }
};

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

void save_export(const std::string& dir, const ExportedModel& m) {
  fs::create_directories(dir);
  YAML::Emitter e;
  e.SetFloatPrecision(9);  // float32 round trip
  e << YAML::BeginMap;
  e << YAML::Key << "format" << YAML::Value << "qat-integer-model";
  e << YAML::Key << "format_version" << YAML::Value << kExportFormatVersion;
  e << YAML::Key << "model" << YAML::Value << m.model_name;
  e << YAML::Key << "input" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "image_size" << YAML::Value << m.image_size << YAML::Key << "resize" << YAML::Value << m.resize;
  e << YAML::Key << "mean" << YAML::Value << YAML::Flow << std::vector<float>(m.mean.begin(), m.mean.end());
  e << YAML::Key << "std" << YAML::Value << YAML::Flow << std::vector<float>(m.std.begin(), m.std.end());
  e << YAML::EndMap;
  e << YAML::Key << "classes" << YAML::Value << YAML::Flow << m.classes;
  TensorMap tensors;
  e << YAML::Key << "layers" << YAML::Value << YAML::BeginSeq;
  for (const IntLayer& l : m.model.layers) emit_layer(e, l, tensors);
  e << YAML::EndSeq << YAML::EndMap;
  QAT_CHECK(e.good(), "export: could not write the manifest: ", e.GetLastError());
  save_safetensors((fs::path(dir) / kWeights).string(), tensors, {{"format", "qat-integer-model"}});
  // Manifest last, through a temporary file: a reader never sees a manifest
  // without its weights.
  const fs::path manifest = fs::path(dir) / kManifest, tmp = fs::path(dir) / ".manifest.yaml.tmp";
  {
    std::ofstream out(tmp);
    out << "# qat integer model export; format: docs/export_format.md\n" << e.c_str() << "\n";
    QAT_CHECK(out.good(), "export: could not write ", tmp.string());
  }
  fs::rename(tmp, manifest);
}

ExportedModel load_export(const std::string& dir) {
  const std::string file = (fs::path(dir) / kManifest).string(), wfile = (fs::path(dir) / kWeights).string();
  QAT_CHECK(fs::exists(file), "export ", dir, ": no ", kManifest, " (is this a `qat export` folder?)");
  YAML::Node root;
  try {
    root = YAML::LoadFile(file);
  } catch (const YAML::ParserException& ex) {
    QAT_FAIL(file, ", line ", ex.mark.line + 1, ": YAML syntax error: ", ex.msg);
  }
  const ManifestReader r{file};
  if (!root.IsMap()) r.fail(root, "(top level)", "expected a mapping");
  const int version = r.get<int>(root, "format_version", "");
  if (version != kExportFormatVersion)
    r.fail(root["format_version"], "format_version",
           "unknown version " + std::to_string(version) + " (this qat reads version " +
               std::to_string(kExportFormatVersion) + ")");
  ExportedModel m;
  m.model_name = root["model"] ? root["model"].as<std::string>("") : "";
  const YAML::Node in = r.need(root, "input", "");
  m.image_size = r.get<int64_t>(in, "image_size", "input");
  m.resize = r.get<int64_t>(in, "resize", "input");
  const Tensor mean = r.list<float>(in, "mean", "input", 3), sd = r.list<float>(in, "std", "input", 3);
  for (int c = 0; c < 3; ++c) {
    m.mean[c] = mean.data<float>()[c];
    m.std[c] = sd.data<float>()[c];
    if (!(m.std[c] > 0)) r.fail(in["std"], "input.std", "must be > 0");
  }
  const YAML::Node classes = r.need(root, "classes", "");
  if (!classes.IsSequence()) r.fail(classes, "classes", "expected a list of class names");
  for (size_t i = 0; i < classes.size(); ++i) m.classes.push_back(classes[i].as<std::string>(""));
  const YAML::Node layers = r.need(root, "layers", "");
  if (!layers.IsSequence() || layers.size() == 0) r.fail(layers, "layers", "expected a non-empty list");
  const SafetensorsFile weights = load_safetensors(wfile);
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string path = "layers[" + std::to_string(i) + "]";
    IntLayer l = r.layer(layers[i], path, weights, wfile);
    if (i > 0) {  // each layer reads the grid the one before wrote
      const IntLayer& prev = m.model.layers.back();
      if (prev.dequantize) r.fail(layers[i], path, "comes after the dequantizing layer '" + prev.name + "'");
      const quant::IntOpDef& op = quant::int_op_def(l.op);
      if (op.has(quant::kRoundsOntoInputGrid)) l.in = prev.out;  // output: the same grid less the fraction
      if (!(l.in == prev.out))
        r.fail(layers[i], path + (op.has(quant::kMatmul) ? ".input" : ".output"),
               "quantization differs from the output of '" + prev.name + "'");
    }
    try {
      l.finalize();
    } catch (const Error& ex) {
      r.fail(layers[i], path, ex.what());
    }
    m.model.layers.push_back(std::move(l));
  }
  const IntLayer& last = m.model.layers.back();
  if (!quant::int_op_def(m.model.layers.front().op).has(quant::kFloatInput))
    r.fail(layers[0], "layers[0].kind", "the first layer must be quantize_input");
  if (!last.dequantize) r.fail(layers[layers.size() - 1], "layers[-1]", "the last layer must be a dequantizing conv/linear");
  if (static_cast<int64_t>(m.classes.size()) != last.out_channels)
    r.fail(classes, "classes", std::to_string(m.classes.size()) + " names for " + std::to_string(last.out_channels) +
                                   " outputs of the last layer");
  return m;
}

}  // namespace qat::apps
