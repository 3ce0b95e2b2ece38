// `qat export` / load_export / `qat eval` and `qat infer` on an export folder,
// the numpy reader of docs/export_format.md, and refusal of bad exports.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/cuda_test_util.h"
#include "tests/test_util.h"

#include "apps/bench.h"
#include "apps/file_digest.h"
#include "apps/integer_cmd.h"
#include "apps/integer_io.h"
#include "apps/run_state.h"
#include "apps/train.h"
#include "core/autograd.h"
#include "core/safetensors.h"
#include "data/image.h"
#include "data/transforms.h"
#include "quant/convert/freeze.h"
#include "quant/sim/weight_lookahead.h"

using namespace qat;
using namespace qat::apps;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

const std::string kSample = testing::sample_data_dir();

fs::path fresh_dir(const std::string& name) { return testing::fresh_temp_dir("qat_export_", name); }

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void write_text(const fs::path& p, const std::string& s) { std::ofstream(p) << s; }

std::string replace_once(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  REQUIRE(at != std::string::npos);
  return s.substr(0, at) + to + s.substr(at + from.size());
}

// Rewrites an export's weights and the manifest's digest of them, as a
// consistent (if crafted) pair: what is checked next is the tensors themselves.
void save_weights_keeping_pair(const fs::path& dir, const TensorMap& tensors) {
  const std::string old_digest = sha256_file((dir / "weights.safetensors").string());
  save_safetensors((dir / "weights.safetensors").string(), tensors);
  const std::string manifest = read_text(dir / "manifest.yaml");
  write_text(dir / "manifest.yaml",
             replace_once(manifest, "weights_sha256: " + old_digest,
                          "weights_sha256: " + sha256_file((dir / "weights.safetensors").string())));
}

// The python block of docs/export_format.md.
std::string doc_reader_example() {
  const std::string md = read_text(fs::path(QAT_SOURCE_DIR) / "docs" / "export_format.md");
  const size_t start = md.find("```python\n");
  REQUIRE(start != std::string::npos);
  const size_t end = md.find("```", start + 10);
  return md.substr(start + 10, end - start - 10);
}

std::string run_capture(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  REQUIRE(::pclose(p) == 0);
  return out;
}

std::string python_with_numpy() {
  for (const char* py : {"/usr/bin/python3", "python3"})
    if (std::system((std::string(py) + " -c 'import numpy' >/dev/null 2>&1").c_str()) == 0) return py;
  return "";
}

}  // namespace

