#include "apps/calibration_record.h"

#include <cstdio>
#include <cstring>

#include "apps/file_digest.h"
#include "apps/yaml_value.h"
#include "core/error.h"
#include "core/text_file.h"

namespace qat::apps {

namespace {

// %.9g: a float32 reads back to the same bits.
std::string exact(float v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.9g", static_cast<double>(v));
  return b;
}

struct SourceField {
  const char* key;
  const char* what;  // for the stale-cache error
  std::string CalibrationSources::*field;
};
constexpr SourceField kSources[] = {
    {"model", "the model or its quantization (model, classes, backend, bits, layer specs)", &CalibrationSources::model},
    {"weights", "the FP32 checkpoint's contents", &CalibrationSources::weights},
    {"preprocessing", "the preprocessing (image_size, resize, mean, std)", &CalibrationSources::preprocessing},
    {"images", "the calibration images (data.train, --images, train.seed)", &CalibrationSources::images},
};

constexpr const char* kRecordDigestKey = "record_sha256:";

// The last line is `record_sha256: <digest of every line above>`.
void check_record_digest(const std::string& path) {
  const std::string text = read_text_file(path);
  const size_t at = text.rfind(std::string("\n") + kRecordDigestKey);
  QAT_CHECK(at != std::string::npos, "calibration record ", path, " has no ", kRecordDigestKey,
            " line (written by a qat before records carried their digest, or cut short); delete it and its cache "
            "to calibrate again");
  const std::string body = text.substr(0, at + 1);
  std::string line = text.substr(at + 1 + std::strlen(kRecordDigestKey));
  line = line.substr(0, line.find('\n'));
  const size_t b = line.find_first_not_of(' '), e = line.find_first_of(" #", b);
  const std::string want = b == std::string::npos ? "" : line.substr(b, e == std::string::npos ? e : e - b);
  const std::string got = sha256_text(body);
  QAT_CHECK(want == got, "calibration record ", path, " was edited: its ", kRecordDigestKey, " ",
            want.substr(0, 12), "... does not match its text (", got.substr(0, 12),
            "...); delete it and its cache to calibrate again");
}

}  // namespace

std::string record_path(const std::string& cache_path) { return cache_path + ".source.yaml"; }

void write_record(const std::string& path, const CalibrationRecord& r) {
  std::string s = "# What the calibration cache beside this file was computed from (qat calibrate).\n"
                  "# TensorRT reads only the cache; qat refuses the cache when a digest no longer matches.\n";
  s += "calibrator: " + std::string(quant::calibrator_name(r.calibrator)) + "\n";
  char pct[32];
  std::snprintf(pct, sizeof pct, "%.17g", r.percentile);
  s += "percentile: " + std::string(pct) + "\n";
  s += "images: " + std::to_string(r.images) + "\n";
  s += "sources:  # sha256\n";
  for (const SourceField& f : kSources) s += "  " + std::string(f.key) + ": " + r.sources.*f.field + "\n";
  s += "ranges:  # observed [min, max] per tensor\n";
  for (const auto& [name, mm] : r.ranges) s += "  " + name + ": [" + exact(mm.first) + ", " + exact(mm.second) + "]\n";
  s += "cache_sha256: " + r.cache_sha256 + "\n";
  s += std::string(kRecordDigestKey) + " " + sha256_text(s) + "  # of every line above\n";
  write_text_file_atomic(path, s);
}

CalibrationRecord read_record(const std::string& path) {
  check_record_digest(path);
  const YamlValue root = load_yaml_file(path);
  root.only_keys({"calibrator", "percentile", "images", "sources", "ranges", "cache_sha256", "record_sha256"});
  CalibrationRecord r;
  r.calibrator = root.get("calibrator").as<quant::Calibrator>();
  r.percentile = root.get("percentile").as<double>();
  r.images = root.get("images").as<int64_t>();
  const YamlValue src = root.get("sources");
  src.only_keys({"model", "weights", "preprocessing", "images"});
  for (const SourceField& f : kSources) r.sources.*f.field = src.get(f.key).as<std::string>();
  for (const auto& [name, v] : root.get("ranges").entries()) {
    const auto mm = v.items(2, "numbers [min, max]");
    const float lo = mm[0].as<float>(), hi = mm[1].as<float>();
    if (!(lo <= hi)) v.fail("min > max");
    r.ranges[name] = {lo, hi};
  }
  r.cache_sha256 = root.get("cache_sha256").as<std::string>();
  return r;
}

void check_record_matches_cache(const CalibrationRecord& r, const std::string& cache_path) {
  const std::string now = sha256_file(cache_path);
  QAT_CHECK(now == r.cache_sha256, "calibration cache ", cache_path, " is not the file its record ",
            record_path(cache_path), " was written with (cache_sha256 ", r.cache_sha256.substr(0, 12), "..., the file's ",
            now.substr(0, 12), "...): the cache was edited or replaced; delete both to calibrate again");
}

void check_sources(const CalibrationRecord& r, const CalibrationSources& now, const std::string& cache_path) {
  for (const SourceField& f : kSources) {
    const std::string &was = r.sources.*f.field, &is = now.*f.field;
    QAT_CHECK(was == is, "calibration cache ", cache_path, " is stale: ", f.what, " changed since it was computed (",
              f.key, " digest ", was.substr(0, 12), "..., now ", is.substr(0, 12),
              "...); delete it (and ", record_path(cache_path), ") to calibrate again, or name another --cache");
  }
}

}  // namespace qat::apps
