#include "tests/test_util.h"

#include "tests/graph_checks.h"

#include "apps/backend_config.h"
#include "apps/train.h"
#include "layers/graph.h"
#include "layers/layers.h"
#include "quant/convert/freeze.h"
#include "quant/sim/prepare.h"

#include <atomic>
#include <cstring>
#include <fstream>
#include <cmath>
#include <map>
#include <mutex>
#include <numeric>
#include <sstream>

#include <unistd.h>

namespace qat::testing {

namespace {
double weighted_sum(const Tensor& y, const Tensor& r) {
  Tensor yc = y.contiguous();
  const float* py = yc.data<float>();
  const float* pr = r.data<float>();
  double s = 0;
  for (int64_t i = 0; i < yc.numel(); ++i) s += static_cast<double>(py[i]) * pr[i];
  return s;
}
}  // namespace

Tensor rand_tensor(const Shape& shape, uint64_t seed, bool requires_grad) {
  Generator g(seed);
  Tensor t = Tensor::randn(shape, g);
  if (requires_grad) t.set_requires_grad(true);
  return t;
}

Tensor distinct_tensor(const Shape& shape, uint64_t seed, float gap, bool requires_grad) {
  const int64_t n = shape_numel(shape);
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = (static_cast<float>(i) - n / 2.f) * gap + gap / 2;
  Generator g(seed);
  for (int64_t i = n - 1; i > 0; --i) std::swap(v[i], v[g.below(static_cast<uint64_t>(i + 1))]);
  Tensor t = Tensor::from_vector(v, shape);
  if (requires_grad) t.set_requires_grad(true);
  return t;
}

void gradcheck(const Fn& f, std::vector<Tensor> inputs, const GradCheckOptions& opt) {
  for (auto& t : inputs) t.zero_grad();
  Tensor y = f(inputs);
  Generator g(opt.seed);
  Tensor r = Tensor::randn(y.sizes(), g);
  Tensor loss = sum(mul(y, r));
  loss.backward();
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor& x = inputs[k];
    if (!x.requires_grad()) continue;
    Tensor analytic = x.grad();
    REQUIRE(analytic.defined());
    REQUIRE(analytic.sizes() == x.sizes());
    Tensor ac = analytic.contiguous();
    float* px = x.data<float>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const float orig = px[i];
      double lp, lm;
      {
        NoGradGuard ng;
        px[i] = orig + static_cast<float>(opt.eps);
        lp = weighted_sum(f(inputs), r);
        px[i] = orig - static_cast<float>(opt.eps);
        lm = weighted_sum(f(inputs), r);
        px[i] = orig;
      }
      // the perturbed value actually stored may differ from orig +- eps in float
      const double numeric = (lp - lm) / (2 * opt.eps);
      const double a = ac.data<float>()[i];
      if (std::abs(a - numeric) > opt.atol + opt.rtol * std::abs(numeric)) {
        std::ostringstream os;
        os << "gradcheck: input " << k << " " << shape_str(x.sizes()) << " element " << i << ": analytic " << a
           << ", numeric " << numeric;
        FAIL(os.str());
      }
    }
  }
}

void require_close(const Tensor& a, const Tensor& b, double atol, double rtol, const std::string& what) {
  INFO(what << ": shapes " << shape_str(a.sizes()) << " vs " << shape_str(b.sizes()));
  REQUIRE(a.sizes() == b.sizes());
  Tensor ac = a.contiguous(), bc = b.contiguous();
  const float* pa = ac.data<float>();
  const float* pb = bc.data<float>();
  double worst = 0;
  int64_t worst_i = -1;
  for (int64_t i = 0; i < ac.numel(); ++i) {
    const double d = std::abs(static_cast<double>(pa[i]) - pb[i]);
    const double excess = d - (atol + rtol * std::abs(pb[i]));
    if (excess > worst || (std::isnan(d) && worst_i < 0)) {
      worst = std::isnan(d) ? 1e30 : excess;
      worst_i = i;
    }
  }
  if (worst_i >= 0) {
    std::ostringstream os;
    os << what << ": element " << worst_i << " differs: " << pa[worst_i] << " vs " << pb[worst_i];
    FAIL(os.str());
  }
}

