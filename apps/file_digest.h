#pragma once
// SHA-256 of a file (OpenSSL's libcrypto), for tying files together: an
// export's manifest names the digest of its weights file.
#include <string>

#include "core/safetensors.h"

namespace qat::apps {

// 64 lowercase hex digits; throws naming the file when it cannot be read.
std::string sha256_file(const std::string& path);
// 64 lowercase hex digits of the bytes of `text`.
std::string sha256_text(const std::string& text);
// Of tensors: each one's name, dtype, shape and bytes, in name order (host
// copies of device tensors).
std::string sha256_tensors(const TensorMap& tensors);

}  // namespace qat::apps
