#pragma once
// Checkpoint I/O in the safetensors format: 8-byte little-endian header
// length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__":
// {str: str}}, then the raw little-endian tensor bytes. Readable by Python's
// `safetensors` and by numpy. Writes go to a temporary file in the same folder
// that is renamed over the target (atomic: a crash never leaves a half file).
#include <map>
#include <string>

#include "core/tensor.h"

namespace qat {

using TensorMap = std::map<std::string, Tensor>;
using Metadata = std::map<std::string, std::string>;

struct SafetensorsFile {
  TensorMap tensors;
  Metadata metadata;
};

// Errors (qat::Error) name the file and, where it applies, the tensor.
void save_safetensors(const std::string& path, const TensorMap& tensors, const Metadata& metadata = {});
SafetensorsFile load_safetensors(const std::string& path);
// Only the metadata (the header is read and checked whole; no tensor data).
Metadata load_safetensors_metadata(const std::string& path);

// Looks up `name` in a loaded file and checks its dtype and shape; the error
// names the file, the tensor and both shapes/dtypes.
const Tensor& expect_tensor(const SafetensorsFile& f, const std::string& path, const std::string& name, DType dtype,
                            const Shape& shape);

}  // namespace qat
