#pragma once
// Commands on the frozen integer model: `qat export`, `qat infer`,
// `qat compare-layers` (`qat eval` on an export folder lives in train.cpp).
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "quant/convert/compare_layers.h"

namespace qat::apps {

struct ExportArgs {
  std::string config, checkpoint, out_dir;
  std::vector<std::string> overrides;
  std::string format = "qat";            // qat (folder) | onnx (out_dir is the .onnx file)
  std::string onnx_profile = "standard";  // standard | tensorrt
  bool onnx_int32_bias = false;            // onnx_export.h: OnnxExportOptions::int32_bias
};
int run_export(const ExportArgs& args);

struct InferArgs {
  std::string export_dir, input;  // an image file or a folder (searched recursively)
  int top = 5;
  int threads = 0;
  // Also writes PREFIX.inputs.f32 (each image as the model saw it, (3, S, S)
  // float32), PREFIX.logits.f32 (the integer model's logits) and
  // PREFIX.paths.txt: what another runtime is checked against
  // (bench/onnx_eval.py).
  std::string save;
  // Where the integer model runs: cpu, or cuda (CudaIntegerModel: the same
  // logits bit for bit; refused naming why without a GPU, before any image).
  std::string device = "cpu";
};
int run_infer(const InferArgs& args);

// The top classes of one image, most probable first (softmax of the logits).
struct Prediction {
  std::string path;
  std::vector<std::pair<std::string, double>> top;  // (class name, probability)
  std::string error;                                 // why the image could not be read (then `top` is empty)
};
struct ExportedModel;
// sink (optional): each decoded image's input tensor (1, 3, S, S) and logits.
using PredictionSink = std::function<void(const std::string& path, const Tensor& x, const std::vector<float>& logits)>;
// forward (optional): the integer model's forward to use (images on the
// host in, logits out on any device); ex.model.forward when empty.
std::vector<Prediction> predict_images(const ExportedModel& ex, const std::string& input, int top,
                                       const PredictionSink& sink = {},
                                       const std::function<Tensor(const Tensor&)>& forward = {});

struct CompareLayersArgs {
  std::string config, checkpoint;
  std::vector<std::string> overrides;
  int64_t images = 64;  // 0: the whole validation set
};
// Per integer layer, summed over the images compared (the last: the logits).
struct LayerComparison {
  int64_t images = 0;
  std::string images_of;  // the folder they came from
  std::vector<quant::LayerDiff> layers;
};
LayerComparison compare_checkpoint_layers(const CompareLayersArgs& args);
// Prints compare_checkpoint_layers' table; `result`, when given, receives it.
int run_compare_layers(const CompareLayersArgs& args, LayerComparison* result = nullptr);

}  // namespace qat::apps