TEST_CASE("export round trip: the loaded model gives the frozen model's logits", "[e2e][export]") {
  const fs::path dir = fresh_dir("roundtrip");
  const std::string cfg_path = testing::trained_sample_qat_run(dir, "quant: {enabled: true}\n");
  const std::string ckpt = (dir / "run" / "best.safetensors").string();
  const std::string out = (dir / "export").string();
  REQUIRE(run_export({cfg_path, ckpt, out, {}}) == 0);
  const ExportedModel ex = load_export(out);
  REQUIRE(ex.classes.size() == 10);
  REQUIRE(ex.image_size == 32);

  const ExperimentConfig cfg = load_config(cfg_path);
  ModulePtr m = build_model(cfg, false, false);
  load_run_state(ckpt, *m, nullptr);
  const quant::IntegerModel frozen = quant::freeze(*m);
  REQUIRE(ex.model.layers.size() == frozen.layers.size());
  Generator g(5);
  const Tensor x = Tensor::randn({4, 3, 32, 32}, g);
  REQUIRE(ex.model.forward(x).to_vector() == frozen.forward(x).to_vector());

  // qat compare-layers on the same run, all 100 val images: the figures it prints.
  LayerComparison cmp;
  REQUIRE(run_compare_layers({cfg_path, ckpt, {}, 0}, &cmp) == 0);
  REQUIRE(cmp.images == 100);
  REQUIRE(cmp.layers.size() == ex.model.layers.size());
  for (const quant::LayerDiff& d : cmp.layers) {
    INFO(d.name << " (" << d.op << "): " << d.differ << " of " << d.count << " differ, max " << d.max_diff);
    CHECK(d.count > 0);
    // On real images a few ties round differently (docs/math/requantization.md):
    // at most 1 LSB on at most 0.5% of a layer's outputs (0.25% at the pool here).
    if (!d.logits) CHECK(d.max_diff <= 1);
    if (!d.logits) CHECK(static_cast<double>(d.differ) <= 0.005 * static_cast<double>(d.count));
  }
  REQUIRE(cmp.layers.front().differ == 0);  // the input is quantized with the same float arithmetic
  REQUIRE(cmp.layers.back().logits);
  REQUIRE(cmp.layers.back().rows == 100);
  REQUIRE(cmp.layers.back().top1_agree == 100);

  // qat eval on the folder: the integer model's accuracy on the 100 val images.
  const EvalSummary s = eval_checkpoint({cfg_path, {}, out});
  REQUIRE(s.images == 100);
  REQUIRE(s.epoch == -1);
  // ... with the preprocessing it was exported with only (another mean scored silently lower).
  REQUIRE_THROWS_WITH(eval_checkpoint({cfg_path, {"data.mean=[0,0,0]"}, out}),
                      Contains("data.mean[0] 0 (manifest input.mean[0] 0.485000014)"));
  // ... and for the model it was exported from only (another model's config scored it silently).
  REQUIRE_THROWS_WITH(eval_checkpoint({cfg_path, {"model.name=resnet20"}, out}),
                      Contains("eval: export " + out + " is of model small_cnn") &&
                          Contains("builds resnet20 (model.name)"));
  // qat infer: top-5 of each image from the export alone, most probable first,
  // its top-1 the argmax of the integer logits of the same preprocessed image.
  REQUIRE(run_infer({out, kSample + "/val/n01440764", 5, 1, ""}) == 0);
  // --save takes a file prefix; a folder would get hidden files named .inputs.f32 ...
  REQUIRE_THROWS_WITH(run_infer({out, kSample + "/val/n01440764", 5, 1, dir.string() + "/"}),
                      Contains("--save takes a file prefix") && Contains(dir.string() + "/infer"));
  REQUIRE_FALSE(fs::exists(dir / ".inputs.f32"));
  // --save writes its three files whole (10 images of 3 x 32 x 32 floats, 10 logits each) and replaces an
  // earlier set of them, but not a user's file under one of their names.
  const std::string prefix = (dir / "saved").string();
  REQUIRE(run_infer({out, kSample + "/val/n01440764", 5, 1, prefix}) == 0);
  CHECK(fs::file_size(prefix + ".inputs.f32") == 10 * 3 * 32 * 32 * 4);
  CHECK(fs::file_size(prefix + ".logits.f32") == 10 * 10 * 4);
  REQUIRE(run_infer({out, kSample + "/val/n01440764", 5, 1, prefix}) == 0);
  CHECK(fs::file_size(prefix + ".logits.f32") == 10 * 10 * 4);
  // A run with an unreadable image fails and leaves the earlier set as it was.
  const std::string earlier = read_text(fs::path(prefix + ".logits.f32"));
  fs::create_directories(dir / "some_bad");
  fs::copy_file(fs::directory_iterator(kSample + "/val/n01440764")->path(), dir / "some_bad" / "good.jpg");
  write_text(dir / "some_bad" / "broken.jpg", "not an image");
  REQUIRE(run_infer({out, (dir / "some_bad").string(), 5, 1, prefix}) == 1);
  CHECK(read_text(fs::path(prefix + ".logits.f32")) == earlier);
  const std::string paths = read_text(fs::path(prefix + ".paths.txt"));
  CHECK(std::count(paths.begin(), paths.end(), '\n') == 10);  // (the earlier run's ten, not the good image alone)
  REQUIRE(run_infer({out, kSample + "/val/n01440764", 5, 1, prefix}) == 0);  // (still its own set)
  const std::string user = (dir / "user").string();
  write_text(user + ".paths.txt", "my notes\n");
  REQUIRE_THROWS_WITH(run_infer({out, kSample + "/val/n01440764", 5, 1, user}),
                      Contains("--save " + user + " would replace " + user + ".paths.txt, which is not part of an "
                                                                               "earlier --save's three files"));
  CHECK(read_text(fs::path(user + ".paths.txt")) == "my notes\n");
  CHECK_FALSE(fs::exists(user + ".inputs.f32"));
  for (const auto& e : fs::directory_iterator(dir))  // no temporaries left
    CHECK(e.path().filename().string().find(".tmp.") == std::string::npos);
  const auto preds = predict_images(ex, kSample + "/val/n01440764", 5);
  REQUIRE(preds.size() == 10);
  for (const auto& p : preds) {
    REQUIRE(p.top.size() == 5);
    double total = 0;
    for (size_t k = 0; k < p.top.size(); ++k) {
      total += p.top[k].second;
      if (k) REQUIRE(p.top[k].second <= p.top[k - 1].second);
    }
    REQUIRE(total <= 1.0 + 1e-9);
  }
  const data::TransformSpec spec = eval_transform(ex);
  Generator unused(0);
  Tensor img = Tensor::empty({1, 3, 32, 32});
  data::apply_transform(data::decode_image(preds[0].path), spec, false, unused, img.data<float>());
  const std::vector<float> logits = ex.model.forward(img).to_vector();
  const size_t best = std::max_element(logits.begin(), logits.end()) - logits.begin();
  REQUIRE(preds[0].top[0].first == ex.classes[best]);

  // A bad image in a folder is reported and the others are still predicted;
  // the exit status says something went wrong.
  const fs::path mixed = dir / "mixed";
  fs::create_directories(mixed);
  fs::copy_file(preds[0].path, mixed / "a.jpg");
  write_text(mixed / "b.jpg", "not a jpeg");
  fs::copy_file(preds[1].path, mixed / "c.jpg");
  const auto mixed_preds = predict_images(ex, mixed.string(), 3);
  REQUIRE(mixed_preds.size() == 3);
  CHECK(mixed_preds[0].top.size() == 3);
  CHECK(mixed_preds[1].top.empty());
  CHECK_THAT(mixed_preds[1].error, Contains("b.jpg"));
  CHECK(mixed_preds[2].top.size() == 3);
  REQUIRE(run_infer({out, mixed.string(), 3, 1, ""}) == 1);
  // A dangling link named like an image is reported by name, not skipped.
  const fs::path linked = dir / "linked";
  fs::create_directories(linked);
  fs::copy_file(preds[0].path, linked / "a.jpg");
  fs::create_symlink(linked / "gone.jpg", linked / "d.jpg");
  const auto linked_preds = predict_images(ex, linked.string(), 3);
  REQUIRE(linked_preds.size() == 2);
  CHECK(linked_preds[0].top.size() == 3);
  CHECK_THAT(linked_preds[1].error, Contains("d.jpg") && Contains("link"));
  REQUIRE(run_infer({out, linked.string(), 3, 1, ""}) == 1);

  // --device cuda: the same logits (--save) from the GPU, or a refusal naming
  // why before any image is read or file written.
  InferArgs on_gpu{out, mixed.string(), 3, 1, (dir / "gpu").string()};
  on_gpu.device = "cuda";
  if (!testing::cuda_device_or_skip()) {
    REQUIRE_THROWS_WITH(run_infer(on_gpu), Contains("infer --device cuda: ") &&
                                               Contains(cuda::built() ? "no usable CUDA device" : "without CUDA"));
    REQUIRE_FALSE(fs::exists(dir / "gpu.logits.f32"));
  } else {
    REQUIRE(run_infer(on_gpu) == 1);  // (b.jpg again)
    REQUIRE(run_infer({out, mixed.string(), 3, 1, (dir / "cpu").string()}) == 1);
    auto bytes = [](const fs::path& p) {
      std::ifstream f(p, std::ios::binary);
      return std::string(std::istreambuf_iterator<char>(f), {});
    };
    REQUIRE(bytes(dir / "gpu.logits.f32").size() == 2 * 10 * sizeof(float));
    REQUIRE(bytes(dir / "gpu.logits.f32") == bytes(dir / "cpu.logits.f32"));
  }
}

