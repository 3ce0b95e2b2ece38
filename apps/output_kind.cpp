#include "apps/output_kind.h"

#include <filesystem>
#include <vector>

#include "apps/integer_io.h"
#include "core/error.h"

namespace fs = std::filesystem;

namespace qat::apps {

namespace {

struct OutputKindFiles {
  const char* name;
  std::vector<const char*> files;  // any one of them shows the kind
};

OutputKindFiles output_kind_files(OutputKind kind) {
  switch (kind) {
    case OutputKind::training_run:
      return {"a training run", {"last.safetensors", "best.safetensors", "metrics.csv", "metrics.jsonl", ".lock"}};
    case OutputKind::export_model: return {"an export (qat export)", {kExportManifest, kExportWeights}};
    case OutputKind::calibration:
      return {"a calibration (qat calibrate)",
              {"calibrated.safetensors", "calibration.cache", "calibration.cache.source.yaml"}};
  }
  QAT_FAIL("output_kind_files: unknown kind ", static_cast<int>(kind));
}

}  // namespace

void check_out_kind(const std::string& command, const std::string& dir, std::initializer_list<OutputKind> refused,
                    const std::string& option) {
  std::error_code ec;
  for (OutputKind kind : refused) {
    const OutputKindFiles k = output_kind_files(kind);
    for (const char* file : k.files)
      QAT_CHECK(!fs::exists(fs::path(dir) / file, ec), command, ": ", option, " ", dir, " holds ", file, " of ",
                k.name, ", not ", command, "'s outputs; writing them beside it would mix two kinds of output: choose "
                "another folder");
  }
}

}  // namespace qat::apps
