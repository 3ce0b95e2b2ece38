// Any bytes as an export folder: the input is a manifest, a separator line
// and a weights file. Loaded (and run on a tiny batch) or refused with a
// qat::Error, never a crash: no manifest may reach an allocation or a kernel
// it has not been checked for.
#include <filesystem>
#include <string_view>

#include "apps/integer_io.h"
#include "core/error.h"
#include "fuzz/fuzz_input.h"

namespace {
constexpr std::string_view kSeparator = "\n----weights.safetensors----\n";
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t cut = in.find(kSeparator);
  const std::string_view manifest = in.substr(0, cut);
  const std::string_view weights = cut == std::string_view::npos ? std::string_view() : in.substr(cut + kSeparator.size());
  const std::string dir = "/tmp/qat_fuzz_export_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  qat::fuzz::write_file(dir + "/manifest.yaml", manifest.data(), manifest.size());
  qat::fuzz::write_file(dir + "/weights.safetensors", weights.data(), weights.size());
  try {
    const qat::apps::ExportedModel m = qat::apps::load_export(dir);
    if (m.image_size <= 64) (void)m.model.forward(qat::Tensor::zeros({1, 3, m.image_size, m.image_size}));
  } catch (const qat::Error&) {
  }
  return 0;
}