const SafetensorsFile& golden_file(const std::string& file) {
  static std::mutex mu;
  static std::map<std::string, SafetensorsFile> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(file);
  if (it == cache.end())
    it = cache.emplace(file, load_safetensors(std::string(QAT_SOURCE_DIR) + "/tests/golden/" + file)).first;
  return it->second;
}

const Tensor& golden_tensor(const SafetensorsFile& f, const std::string& name) {
  auto it = f.tensors.find(name);
  if (it == f.tensors.end()) FAIL("golden file has no tensor " << name);
  return it->second;
}

std::vector<int32_t> int_values(const Tensor& t) {
  REQUIRE(t.dtype() == DType::i32);
  Tensor c = t.contiguous();
  return std::vector<int32_t>(c.data<int32_t>(), c.data<int32_t>() + c.numel());
}

std::vector<std::string> golden_case_names(const SafetensorsFile& f, const std::string& prefix,
                                           const std::string& suffix) {
  std::vector<std::string> out;
  for (const auto& [k, t] : f.tensors)
    if (k.rfind(prefix, 0) == 0 && k.size() > suffix.size() &&
        k.compare(k.size() - suffix.size(), suffix.size(), suffix) == 0)
      out.push_back(k.substr(0, k.size() - suffix.size()));
  return out;
}

std::string sample_data_dir() { return std::string(QAT_SOURCE_DIR) + "/data/samples/imagenette-mini"; }

std::filesystem::path fresh_temp_dir(const std::string& prefix, const std::string& name) {
  std::filesystem::path d = std::filesystem::temp_directory_path() / (prefix + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

std::vector<quant::GemmKernel> gemm_kernels_here() {
  using quant::GemmKernel;
  const std::vector<GemmKernel> kernels = quant::gemm_kernels_here();
  if (!quant::gemm_kernel_runs_here(GemmKernel::amx))
    WARN("no AMX on this CPU (or not granted by its kernel): the AMX kernel runs on emulated tiles only");
  if (!quant::gemm_kernel_runs_here(GemmKernel::avx2)) WARN("no AVX2 on this CPU");
  return kernels;
}

std::string trained_sample_qat_run(const std::filesystem::path& dir, const std::string& quant, int image_size) {
  const std::string path = (dir / "cfg.yaml").string();
  std::ofstream(path) << "model: {name: small_cnn, num_classes: 10}\n"
                      << "data:\n  train: " << sample_data_dir() << "/train\n  val: " << sample_data_dir() << "/val\n"
                      << "  image_size: " << image_size << "\n  resize: " << image_size * 9 / 8 << "\n  workers: 1\n"
                      << "train:\n  epochs: 2\n  batch_size: 16\n  lr: 0.05\n  seed: 3\n  threads: 1\n"
                      << "  max_steps_per_epoch: 4\n"
                      << quant << "output: {dir: " << (dir / "run").string() << "}\n";
  REQUIRE(apps::run_train({path, {}, ""}) == 0);
  return path;
}

std::string write_sample_config(const std::filesystem::path& dir, const std::string& name, const std::string& quant,
                                int64_t epochs, int64_t max_steps, const std::string& run_dir,
                                const std::string& train_extra) {
  const std::string path = (dir / name).string();
  std::ofstream f(path);
  f << "model: {name: small_cnn, num_classes: 10}\n"
    << "data:\n  train: " << sample_data_dir() << "/train\n  val: " << sample_data_dir() << "/val\n"
    << "  image_size: 32\n  resize: 36\n  workers: 2\n  cache: true\n"
    << "train:\n  epochs: " << epochs << "\n  batch_size: 16\n  seed: 3\n  threads: 1\n"
    << "  max_steps_per_epoch: " << max_steps << "\n"
    << (train_extra.find("lr:") == std::string::npos ? "  lr: 0.05\n" : "") << train_extra << quant
    << "output: {dir: " << (dir / run_dir).string() << "}\n";
  REQUIRE(f.good());
  return path;
}

TensorMap checkpoint_model_tensors(const std::string& path) {
  TensorMap out;
  for (auto& [k, t] : load_safetensors(path).tensors)
    if (k.rfind("model.", 0) == 0) out[k] = t;
  return out;
}

namespace {
const void* bytes_of(const Tensor& t) {
  switch (t.dtype()) {
    case DType::f32: return t.data<float>();
    case DType::i32: return t.data<int32_t>();
    case DType::u8: return t.data<uint8_t>();
    case DType::i8: return t.data<int8_t>();
  }
  return nullptr;
}
}  // namespace

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(bytes_of(ca), bytes_of(cb), ca.nbytes()) == 0;
}

std::vector<float> sgd_steps(Module& m, const Tensor& x, const Tensor& y, int steps, float lr) {
  std::vector<float> losses;
  m.train();
  for (int s = 0; s < steps; ++s) {
    for (auto& [n, p] : m.named_parameters()) p.zero_grad();
    Tensor loss = cross_entropy(m.forward(x), y);
    loss.backward();
    NoGradGuard ng;
    for (auto& [n, p] : m.named_parameters())
      if (p.grad().defined()) p.add_(p.grad(), -lr);
    losses.push_back(loss.item());
  }
  return losses;
}

void check_same_bits(const Tensor& actual, const Tensor& expected, const std::string& what) {
  INFO(what);
  REQUIRE(actual.sizes() == expected.sizes());
  const std::vector<float> a = actual.to_vector(), e = expected.to_vector();
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &e[i], sizeof(float)) != 0) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++bad;
    }
  std::ostringstream msg;
  msg.precision(9);
  msg << bad << "/" << a.size() << " elements differ in bits";
  if (first >= 0) msg << "; first at " << first << ": " << a[first] << ", expected " << e[first];
  INFO(msg.str());
  CHECK(bad == 0);
}