TEST_CASE("4-bit weights are packed two per byte and read back", "[e2e][export]") {
  REQUIRE(pack_int4(std::vector<int8_t>{-8, 7, -1, 0, 3}.data(), 1, 5) == std::vector<uint8_t>{0x78, 0x0F, 0x03});
  std::vector<int8_t> back(5);
  unpack_int4(std::vector<uint8_t>{0x78, 0x0F, 0x03}.data(), 1, 5, back.data());
  REQUIRE(back == std::vector<int8_t>{-8, 7, -1, 0, 3});
  // Unsigned 4-bit weights (0..15) keep their values: no sign extension.
  const std::vector<int8_t> u{0, 8, 15, 9, 7};
  std::vector<int8_t> uback(5);
  unpack_int4(pack_int4(u.data(), 1, 5).data(), 1, 5, uback.data(), /*is_signed=*/false);
  REQUIRE(uback == u);

  const fs::path dir = fresh_dir("int4");
  const std::string cfg = testing::trained_sample_qat_run(dir, "quant: {enabled: true, method: lsq, bits: 4}\n");
  const std::string out = (dir / "export").string();
  REQUIRE(run_export({cfg, (dir / "run" / "best.safetensors").string(), out, {}}) == 0);
  const SafetensorsFile w = load_safetensors(out + "/weights.safetensors");
  const Tensor& fc = w.tensors.at("fc.weight");
  REQUIRE(fc.dtype() == DType::u8);
  REQUIRE(fc.sizes() == Shape{10, 8});  // 16 inputs -> 8 bytes per output channel
  REQUIRE(read_text(out + "/manifest.yaml").find("weight_packing: int4x2") != std::string::npos);
  const ExportedModel ex = load_export(out);
  REQUIRE(ex.model.layers.back().weight_bits == 4);
}

TEST_CASE("the numpy reader of docs/export_format.md reads the export", "[e2e][export]") {
  const std::string py = python_with_numpy();
  if (py.empty()) {
    WARN("no python3 with numpy: the docs example is not run");
    return;
  }
  const fs::path dir = fresh_dir("numpy");
  const std::string cfg = testing::trained_sample_qat_run(dir, "quant: {enabled: true, overrides: {fc: {weight_bits: 4}}}\n");
  const std::string out = (dir / "export").string();
  REQUIRE(run_export({cfg, (dir / "run" / "best.safetensors").string(), out, {}}) == 0);
  write_text(dir / "reader.py", doc_reader_example());
  const std::string printed = run_capture(py + " " + (dir / "reader.py").string() + " " + out);
  // One line per tensor: name dtype shape sum-of-integer-values, as the C++ loader sees them.
  const ExportedModel ex = load_export(out);
  int lines = 0;
  for (const auto& l : ex.model.layers) {
    if (l.op != quant::IntOp::conv && l.op != quant::IntOp::linear) continue;
    int64_t wsum = 0, bsum = 0;
    for (int64_t i = 0; i < l.weight.numel(); ++i) wsum += l.weight.data<int8_t>()[i];
    for (int64_t i = 0; i < l.bias.numel(); ++i) bsum += l.bias.data<int32_t>()[i];
    INFO(printed);
    std::ostringstream weight_line, weight_sum;
    weight_line << l.name << ".weight " << (l.weight_bits <= 4 ? "uint8" : "int8");
    weight_sum << " " << wsum << "\n";
    REQUIRE(printed.find(weight_line.str()) != std::string::npos);
    REQUIRE(printed.find(weight_sum.str()) != std::string::npos);
    std::ostringstream bias_line;  // (a stream: GCC 12 warns falsely on the chained string +)
    bias_line << l.name << ".bias int32 (" << l.out_channels << ",) " << bsum;
    REQUIRE(printed.find(bias_line.str()) != std::string::npos);
    lines += 2;
  }
  REQUIRE(lines == 6);
}

