#pragma once
// The record `qat calibrate` writes beside a calibration cache (FILE ->
// FILE.source.yaml; TensorRT reads only FILE): what the cache was computed
// from, as digests, and the observed range of every calibrated tensor (an
// affine grid needs the minimum, which the cache's one scale does not hold).
// Unlike TensorRT, which reuses a stale cache silently, qat refuses a cache
// whose sources changed, naming what changed.
#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "quant/observe/calibrators.h"

namespace qat::apps {

// sha256 digests (apps/file_digest.h), in the order they are checked.
struct CalibrationSources {
  std::string model;          // model name, classes, backend and every prepared layer's specs
  std::string weights;        // the FP32 checkpoint file
  std::string preprocessing;  // image size, resize, mean, std
  std::string images;         // the calibration images (paths under the train root) and their count
};

struct CalibrationRecord {
  quant::Calibrator calibrator = quant::Calibrator::entropy;
  double percentile = 99.99;
  int64_t images = 0;
  CalibrationSources sources;
  std::map<std::string, std::pair<float, float>> ranges;  // tensor -> observed [min, max]
  std::string cache_sha256;  // of the cache file the record describes
};

std::string record_path(const std::string& cache_path);
// The record ends with `record_sha256:`, the digest of every line above it,
// so that an edit of the record (its ranges, a source digest) is refused like
// an edit of the cache, which `cache_sha256` ties to it.
void write_record(const std::string& path, const CalibrationRecord& r);
// Errors name the file, the key and the line; a record whose digest does not
// match its text, or that has none (qat before the digest), is refused.
CalibrationRecord read_record(const std::string& path);
// Throws naming both files unless the cache is the one the record was written with.
void check_record_matches_cache(const CalibrationRecord& r, const std::string& cache_path);
// Throws, naming the cache and the first source whose digest differs, unless
// all four match.
void check_sources(const CalibrationRecord& r, const CalibrationSources& now, const std::string& cache_path);

}  // namespace qat::apps
