// Any bytes as an image file: decoded within the default limits or refused
// with a qat::Error naming the file, never a crash or a huge allocation.
#include "core/error.h"
#include "data/image.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = qat::fuzz::write_input("in.img", data, size);
  try {
    const qat::data::Image img = qat::data::decode_image(path, qat::data::DecodeLimits{int64_t{1} << 22, 32.0});
    (void)img.rgb.size();
  } catch (const qat::Error&) {
  }
  return 0;
}
