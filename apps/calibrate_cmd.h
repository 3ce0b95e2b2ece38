#pragma once
// `qat calibrate CONFIG --checkpoint FP32.safetensors`: post-training
// quantization the TensorRT way (docs/math/calibration.md). N training images
// (balanced across classes, seeded) with the validation transform go through
// the float network while histogram observers collect every activation's
// |x|; a calibrator picks each threshold; weights take their max per channel.
// Writes to --out: calibrated.safetensors (a min/max-layout QAT checkpoint
// that `qat eval`, `qat compare-layers` and `qat export` take with the
// config.yaml beside it), the calibration cache (TensorRT's format) and its
// source record. A cache that exists is read instead (calibration skipped),
// refused when what it was computed from changed.
// --compare: every calibrator on the same histograms; a table (val top-1 and
// top-5 of the frozen integer model, delta vs FP32, calibration time) and a
// chart in --out.
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "apps/output_kind.h"
#include "quant/observe/calibrators.h"

namespace qat::apps {

struct CalibrateArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::string checkpoint;                       // FP32 checkpoint
  std::optional<quant::Calibrator> calibrator;  // unset: entropy (or the cache's)
  double percentile = 99.99;
  int64_t images = 512;
  std::string cache;    // empty: <out>/calibration.cache
  std::string out_dir;  // empty: <output.dir>-ptq
  bool compare = false;
};

// One calibrator's row of --compare.
struct CalibratorResult {
  quant::Calibrator calibrator;
  double top1 = 0, top5 = 0;
  double seconds = 0;  // histogram collection (shared) + this calibrator's search
};

struct CalibrateReport {
  std::string out_dir;
  double collect_seconds = 0;   // the calibration forward passes
  double float_seconds = 0;     // FP32 inference of the same images
  double fp32_top1 = 0, fp32_top5 = 0;  // --compare only
  std::vector<CalibratorResult> results;  // --compare only
};

int run_calibrate(const CalibrateArgs& args, CalibrateReport* report = nullptr);



}  // namespace qat::apps