TEST_CASE("bad exports are refused with the file and the field named", "[e2e][export]") {
  const fs::path dir = fresh_dir("bad");
  const std::string cfg = testing::trained_sample_qat_run(dir, "quant: {enabled: true}\n");
  const fs::path good = dir / "export";
  REQUIRE(run_export({cfg, (dir / "run" / "best.safetensors").string(), good.string(), {}}) == 0);
  const std::string manifest = read_text(good / "manifest.yaml");
  auto broken = [&](const std::string& name) {
    const fs::path d = dir / name;
    fs::remove_all(d);
    fs::copy(good, d);
    return d;
  };
  SECTION("unknown format version") {
    const fs::path d = broken("version");
    write_text(d / "manifest.yaml", replace_once(manifest, "format_version: 1", "format_version: 7"));
    REQUIRE_THROWS_WITH(load_export(d.string()),
                        Contains("manifest.yaml") && Contains("format_version") && Contains("unknown version 7"));
  }
  SECTION("missing field") {
    const fs::path d = broken("missing");
    const size_t key = manifest.find("    weight_zero_point:");
    REQUIRE(key != std::string::npos);
    write_text(d / "manifest.yaml", manifest.substr(0, key) + manifest.substr(manifest.find('\n', key) + 1));
    // Said of the mapping that lacks the key: layers[1] begins at "- name: features.0".
    const size_t at = manifest.find("- name: features.0\n");
    REQUIRE(at != std::string::npos);
    const std::string line =
        "manifest.yaml, line " + std::to_string(std::count(manifest.begin(), manifest.begin() + at, '\n') + 1) + ":";
    REQUIRE_THROWS_WITH(load_export(d.string()),
                        Contains(line) && Contains("missing required key 'layers[1].weight_zero_point'"));
  }
  SECTION("a misspelt key: an optional one would be read as absent") {
    const fs::path d = broken("misspelt");
    write_text(d / "manifest.yaml", replace_once(manifest, "    weight_signed:", "    weight_signd:"));
    REQUIRE_THROWS_WITH(load_export(d.string()), Contains("manifest.yaml, line ") &&
                                                     Contains("unknown key 'layers[1].weight_signd'") &&
                                                     Contains("(a conv layer takes: name, kind, inputs"));
    write_text(d / "manifest.yaml", replace_once(manifest, " zero_point_frac:", " zero_point_fract:"));
    REQUIRE_THROWS_WITH(load_export(d.string()), Contains("unknown key 'layers[0].output.zero_point_fract'"));
  }
  SECTION("two layers of one name: the second would read the first's weights") {
    const fs::path d = broken("twice");
    write_text(d / "manifest.yaml", replace_once(manifest, "- name: features.4\n", "- name: features.0\n"));
    REQUIRE_THROWS_WITH(load_export(d.string()),
                        Contains("manifest.yaml, line ") &&
                            Contains(".name: 'features.0' is layer 1's name too; each layer's must be its own"));
  }
  SECTION("a tensor no layer reads") {
    const fs::path d = broken("extra");
    TensorMap tensors = load_safetensors((d / "weights.safetensors").string()).tensors;
    tensors["features.9.weight"] = Tensor::zeros({2, 2}).to(DType::i8);
    save_weights_keeping_pair(d, tensors);
    REQUIRE_THROWS_WITH(load_export(d.string()),
                        Contains("weights.safetensors: tensor 'features.9.weight' is no layer's weight or bias in") &&
                            Contains("manifest.yaml"));
  }
  SECTION("wrong type") {
    const fs::path d = broken("type");
    write_text(d / "manifest.yaml", replace_once(manifest, "in_channels: 3", "in_channels: three"));
    REQUIRE_THROWS_WITH(load_export(d.string()), Contains("layers[1].in_channels") && Contains("three"));
  }
  SECTION("tensor with the wrong dtype") {
    const fs::path d = broken("dtype");
    SafetensorsFile w = load_safetensors((d / "weights.safetensors").string());
    w.tensors["features.0.bias"] = w.tensors["features.0.bias"].to(DType::f32);
    save_weights_keeping_pair(d, w.tensors);
    REQUIRE_THROWS_WITH(load_export(d.string()), Contains("weights.safetensors") && Contains("features.0.bias"));
  }
  SECTION("tensor with the wrong shape") {
    const fs::path d = broken("shape");
    SafetensorsFile w = load_safetensors((d / "weights.safetensors").string());
    w.tensors["fc.weight"] = Tensor::zeros({10, 15}, DType::i8);
    save_weights_keeping_pair(d, w.tensors);
    REQUIRE_THROWS_WITH(load_export(d.string()), Contains("weights.safetensors") && Contains("fc.weight"));
  }
  SECTION("weights that are not the manifest's") {
    const fs::path d = broken("pair");
    const SafetensorsFile w = load_safetensors((d / "weights.safetensors").string());
    save_safetensors((d / "weights.safetensors").string(), w.tensors, {{"written", "by another export"}});
    REQUIRE_THROWS_WITH(load_export(d.string()),
                        Contains("weights_sha256: does not match") && Contains("weights.safetensors"));
  }
  SECTION("truncated weights file") {
    const fs::path d = broken("truncated");
    fs::resize_file(d / "weights.safetensors", fs::file_size(d / "weights.safetensors") - 100);
    REQUIRE_THROWS_WITH(load_export(d.string()), Contains("weights.safetensors"));
  }
  SECTION("per-channel list of the wrong length") {
    const fs::path d = broken("length");
    const size_t at = manifest.find("    multiplier: [");
    REQUIRE(at != std::string::npos);
    write_text(d / "manifest.yaml", manifest.substr(0, at) + "    multiplier: [1073741824]\n" +
                                        manifest.substr(manifest.find('\n', at) + 1));
    REQUIRE_THROWS_WITH(load_export(d.string()), Contains("multiplier") && Contains("expected a list of 8"));
  }
  SECTION("a folder without a manifest") {
    REQUIRE_THROWS_WITH(load_export(dir.string()), Contains("no manifest.yaml"));
  }
}

