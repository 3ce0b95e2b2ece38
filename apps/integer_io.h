#pragma once
// The export of a frozen integer model (docs/export_format.md):
//   DIR/manifest.yaml      format version, input preprocessing, class names,
//                          layers in order with kinds, shapes, bits, scales,
//                          zero points, multipliers and shifts
//   DIR/weights.safetensors  per conv/linear layer "<name>.weight" (int8, in
//                          PyTorch's (out, in, kh, kw) / (out, in) layout; weights
//                          of <= 4 bits packed two per byte as uint8) and
//                          "<name>.bias" (int32)
// load_export() reads only these two files and validates every field: a bad
// manifest or weights file is an error naming the file and the field.
#include <array>
#include <string>
#include <vector>

#include "data/transforms.h"
#include "quant/integer/integer_model.h"

namespace qat::apps {

constexpr int kExportFormatVersion = 1;
// The two files of an export folder (and all it may hold).
constexpr const char* kExportManifest = "manifest.yaml";
constexpr const char* kExportWeights = "weights.safetensors";

struct ExportedModel {
  quant::IntegerModel model;
  std::string model_name;            // e.g. alexnet_bn (informational)
  std::vector<std::string> classes;  // class names by label index
  int64_t image_size = 128, resize = 144;
  std::array<float, 3> mean{}, std{};
};

// The evaluation preprocessing the export records (resize, centre crop, normalise).
data::TransformSpec eval_transform(const ExportedModel& m);

void save_export(const std::string& dir, const ExportedModel& m);
ExportedModel load_export(const std::string& dir);
// True when `path` is a folder holding a manifest.yaml.
bool is_export_dir(const std::string& path);

// `qat eval CONFIG --checkpoint EXPORT_DIR`: refuses a config whose
// preprocessing differs from the export's (data.image_size, data.resize,
// data.mean, data.std against the manifest's input.*), naming each differing
// key with both values. `config_spec`: the config's (transform_spec),
// whose mean and std are the config's values rounded to float32, as the data
// pipeline normalizes with them; the manifest holds float32 values written
// with 9 significant digits, which read back exactly. So the floats are
// compared exactly: equal means the same normalization, bit for bit.
void check_same_preprocessing(const ExportedModel& ex, const std::string& export_dir,
                              const data::TransformSpec& config_spec, const std::string& config);
// Refuses an export of another model than the config's model.name (where the manifest records one).
void check_same_model(const ExportedModel& ex, const std::string& export_dir, const std::string& config_model,
                      const std::string& config);

// 4-bit packing: row of K values -> ceil(K/2) bytes, value 2j in the low
// nibble of byte j and 2j+1 in the high nibble (signed values as two's
// complement nibbles, unsigned ones as they are).
std::vector<uint8_t> pack_int4(const int8_t* values, int64_t rows, int64_t k);
void unpack_int4(const uint8_t* packed, int64_t rows, int64_t k, int8_t* values, bool is_signed = true);

}  // namespace qat::apps
