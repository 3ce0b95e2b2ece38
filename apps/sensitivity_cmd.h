#pragma once
// `qat sensitivity CONFIG --checkpoint FP32.safetensors [--bits 4]`: which
// layers can go to low bits. Post-training (qat calibrate's machinery, no
// training): the baseline quantizes every layer of the config's quant:
// section at --high-bits (8); then each quantized layer alone goes to --bits
// (its weights and the activation it reads: quant.overrides' meaning), the
// rest staying at the high bits, and the frozen integer model is scored on N
// validation images (balanced over the classes). Layers are ranked by the
// increase of the validation loss (smoother than top-1 on a few hundred
// images; top-1 beside it). Then the mixed-precision choice: every layer at
// low bits except the most sensitive ones, as few kept high as --max-drop
// (top-1 points below the baseline) allows, or as many as fit --size-mb of
// weights. Layers the config's own quant.overrides set keep those bits in
// every variant and are not ranked (the report lists them). --finetune-steps K: every variant also trains K steps (QAT from
// its calibration) before scoring: slower, closer to what training will
// give (exactly K steps, over several epochs where K is more than one; the
// fine-tunes run in a scratch folder that is not kept). Writes to --out
// (Note [output folder]): sensitivity.md, sensitivity.svg, overrides.yaml
// (the quant.overrides snippet) and mixed.yaml (the config with it, ready
// for qat train).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "apps/config.h"
#include "quant/observe/calibrators.h"

namespace qat::apps {

struct SensitivityArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::string checkpoint;
  int64_t bits = 4, high_bits = 8;
  int64_t images = 500;        // validation images scored
  int64_t calib_images = 512;  // training images calibrating each variant
  quant::Calibrator calibrator = quant::Calibrator::mse;
  double max_drop = 0.5;  // top-1 points below the high-bit baseline
  double size_mb = 0;     // > 0: a weight-size budget instead of max_drop
  // > 0: each variant (and the baseline and mixed candidates) also trains
  // this many steps from its calibration (the config's method, optimizer and
  // lr; quant.init_from = the calibration) before it is scored.
  int64_t finetune_steps = 0;
  std::string out_dir;    // empty: <output.dir>-sensitivity
};

struct LayerSensitivity {
  std::string layer;
  int64_t weights = 0;  // weight elements
  double top1 = 0, loss = 0;  // with only this layer at low bits
  double drop = 0, loss_increase = 0;  // vs the high-bit baseline
};

// How --finetune-steps is trained: `epochs` epochs of `epoch_steps` steps.
struct FinetunePlan {
  int64_t epochs = 0, epoch_steps = 0;
};

struct SensitivityReport {
  double fp32_top1 = 0, fp32_loss = 0;
  double base_top1 = 0, base_loss = 0;  // every layer at the high bits
  std::vector<LayerSensitivity> layers;  // most sensitive first
  std::vector<std::string> keep_high;    // the mixed choice: layers kept at the high bits
  double mixed_top1 = 0, mixed_loss = 0;
  int64_t base_bytes = 0, low_bytes = 0, mixed_bytes = 0;  // weight storage
  std::string out_dir;
  FinetunePlan plan;                          // --finetune-steps > 0
  std::vector<int64_t> finetune_steps_done;   // per fine-tune, read back from its checkpoint
  ExperimentConfig finetune_config;           // the last fine-tune's
  std::map<std::string, quant::LayerBits> fixed;  // the config's quant.overrides: kept, not ranked

};

int run_sensitivity(const SensitivityArgs& args, SensitivityReport* report = nullptr);

}  // namespace qat::apps