// Crafted manifests and weights (sizes that wrap, geometry that does not fit
// the previous layer, integers off their grid) are refused with the layer's
// key path before anything of their size is allocated or any kernel runs.
// An export is replaced as a whole: a reader sees the old pair of files or
// the new one; a folder holding anything else is never replaced.
TEST_CASE("re-exporting replaces the folder whole and never sweeps away other files", "[e2e][export]") {
  const fs::path dir = fresh_dir("replace");
  const std::string cfg = testing::trained_sample_qat_run(dir, "quant: {enabled: true}\n");
  const std::string ckpt = (dir / "run" / "best.safetensors").string();
  const fs::path out = dir / "export";
  REQUIRE(run_export({cfg, ckpt, out.string(), {}}) == 0);
  const std::string first = read_text(out / "manifest.yaml");
  REQUIRE(run_export({cfg, ckpt, out.string(), {}}) == 0);  // over its own export
  REQUIRE(read_text(out / "manifest.yaml") == first);
  // A manifest edited since (or a user's file under an output's name): kept, the export refused.
  write_text(out / "manifest.yaml", "# edited by hand\n" + first);
  REQUIRE_THROWS_WITH(run_export({cfg, ckpt, out.string(), {}}),
                      Contains("holds manifest.yaml, changed since export wrote it"));
  REQUIRE(read_text(out / "manifest.yaml") == "# edited by hand\n" + first);
  write_text(out / "manifest.yaml", first);
  REQUIRE_NOTHROW(load_export(out.string()));
  for (const auto& e : fs::directory_iterator(dir))  // no staging folder left behind
    REQUIRE(e.path().filename().string().find(".tmp-") == std::string::npos);

  // A checkpoint trained at 8 bits, exported as if it were 4-bit: refused
  // by its recorded quant settings, naming the key and both values.
  REQUIRE_THROWS_WITH(run_export({cfg, ckpt, (dir / "as4").string(), {"quant.bits=4"}}),
                      Contains(ckpt) &&
                          Contains("fc.weight_fake_quant: int8 sym per-channel(0) (the config: int4 sym per-channel(0))") &&
                          Contains("and 2 more"));
  REQUIRE_FALSE(fs::exists(dir / "as4"));
  // One saved before the settings were recorded: refused on load (its
  // stored activation zero points are off the 4-bit grid), not written for
  // the reader to refuse.
  SafetensorsFile old = load_safetensors(ckpt);
  for (auto it = old.metadata.begin(); it != old.metadata.end();)
    it = it->first.rfind("quantizer", 0) == 0 ? old.metadata.erase(it) : std::next(it);
  old.metadata.erase("metadata_sha256");  // recorded later than the settings
  const std::string unrecorded = (dir / "unrecorded.safetensors").string();
  save_safetensors(unrecorded, old.tensors, old.metadata);
  REQUIRE_THROWS_WITH(run_export({cfg, unrecorded, (dir / "as4").string(), {"quant.bits=4"}}),
                      Contains(unrecorded) && Contains("off the quantizer's uint4 affine per-tensor grid [0, 15]") &&
                          Contains("other quant settings"));
  REQUIRE_FALSE(fs::exists(dir / "as4"));

  const fs::path mine = dir / "mine";
  fs::create_directories(mine);
  write_text(mine / "notes.txt", "keep me");
  REQUIRE_THROWS_WITH(run_export({cfg, ckpt, mine.string(), {}}), Contains("notes.txt") && Contains("--out"));
  REQUIRE(read_text(mine / "notes.txt") == "keep me");
  // A user's file under the name of an output (a checkpoint copied there as
  // weights.safetensors): not the export's, so never overwritten.
  const fs::path named = dir / "named";
  fs::create_directories(named);
  fs::copy_file(ckpt, named / "weights.safetensors");
  REQUIRE_THROWS_WITH(run_export({cfg, ckpt, named.string(), {}}),
                      Contains("holds weights.safetensors, which export did not write there"));
  REQUIRE(read_text(named / "weights.safetensors") == read_text(ckpt));
}