TempDir::TempDir(const std::string& prefix) {
  static std::atomic<int> counter{0};
  dir = fresh_temp_dir(prefix, std::to_string(counter++));
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

quant::Backend test_backend(const std::string& name) { return apps::load_backend(name, "."); }

ModulePtr depthwise_chain(uint64_t seed, bool relu6) {
  Generator gen(seed);
  auto m = std::make_shared<Sequential>();
  auto block = [&](int64_t in, int64_t out, int64_t k, int64_t stride, int64_t dilation, int64_t groups) {
    m->push_back(std::make_shared<Conv2d>(Conv2dOptions{in, out, k, stride, dilation * (k / 2), dilation, groups, false}, gen));
    m->push_back(std::make_shared<BatchNorm2d>(out));
    if (relu6) m->push_back(std::make_shared<ReLU6>());
    else m->push_back(std::make_shared<ReLU>());
  };
  block(3, 8, 3, 1, 1, 1);
  block(8, 8, 3, 2, 1, 8);
  block(8, 16, 1, 1, 1, 1);
  block(16, 16, 3, 1, 2, 16);
  m->push_back(std::make_shared<AdaptiveAvgPool2d>(1, 1));
  m->push_back(std::make_shared<Flatten>());
  m->push_back(std::make_shared<Linear>(16, 10, gen));
  return m;
}

// The frozen depthwise chain (tests/test_util.h) with a residual add: its
// pointwise conv (16 x 8 x 8) plus the dilated depthwise conv after it (the
// same shape), ReLU, onto a grid of its own; the pooling after it reads the add.
ModulePtr concat_model(bool concat_pattern) {
  Generator gen(5);
  auto g = std::make_shared<Graph>();
  g->add("stem", std::make_shared<Conv2d>(Conv2dOptions{3, 4, 3, 1, 1}, gen), Graph::kInput);
  g->add("stem_relu", std::make_shared<ReLU>(), "stem");
  g->add("a", std::make_shared<Conv2d>(Conv2dOptions{4, 4, 3, 1, 1}, gen), "stem_relu");
  g->add("a_relu", std::make_shared<ReLU>(), "a");
  g->add("b", std::make_shared<Conv2d>(Conv2dOptions{4, 6, 1, 1, 0, 1, 1, false}, gen), "stem_relu");
  g->add("b_bn", std::make_shared<BatchNorm2d>(6), "b");
  g->add("b_relu6", std::make_shared<ReLU6>(), "b_bn");
  g->add("a_pool", std::make_shared<MaxPool2d>(3, 1, 1), "a_relu");
  g->add_op("cat", GraphOp::concat, {"a_relu", "b_relu6", "a_pool"});
  g->add("c", std::make_shared<Conv2d>(Conv2dOptions{14, 8, 3, 1, 1}, gen), "cat");
  g->add("c_relu", std::make_shared<ReLU>(), "c");
  g->add("pool", std::make_shared<AdaptiveAvgPool2d>(1, 1), "c_relu");
  g->add("flat", std::make_shared<Flatten>(), "pool");
  g->add("fc", std::make_shared<Linear>(8, 10, gen), "flat");
  g->set_output("fc");
  quant::Backend backend = test_backend("default");
  if (!concat_pattern) backend.patterns.erase(quant::Pattern::concat);
  quant::prepare(*g, backend, quant::QConfig{});
  g->train();
  Generator data(7);
  {
    NoGradGuard ng;
    for (int i = 0; i < 4; ++i) g->forward(Tensor::randn({8, 3, 16, 16}, data));
  }
  g->eval();
  return g;
}

void require_same_tensors(const TensorMap& a, const TensorMap& b) {
  REQUIRE(a.size() == b.size());
  for (const auto& [name, t] : a) {
    INFO(name);
    REQUIRE(b.count(name));
    CHECK(same_bits(t, b.at(name)));
  }
}

void require_graph_layers_exact(const std::vector<quant::LayerDiff>& diffs) {
  for (const quant::LayerDiff& d : diffs) {
    INFO("layer " << d.name << " (" << d.op << "): " << d.differ << " of " << d.count << " differ, alone "
                  << d.own_differ);
    if (d.logits) {
      REQUIRE(d.top1_agree == d.rows);
      continue;
    }
    REQUIRE(d.max_diff == 0);
    REQUIRE(d.own_max_diff == 0);
  }
}

quant::IntegerModel residual_model() {
  ModulePtr m = depthwise_chain(3);
  quant::prepare(*m, test_backend("default"), quant::QConfig{});
  m->train();
  Generator g(7);
  {
    NoGradGuard ng;
    for (int i = 0; i < 4; ++i) m->forward(Tensor::randn({8, 3, 16, 16}, g));
  }
  m->eval();
  quant::IntegerModel chain = quant::freeze(*m);
  // quantize_input, conv x4, pool, flatten, linear
  REQUIRE(chain.layers.size() == 8);
  quant::IntegerModel im;
  for (int i = 0; i < 5; ++i) im.layers.push_back(chain.layers[i]);
  quant::IntLayer add;
  add.op = quant::IntOp::add;
  add.name = "block.add";
  add.inputs = {3, 4};
  add.in = chain.layers[3].out, add.in2 = chain.layers[4].out;
  add.out.scale = 1.5f * std::max(add.in.scale, add.in2.scale);
  add.out.zero_point = 0;
  add.relu = true;
  add.finalize();
  im.layers.push_back(add);
  for (int i = 5; i < 8; ++i) {
    quant::IntLayer l = chain.layers[i];
    l.in = add.out;
    if (l.op != quant::IntOp::linear) l.out = add.out;  // (pool and flatten keep their input's grid)
    l.finalize();
    im.layers.push_back(l);
  }
  return im;
}


}  // namespace qat::testing
