// Any bytes as a calibration cache (TensorRT's text format) and as its source
// record (YAML): parsed or refused with a qat::Error, never a crash.
#include "apps/calibration_record.h"
#include "core/error.h"
#include "fuzz/fuzz_input.h"
#include "quant/observe/calibration_cache.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const qat::quant::CalibrationCache c =
        qat::quant::parse_cache(std::string(reinterpret_cast<const char*>(data), size), "fuzz.cache");
    (void)qat::quant::format_cache(c);
  } catch (const qat::Error&) {
  }
  const std::string path = qat::fuzz::write_input("calibration.cache.source.yaml", data, size);
  try {
    (void)qat::apps::read_record(path);
  } catch (const qat::Error&) {
  }
  return 0;
}