TEST_CASE("crafted exports are refused before anything is allocated", "[e2e][export]") {
  const fs::path dir = fresh_dir("crafted");
  const std::string cfg = testing::trained_sample_qat_run(dir, "quant: {enabled: true}\n");
  const fs::path good = dir / "export";
  REQUIRE(run_export({cfg, (dir / "run" / "best.safetensors").string(), good.string(), {}}) == 0);
  const std::string manifest = read_text(good / "manifest.yaml");
  auto with_manifest = [&](const std::string& name, const std::string& from, const std::string& to) {
    const fs::path d = dir / name;
    fs::remove_all(d);
    fs::copy(good, d);
    write_text(d / "manifest.yaml", replace_once(manifest, from, to));
    return d.string();
  };
  struct Crafted {
    const char *what, *from, *to, *layer, *expect;
  };
  const Crafted cases[] = {
      {"a kernel size that wraps 64 bits", "in_channels: 3", "in_channels: 4611686018427387911", "layers[1]",
       "products per output"},
      {"an average-pool output of 2^32 rows", "output_size: [1, 1]", "output_size: [4294967296, 1]", "layers[4]",
       "larger than 1073741824 values"},
      {"max-pool padding of 2^61", "padding: [0, 0]", "padding: [2305843009213693952, 2305843009213693952]",
       "layers[2]", "at most half the kernel"},
      {"an input image of 2^32 pixels a side", "image_size: 32", "image_size: 4294967296", "input.image_size",
       "must be in [1, 16384]"},
      {"a layer that does not take the previous layer's output", "output_size: [1, 1]", "output_size: [2, 2]",
       "layers[6]", "input has 64 features, the layer expects 16"},
      {"a weight zero point off the grid", "weight_zero_point: [0,", "weight_zero_point: [200,", "layers[1]",
       "weight zero point 200"},
      {"weights off their grid", "weight_bits: 8", "weight_bits: 5", "layers[1]",
       "off the 5-bit signed grid [-16, 15]"},
      {"another format", "format: qat-integer-model", "format: other", "format", "must be qat-integer-model"},
      {"an unknown key", "format: qat-integer-model", "format: qat-integer-model\nextra: 1", "extra",
       "unknown key 'extra'"},
      {"an unknown input key", "resize: 36", "resize: 36\n  crop: 30", "input.crop", "unknown key 'input.crop'"},
  };
  int n = 0;
  for (const Crafted& c : cases) {
    INFO(c.what);
    const auto d = with_manifest("case" + std::to_string(n++), c.from, c.to);
    REQUIRE_THROWS_WITH(load_export(d), Contains(c.layer) && Contains(c.expect));
  }
  SECTION("a bias of 2^30") {
    const auto d = with_manifest("bias", "format: qat-integer-model", "format: qat-integer-model");
    SafetensorsFile w = load_safetensors(d + "/weights.safetensors");
    w.tensors["features.0.bias"].data<int32_t>()[0] = 1 << 30;
    save_weights_keeping_pair(d, w.tensors);
    REQUIRE_THROWS_WITH(load_export(d), Contains("layers[1]") && Contains("outside (-2^30, 2^30)"));
  }
}

namespace {

// `manifest` with every element of the list `key` of the layer named `layer`
// (or of `input:` when layer is empty) set to `value`.
std::string with_list(const std::string& manifest, const std::string& layer, const std::string& key,
                      const std::string& value) {
  const size_t at = layer.empty() ? manifest.find("input:\n") : manifest.find("- name: " + layer + "\n");
  REQUIRE(at != std::string::npos);
  const size_t open = manifest.find(" " + key + ": [", at) + key.size() + 4, close = manifest.find(']', open);
  REQUIRE(close != std::string::npos);
  std::string list = value;
  for (auto i = std::count(manifest.begin() + open, manifest.begin() + close, ','); i > 0; --i) list += ", " + value;
  return manifest.substr(0, open) + list + manifest.substr(close);
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  size_t n = 0;
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()), ++n)
    s.replace(at, from.size(), to);
  REQUIRE(n > 0);
  return s;
}

// The text of the layer named `layer` ("  - name: ..." up to the next layer).
std::string layer_block(const std::string& manifest, const std::string& layer) {
  const size_t at = manifest.find("  - name: " + layer + "\n");
  REQUIRE(at != std::string::npos);
  return manifest.substr(at, manifest.find("  - name: ", at + 1) - at);
}

}  // namespace

// Every scale, std and dequantization factor a manifest gives, and the
// products the integer model computes from them, must be normal floats (the
// last layer's logits within FLT_MAX / 4): a crafted one is refused at load,
// naming the file, the key, the layer and the value, instead of NaN logits.
TEST_CASE("manifest floats that would give NaN or infinite logits are refused", "[e2e][export]") {
  const fs::path dir = fresh_dir("floats");
  const std::string cfg = testing::trained_sample_qat_run(dir, "quant: {enabled: true}\n");
  const fs::path good = dir / "export";
  REQUIRE(run_export({cfg, (dir / "run" / "best.safetensors").string(), good.string(), {}}) == 0);
  const std::string manifest = read_text(good / "manifest.yaml");
  auto refused = [&](const std::string& crafted) {
    const fs::path d = dir / "crafted";
    fs::remove_all(d);
    fs::copy(good, d);
    write_text(d / "manifest.yaml", crafted);
    std::string error;
    try {
      load_export(d.string());
    } catch (const Error& e) {
      error = e.what();
    }
    CHECK_THAT(error, Contains((d / "manifest.yaml").string() + ", line "));
    return error;
  };
  const ExportedModel ex = load_export(good.string());
  const std::string fc_in = [&] {
    char b[32];
    std::snprintf(b, sizeof b, "%.9g", ex.model.layers.back().in.scale);
    return std::string(b);
  }();
  // The audit's case: 1e38 is itself a float, its inverse is not a normal one.
  CHECK_THAT(refused(with_list(manifest, "fc", "weight_scale", "1e38")),
             Contains("layers[6].weight_scale[0]: layer 'fc': weight scale 9.99999968e+37 must be a normal float whose "
                      "inverse is normal too"));
  // 1e33 is, but s_x s_w would put the logits beyond FLT_MAX / 4.
  CHECK_THAT(refused(with_list(manifest, "fc", "weight_scale", "1e33")),
             Contains("layers[6].weight_scale[0]: layer 'fc': input scale " + fc_in +
                      " x weight scale 9.99999994e+32") &&
                 Contains("exceeds 1.98070394e+28: the logits (up to 2^32 times it) would overflow"));
  for (const char* bad : {"0", "-1", "1e-45"}) {
    INFO(bad);  // a non-dequantizing layer's weight scales feed nothing at run time, but mean nothing either
    const std::string expect = std::string(bad) == "1e-45" ? "1.40129846e-45" : bad;
    CHECK_THAT(refused(with_list(manifest, "features.0", "weight_scale", bad)),
               Contains("layers[1].weight_scale[0]: layer 'features.0': weight scale " + expect + " must be a normal"));
  }
  // Both normal, their product (what the int32 bias counts in) not.
  CHECK_THAT(refused(with_list(manifest, "features.0", "weight_scale", "1e-37")),
             Contains("layers[1].weight_scale[0]: layer 'features.0': input scale ") &&
                 Contains(" x weight scale 9.99999991e-38 = ") && Contains(" is outside float's normal range"));
  CHECK_THAT(refused(with_list(manifest, "", "std", "1e-45")),
             Contains("input.std[0]: std 1.40129846e-45 must be a normal float"));
  CHECK_THAT(refused(with_list(with_list(manifest, "", "std", "1e-9"), "", "mean", "1e30")),
             Contains("input.std[0]: pixel 0 normalizes to -inf with input.mean[0] 1.00000002e+30 and input.std[0] "
                      "9.99999972e-10"));
  // A multiplier the scales do not give (the requantization would rescale by another factor).
  {
    const std::string f0 = layer_block(manifest, "features.0");
    const size_t at = f0.find("multiplier: [") + 13, end = f0.find(',', at);
    const std::string m0 = f0.substr(at, end - at);
    const std::string crafted = f0.substr(0, at) + std::to_string(std::stoll(m0) + 1) + f0.substr(end);
    CHECK_THAT(refused(replace_all(manifest, f0, crafted)),
               Contains("multiplier: layer 'features.0' channel 0: multiplier " + std::to_string(std::stoll(m0) + 1)) &&
                   Contains("do not match its scales") && Contains(": multiplier " + m0 + ", shift "));
  }
  // A fused ReLU on the dequantizing layer (its float logits have no clamp to hold it): refused, not ignored.
  const std::string fc = layer_block(manifest, "fc");
  REQUIRE(fc.find("relu: false") != std::string::npos);
  CHECK_THAT(refused(replace_all(manifest, fc, replace_all(fc, "relu: false", "relu: true"))),
             Contains("relu: a dequantizing layer (float logits) has no fused ReLU: must be false"));
  // The input quantization's scale (its inverse multiplies the images), here
  // consistently on both sides of the first grid.
  const quant::ActQuant first = ex.model.layers.front().out;
  char scale[32];
  std::snprintf(scale, sizeof scale, "scale: %.9g,", first.scale);
  CHECK_THAT(refused(replace_all(manifest, scale, "scale: 1e-40,")),
             Contains("layers[0].output.scale: layer 'features.0.input_fake_quant': scale 9.9999461e-41 must be a "
                      "normal float whose inverse is normal too"));
}

