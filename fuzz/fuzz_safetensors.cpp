// Any bytes as a safetensors file: a clean qat::Error or a loaded file whose
// tensors all fit the bytes, never a crash (AddressSanitizer watches).
#include "core/error.h"
#include "core/safetensors.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = qat::fuzz::write_input("in.safetensors", data, size);
  try {
    const qat::SafetensorsFile f = qat::load_safetensors(path);
    for (const auto& [name, t] : f.tensors) (void)t.nbytes();
  } catch (const qat::Error&) {
  }
  return 0;
}
