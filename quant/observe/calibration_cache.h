#pragma once
// TensorRT's INT8 calibration cache (docs/math/calibration.md): a text file, first
// line a header naming the TensorRT version and the calibrator, then one
// line per tensor, `name: <hex>`, the hex being the 8 lowercase digits of the
// float32 scale's bits (T / 127) as one 32-bit integer (most significant
// digit first). Example, TensorRT 8.6.1's entropy calibrator:
//   TRT-8601-EntropyCalibration2
//   features.0.input_fake_quant: 3c010204
// Header per calibrator: entropy EntropyCalibration2, max MinMaxCalibration
// (TensorRT's names); percentile PercentileCalibration and mse
// MSECalibration (qat's: TensorRT has no such calibrators, and recalibrates
// rather than read a header it does not know). What the cache was computed
// from is recorded beside it by `qat calibrate` (apps/calibrate_cmd.h).
#include <string>
#include <utility>
#include <vector>

#include "quant/observe/calibrators.h"

namespace qat::quant {

inline constexpr int kTensorRtVersion = 8601;  // the TensorRT whose header qat writes (8.6.1)

struct CalibrationCache {
  Calibrator calibrator = Calibrator::entropy;
  int version = kTensorRtVersion;
  std::vector<std::pair<std::string, float>> scales;  // in file order
};

std::string cache_header(Calibrator c, int version = kTensorRtVersion);
std::string format_cache(const CalibrationCache& cache);
// where: the file name, for errors (which name the line and what is wrong:
// a header that is not TRT-<digits>-<calibrator>, a line without ": ", hex
// that is not 8 hex digits, a scale that is not finite and > 0, a name twice).
CalibrationCache parse_cache(const std::string& text, const std::string& where);

// Written to a temporary file, then renamed: an interrupted write leaves the
// old cache, not half a new one.
void write_cache(const std::string& path, const CalibrationCache& cache);
CalibrationCache read_cache(const std::string& path);

}  // namespace qat::quant