// quantize_input reads the float images: a second one inside the network is
// refused when the manifest is read, and by the model when built in code.
TEST_CASE("a quantize_input layer after the first is refused naming the manifest and the layer", "[e2e][export]") {
  const fs::path dir = fresh_dir("second_input");
  const std::string cfg = testing::trained_sample_qat_run(dir, "quant: {enabled: true}\n");
  const fs::path good = dir / "export", d = dir / "crafted";
  REQUIRE(run_export({cfg, (dir / "run" / "best.safetensors").string(), good.string(), {}}) == 0);
  const std::string manifest = read_text(good / "manifest.yaml");
  const std::string input = layer_block(manifest, "features.0.input_fake_quant");
  fs::copy(good, d);
  // Twice at the start: each layer reads the grid the one before writes, so
  // only its kind tells it apart.
  write_text(d / "manifest.yaml",
             replace_once(manifest, "  - name: features.0\n",
                          replace_once(input, "input_fake_quant\n", "input_fake_quant_again\n") + "  - name: features.0\n"));
  REQUIRE_THROWS_WITH(load_export(d.string()),
                      Contains((d / "manifest.yaml").string() + ", line ") &&
                          Contains("layers[1].kind: layer 1 'features.0.input_fake_quant_again' is quantize_input, which "
                                   "reads the float images: only the first layer may be"));
  ExportedModel ex = load_export(good.string());
  ex.model.layers.insert(ex.model.layers.begin() + 1, ex.model.layers.front());
  Generator g(1);
  REQUIRE_THROWS_WITH(ex.model.forward(Tensor::randn({1, 3, 32, 32}, g)),
                      Contains("integer model: layer 1 'features.0.input_fake_quant' is quantize_input"));
}

// qat eval on an export runs the config's preprocessing: it must be the one
// the manifest records. The manifest holds the float32 values the export
// rounded the config's to (9 digits, read back exactly), so the config's
// own values pass and any other float32 is refused, each key named.
TEST_CASE("an export is evaluated only with the preprocessing its manifest records", "[e2e][export]") {
  const fs::path dir = fresh_dir("preprocessing");
  const std::string cfg = testing::trained_sample_qat_run(dir, "quant: {enabled: true}\n");
  const fs::path out = dir / "export";
  REQUIRE(run_export({cfg, (dir / "run" / "best.safetensors").string(), out.string(), {}}) == 0);
  const ExportedModel ex = load_export(out.string());
  REQUIRE_NOTHROW(check_same_preprocessing(ex, out.string(), transform_spec(load_config(cfg).data), cfg));
  REQUIRE_NOTHROW(check_same_preprocessing(ex, out.string(), eval_transform(ex), cfg));
  // 0.2250000001 rounds to the same float32 as 0.225: the same normalization.
  REQUIRE_NOTHROW(check_same_preprocessing(
      ex, out.string(), transform_spec(load_config(cfg, {"data.std=[0.229,0.224,0.2250000001]"}).data), cfg));
  const data::TransformSpec other = transform_spec(
      load_config(cfg, {"data.mean=[0,0.456,0]", "data.resize=40", "data.std=[0.229,0.224,0.2250001]"}).data);
  REQUIRE_THROWS_WITH(
      check_same_preprocessing(ex, out.string(), other, cfg),
      Contains("eval: config " + cfg + " preprocesses images otherwise than export " + out.string() +
               " was made for (" + (out / "manifest.yaml").string() + "): data.resize 40 (manifest input.resize 36), data.mean[0] 0 "
               "(manifest input.mean[0] 0.485000014), data.mean[2] 0 (manifest input.mean[2] 0.405999988), "
               "data.std[2] 0.225000098 (manifest input.std[2] 0.224999994)"));
  data::TransformSpec size = eval_transform(ex);
  size.image_size = 64;
  REQUIRE_THROWS_WITH(check_same_preprocessing(ex, out.string(), size, cfg),
                      Contains("data.image_size 64 (manifest input.image_size 32)"));
}

