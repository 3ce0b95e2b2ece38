// Any bytes as an experiment config: loaded (and written back) or refused
// with a qat::Error, never a crash. Data folders are taken as recorded.
#include "apps/config.h"
#include "core/error.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = qat::fuzz::write_input("config.yaml", data, size);
  try {
    const qat::apps::ExperimentConfig c = qat::apps::load_config(path, {}, qat::apps::DataPaths::as_recorded);
    (void)qat::apps::config_to_yaml(c);
  } catch (const qat::Error&) {
  }
  return 0;
}
