#pragma once
// Shared test helpers: central finite-difference gradient checks and tensor
// comparisons.
#include <catch2/catch.hpp>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/collective.h"
#include "core/ops.h"
#include "core/safetensors.h"
#include "core/threads.h"
#include "layers/module.h"
#include "quant/backend.h"
#include "quant/integer/int8_gemm.h"
#include "quant/integer/integer_model.h"

namespace qat::testing {

// A job of two processes whose collectives are all the identity, as if the
// other process added nothing (collective() ignores a job of one): what is
// synchronised is then computed as alone, on the synchronised paths.
struct IdentityCollective final : Collective {
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void sum(double*, int64_t) override {}
  void sum(float*, int64_t) override {}
  void min(float*, int64_t) override {}
  void max(float*, int64_t) override {}
};

// The committed sample data (data/samples/imagenette-mini).
std::string sample_data_dir();
// An empty folder under the system temp dir, unique per process and name.
std::filesystem::path fresh_temp_dir(const std::string& prefix, const std::string& name);
// Writes dir/name: a small, fast experiment on the sample data (small_cnn,
// 10 classes, 32 px, batch 16, seed 3, 1 thread, `epochs` epochs of at most
// `max_steps` steps, 0: whole), `train_extra` lines added to train: (e.g.
// "  lr: 1e-9\n"), `quant` a quant: section or "", output.dir dir/run_dir.
// Returns its path.
std::string write_sample_config(const std::filesystem::path& dir, const std::string& name, const std::string& quant,
                                int64_t epochs, int64_t max_steps, const std::string& run_dir = "run",
                                const std::string& train_extra = "");
// A QAT run of a few seconds on the sample: small_cnn at 32 px (or
// image_size), 2 epochs of
// 4 steps, `quant` a quant: section; writes dir/cfg.yaml, runs it into
// dir/run (best.safetensors there). Returns the config's path.
std::string trained_sample_qat_run(const std::filesystem::path& dir, const std::string& quant, int image_size = 32);
// Every integer GEMM kernel this CPU runs, the reference included (a
// warning when only the reference does).
std::vector<quant::GemmKernel> gemm_kernels_here();
// The model tensors ("model.*") of a checkpoint.
TensorMap checkpoint_model_tensors(const std::string& path);
// Same dtype, shape and bytes.
bool same_bits(const Tensor& a, const Tensor& b);
// `steps` plain SGD steps (p -= lr grad) of m in train mode on one batch,
// cross-entropy against labels y; the losses.
std::vector<float> sgd_steps(Module& m, const Tensor& x, const Tensor& y, int steps, float lr);
// Asserts two f32 tensors of one shape equal bit for bit (NaN payloads and
// the sign of zero included); on failure says how many elements differ and
// the first one.
void check_same_bits(const Tensor& actual, const Tensor& expected, const std::string& what);

// A fresh temporary folder (unique per process and object), removed with the object.
struct TempDir {
  explicit TempDir(const std::string& prefix = "qat_test_");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (dir / name).string(); }
  std::filesystem::path dir;
};

// A shipped backend, configs/backends/<name>.yaml: the quantization tests run
// on what ships.
quant::Backend test_backend(const std::string& name);

// A chain with depthwise blocks (MobileNetV1's): conv-BN-ReLU 3 -> 8, then
// depthwise 3x3 (stride 2) and pointwise 1x1 blocks, a depthwise 3x3 with
// dilation 2, global average pooling, flatten, linear to 10 classes; relu6:
// ReLU6 in every block instead of ReLU.
ModulePtr depthwise_chain(uint64_t seed, bool relu6 = false);
// depthwise_chain(3) prepared (default backend), observed, frozen, with a
// residual add (Note [integer model graph]): its pointwise conv's output
// plus the dilated depthwise conv's after it (16 x 8 x 8 each), ReLU, onto a
// grid of its own, read by the pooling.
quant::IntegerModel residual_model();
// A graph with a concat (Note [integer concat]), prepared (default backend),
// observed on 4 batches of 16 px noise and in eval mode: a stem conv-ReLU
// 3 -> 4, then conv-ReLU 4 -> 4 (3x3), conv-BN-ReLU6 4 -> 6 (1x1) and a
// 3x3 max pool (stride 1) of the first, joined into 14 channels "cat", then conv-ReLU
// 14 -> 8, global average pooling, flatten, linear to 10 classes.
// concat_pattern false: the backend without its concat pattern.
ModulePtr concat_model(bool concat_pattern = true);

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

struct GradCheckOptions {
  double eps = 1e-2;   // finite-difference step
  double atol = 2e-3;  // |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-2;
  uint64_t seed = 7;
};

// Checks d/d(inputs) of L = sum(f(inputs) * R), R a fixed random tensor, for
// every input that requires grad: the analytic gradient from backward()
// against central differences (L evaluated in double). Fails the current
// Catch2 test with the input index, element and both values.
void gradcheck(const Fn& f, std::vector<Tensor> inputs, const GradCheckOptions& opt = {});

// Random float tensor (normal), requires_grad set as asked.
Tensor rand_tensor(const Shape& shape, uint64_t seed, bool requires_grad = true);
// Values that are a shuffled arithmetic progression with gap `gap`: no ties
// and no two within finite-difference reach (for max-pool, ReLU kinks).
Tensor distinct_tensor(const Shape& shape, uint64_t seed, float gap = 0.1f, bool requires_grad = true);

// Largest |a-b| with a message naming `what`; REQUIREs shapes equal and every
// element within atol + rtol*|b|.
void require_close(const Tensor& a, const Tensor& b, double atol, double rtol, const std::string& what);

// Sets the thread count for one test and restores it.
struct ThreadsGuard {
  explicit ThreadsGuard(int n) : prev(num_threads()) { set_num_threads(n); }
  ~ThreadsGuard() { set_num_threads(prev); }
  ThreadsGuard(const ThreadsGuard&) = delete;
  ThreadsGuard& operator=(const ThreadsGuard&) = delete;
  int prev;
};

// A committed golden file tests/golden/<file>, loaded once per process.
const SafetensorsFile& golden_file(const std::string& file);
// A tensor of it; FAILs the test naming the tensor when it is missing.
const Tensor& golden_tensor(const SafetensorsFile& f, const std::string& name);
// The values of an int32 tensor.
std::vector<int32_t> int_values(const Tensor& t);
// Golden case names: keys starting with `prefix` and ending in `suffix`
// (e.g. ".spec"), less the suffix, in key order.
std::vector<std::string> golden_case_names(const SafetensorsFile& f, const std::string& prefix,
                                           const std::string& suffix);

// One case's tensors ("<name>.<key>") in a golden file.
struct GoldenCase {
  GoldenCase(const SafetensorsFile& f, std::string case_name) : file(&f), name(std::move(case_name)) {}
  const SafetensorsFile* file;
  std::string name;
  bool has(const std::string& k) const { return file->tensors.count(name + "." + k) != 0; }
  // FAILs the test naming the tensor when it is missing.
  Tensor get(const std::string& k) const { return golden_tensor(*file, name + "." + k); }
  // A fresh leaf that requires grad (a clone, so the loaded tensor stays clean).
  Tensor leaf(const std::string& k) const {
    Tensor t = get(k).clone();
    t.set_requires_grad(true);
    return t;
  }
};

}  // namespace qat::testing