namespace {
// bench --infer on small_cnn at 32 px: a few passes of `batch` images.
BenchOptions small_infer_bench(int batch) {
  BenchOptions opt;
  opt.model = "small_cnn";
  opt.res = 32;
  opt.batch = batch;
  opt.steps = 2;
  opt.warmup = 1;
  opt.threads = 1;
  opt.infer = true;
  opt.profile = false;
  return opt;
}
}  // namespace

TEST_CASE("qat bench --infer times FP32 and the frozen integer model", "[e2e][export]") {
  const BenchOptions opt = small_infer_bench(2);
  BenchFigures f;
  REQUIRE(run_bench(opt, &f) == 0);
  CHECK(f.fp32 > 0);
  CHECK(f.quantized > 0);
  CHECK(f.weight_bits == 8);
  CHECK(f.gemm_kernel == quant::gemm_kernel_name(quant::best_gemm_kernel()));
}

TEST_CASE("qat bench with a QAT config times the FP32 and the QAT step in turn", "[e2e][export]") {
  BenchOptions opt = small_infer_bench(4);
  opt.infer = false;
  opt.profile = true;
  opt.config = (std::filesystem::path(QAT_SOURCE_DIR) / "configs" / "alexnet_w8a8_imagenette.yaml").string();
  for (const char* optimizer : {"sgd", "adamw"})
    for (bool lookahead : {true, false}) {
      INFO(optimizer << ", lookahead " << lookahead);
      opt.optimizer = optimizer;
      opt.weight_lookahead = lookahead;
      const int64_t taken = quant::weight_lookahead_taken();
      BenchFigures f;
      REQUIRE(run_bench(opt, &f) == 0);
      CHECK(f.fp32 > 0);
      CHECK(f.quantized > 0);
      // small_cnn's one linear layer, from the second step on (warm-up 1, steps 2)
      CHECK(quant::weight_lookahead_taken() - taken == (lookahead ? 2 : 0));
    }
  CHECK(quant::weight_lookahead_enabled());  // the bench leaves the switch as it found it
}

TEST_CASE("qat bench --infer --device cuda times both models on the GPU, or refuses naming why", "[e2e][export][cuda]") {
  BenchOptions opt = small_infer_bench(3);
  opt.device = "cuda";
  BenchOptions with_kernel = opt;
  with_kernel.int8_kernel = "reference";
  REQUIRE_THROWS_WITH(run_bench(with_kernel), Contains("--int8-kernel chooses a CPU kernel"));
  if (!testing::cuda_device_or_skip()) {
    REQUIRE_THROWS_WITH(run_bench(opt), Contains("bench --infer --device cuda: ") &&
                                            Contains(cuda::built() ? "no usable CUDA device" : "without CUDA"));
    return;
  }
  BenchFigures f;
  REQUIRE(run_bench(opt, &f) == 0);  // it also requires the GPU's logits to equal the CPU's
  CHECK(f.fp32 > 0);
  CHECK(f.quantized > 0);
  CHECK(f.gemm_kernel == "cuda dp4a");
}

// A config whose model.stem is not --stem's (the MobileNetV2 CIFAR configs:
// small) timed the FP32 network against a quantized one 16 times larger at
// 128 px: the quantized model takes --model, --classes and --stem, and a
// checkpoint must come from that network.
TEST_CASE("qat bench builds the quantized model as the FP32 one: --model, --classes and --stem over the config's",
          "[e2e][export]") {
  BenchOptions opt;
  opt.model = "mobilenet_v2";
  opt.classes = 7;
  opt.config = (std::filesystem::path(QAT_SOURCE_DIR) / "configs" / "mobilenet_v2_w8a8_cifar10.yaml").string();
  REQUIRE(load_config(opt.config, {}, DataPaths::as_recorded).model.stem == ResNetStem::small);
  const ExperimentConfig imagenet = bench_config(opt);
  CHECK(imagenet.model.name == "mobilenet_v2");
  CHECK(imagenet.model.num_classes == 7);
  CHECK(imagenet.model.stem == ResNetStem::imagenet);
  opt.stem = "small";
  CHECK(bench_config(opt).model.stem == ResNetStem::small);
  opt.stem = "imagenet";
  opt.classes = 10;
  opt.infer = true;
  opt.checkpoint = "w8a8.safetensors";
  REQUIRE_THROWS_WITH(bench_config(opt), Contains("bench: --checkpoint w8a8.safetensors goes with its config's "
                                                  "model, mobilenet_v2 with 10 classes, stem small") &&
                                             Contains("give --model mobilenet_v2 --classes 10 --stem small"));
}
