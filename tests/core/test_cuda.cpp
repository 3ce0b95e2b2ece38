// The CUDA runtime layer and device tensors (core/cuda_runtime.h,
// core/tensor.h): what is reported without a GPU and why, the refusals of
// device tensors by CPU code and of mixed devices (checked on every machine,
// docs/cuda.md), and, where a GPU exists, copies, the caching allocator and
// ReLU's CUDA twin against the CPU op bit for bit.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/cuda_runtime.h"
#include "core/generator.h"
#include "core/ops.h"
#include "core/ops/common.h"
#include "core/safetensors.h"
#include "tests/cuda_test_util.h"
#include "tests/test_util.h"

#if QAT_WITH_CUDA
#include "core/cuda_check.h"
#endif

namespace {

using Catch::Matchers::Contains;
using Catch::Matchers::Equals;
using qat::Device;
using qat::DType;
using qat::Tensor;
using qat::testing::cuda_device_or_skip;
using qat::testing::CudaOrLabelled;
namespace cuda = qat::cuda;

// What every no-GPU error says after "<what>: ".
std::string no_gpu_words() {
  return cuda::built() ? "no usable CUDA device: cudaGetDeviceCount" : "this qat was built without CUDA";
}

// Byte equality of two tensors of one dtype and shape (NaN payloads and the sign of zero included).
void require_same_bits(const Tensor& a, const Tensor& b, const std::string& what) {
  INFO(what);
  REQUIRE(a.device() == Device::cpu);
  REQUIRE(b.device() == Device::cpu);
  REQUIRE(a.dtype() == b.dtype());
  REQUIRE(a.sizes() == b.sizes());
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  const auto* pa = static_cast<const unsigned char*>(ca.impl_ptr()->storage->data) + ca.offset() * qat::dtype_size(ca.dtype());
  const auto* pb = static_cast<const unsigned char*>(cb.impl_ptr()->storage->data) + cb.offset() * qat::dtype_size(cb.dtype());
  int64_t first = -1, bad = 0;
  const size_t es = qat::dtype_size(a.dtype());
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (std::memcmp(pa + i * es, pb + i * es, es) != 0) {
      if (first < 0) first = i;
      ++bad;
    }
  }
  INFO(bad << "/" << a.numel() << " elements differ, first at " << first);
  CHECK(bad == 0);
}

// Random normals with the values where rules differ mixed in: NaN, +-0,
// +-inf, subnormals, +-1.
Tensor awkward_floats(int64_t n, uint64_t seed) {
  qat::Generator gen(seed);
  Tensor t = Tensor::randn({n}, gen, 0.f, 3.f);
  const float special[] = {std::numeric_limits<float>::quiet_NaN(), -0.f, 0.f,
                           std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                           1e-40f, -1e-40f, 1.f, -1.f};
  float* p = t.data<float>();
  for (int64_t i = 0; i < n; i += 97) p[i] = special[(i / 97) % 9];
  return t;
}

}  // namespace

TEST_CASE("cuda: the build and the device are reported, with the reason when there is no device", "[cuda]") {
#if QAT_WITH_CUDA
  CHECK(cuda::built());
#else
  CHECK_FALSE(cuda::built());
#endif
  const cuda::DeviceInfo& d = cuda::device_info();
  if (qat::testing::gpu_required() && !d.usable)
    FAIL("QAT_REQUIRE_GPU=1 but there is " << qat::testing::no_gpu_reason());
  if (!cuda::built()) {
    CHECK_FALSE(d.usable);
    CHECK(d.reason == "this qat was built without CUDA");
    CHECK_THAT(cuda::unavailable_message("train.device: cuda"),
               Equals("train.device: cuda: this qat was built without CUDA (configure with -DQAT_CUDA=ON, or AUTO "
                      "where the CUDA toolkit is installed)"));
  } else if (!d.usable) {
    CHECK(d.count == 0);
    CHECK_THAT(d.reason, Contains("cudaGetDeviceCount"));
    CHECK(cuda::unavailable_message("train.device: cuda") == "train.device: cuda: no usable CUDA device: " + d.reason);
    CHECK_THAT(cuda::describe(), Contains(d.reason));
  } else {
    CHECK(d.count >= 1);
    CHECK_FALSE(d.name.empty());
    CHECK(d.major >= 7);
    CHECK(d.total_memory > 0);
    CHECK(d.reason.empty());
    CHECK(cuda::unavailable_message("anything").empty());
    CHECK_NOTHROW(cuda::require("anything"));
    WARN("GPU: " << cuda::describe());
    return;
  }
  CHECK_THROWS_WITH(cuda::require("some op"), Contains("some op: ") && Contains(no_gpu_words()));
}

TEST_CASE("cuda: without a usable GPU every way to a device tensor throws naming why", "[cuda]") {
  if (cuda::available()) {
    WARN("skipped: a GPU is present, so the no-GPU errors cannot occur here");
    return;
  }
  const std::string why = no_gpu_words();
  CHECK_THROWS_WITH(Tensor::empty({2, 3}, DType::f32, Device::cuda),
                    Contains("a cuda tensor (shape [2, 3], float32): ") && Contains(why));
  CHECK_THROWS_WITH(Tensor::zeros({0}, DType::i8, Device::cuda), Contains(why));  // even without bytes
  CHECK_THROWS_WITH(Tensor::ones({4}).to(Device::cuda), Contains(why));
  CHECK_THROWS_WITH(qat::Storage(16, Device::cuda), Contains("Storage on cuda: ") && Contains(why));
  CHECK_THROWS_WITH(cuda::allocate(16), Contains("cuda allocator: ") && Contains(why));
  CHECK(cuda::allocate(0) == nullptr);
  float host[2] = {1, 2}, back[2] = {0, 0};
  CHECK_THROWS_WITH(cuda::copy(back, Device::cuda, host, Device::cpu, sizeof host), Contains(why));
  cuda::copy(back, Device::cpu, host, Device::cpu, sizeof host);  // host to host needs no GPU
  CHECK((back[0] == 1.f && back[1] == 2.f));
  CHECK_THROWS_WITH(cuda::synchronize(), Contains(why));
  CHECK(cuda::allocator_stats().device_mallocs == 0);
}

TEST_CASE("cuda: QAT_CUDA_CHECK throws naming file:line, the call and the CUDA error", "[cuda]") {
#if QAT_WITH_CUDA
  // No machine has a device with this number: fails with or without a GPU.
  const cudaError_t e = cudaSetDevice(1 << 20);
  REQUIRE(e != cudaSuccess);
  (void)cudaGetLastError();
  std::string msg;
  const int line = __LINE__ + 2;
  try {
    QAT_CUDA_CHECK(cudaSetDevice(1 << 20));
  } catch (const qat::Error& err) {
    msg = err.what();
  }
  CHECK_THAT(msg, Contains("test_cuda.cpp:" + std::to_string(line) + ": cudaSetDevice(1 << 20): "));
  CHECK_THAT(msg, Contains(cudaGetErrorName(e)) && Contains(cudaGetErrorString(e)));
  // Cleared, so the next check does not report it again (without a driver
  // the runtime's failed start is reported by every call: nothing to clear).
  if (cuda::available()) CHECK(cudaGetLastError() == cudaSuccess);
#else
  WARN("skipped: this qat was built without CUDA (QAT_CUDA_CHECK exists in CUDA builds only)");
#endif
}

TEST_CASE("cuda: CPU code refuses the data of a cuda tensor, naming its device", "[cuda]") {
  CudaOrLabelled d(Tensor::ones({2, 3}));
  REQUIRE(d.t.device() == Device::cuda);
  CHECK_THROWS_WITH(d.t.data<float>(),
                    Contains("Tensor::data<float32>: the tensor (shape [2, 3]) is on cuda, and CPU code cannot read "
                             "device memory"));
  // In-place fill_/mul_/add_ run on the device (core/tensor.cu): without a GPU they refuse naming why.
  if (!cuda::available()) {
    CHECK_THROWS_WITH(d.t.fill_(1.f), cuda::built() ? Contains("fill_: no usable CUDA device")
                                                    : Contains("fill_: the tensor (shape [2, 3]) is on cuda; fill_ runs "
                                                               "on the CPU only"));
    CHECK_THROWS_WITH(d.t.mul_(2.f), Contains("mul_: ") && Contains(cuda::built() ? no_gpu_words() : "is on cuda"));
  }
  CHECK_THROWS_WITH(d.t.to(DType::i8), Contains("to(int8): ") && Contains("on cuda runs on the CPU only"));
  CHECK_THROWS_WITH(Tensor::ones({3}).device_data<float>(), Contains("is on cpu, not on cuda"));
  qat::testing::TempDir dir;
  CHECK_THROWS_WITH(qat::save_safetensors(dir.file("x.safetensors"), {{"w", d.t}}),
                    Contains("tensor 'w' is on cuda"));
}

TEST_CASE("cuda: ops without a CUDA kernel refuse a cuda tensor, naming the op and the devices", "[cuda]") {
  CudaOrLabelled d(Tensor::ones({2, 3}));
  const Tensor cpu = Tensor::ones({2, 3});
  // topk_correct (the accuracy count, read on the host) has no twin.
  CHECK_THROWS_WITH(qat::topk_correct(d.t, Tensor::from_vector_i32({0, 1}, {2}), 1),
                    Contains("topk: scores (shape [2, 3]) is on cuda, but topk runs on the CPU only"));
  // An op with a twin refuses mixed devices, naming both.
  CHECK_THROWS_WITH(qat::add(cpu, d.t), Contains("add: expected all tensors on one device"));
  // The helper every op with a CUDA twin calls, on its own.
  CHECK_THROWS_WITH(qat::detail::check_same_device("my_op", {{"x", &cpu}, {"w", &d.t}}),
                    Equals("my_op: expected all tensors on one device, but x is on cpu and w is on cuda"));
  CHECK_NOTHROW(qat::detail::check_same_device("my_op", {{"x", &cpu}, {"none", nullptr}, {"y", &cpu}}));
}

TEST_CASE("cuda: relu of a cuda tensor needs the GPU, or without CUDA is refused", "[cuda]") {
  CudaOrLabelled d(Tensor::ones({5}));
  if (cuda::available()) {
    CHECK(qat::relu(d.t).device() == Device::cuda);
    return;
  }
  // CUDA built: the twin's output allocation refuses; not built: the CPU loop's data().
  CHECK_THROWS_WITH(qat::relu(d.t), Contains(cuda::built() ? no_gpu_words() : "is on cuda"));
}

// ---------------------------------------------------------------- with a GPU

TEST_CASE("cuda: to(cuda).to(cpu) returns every dtype and view bit for bit", "[cuda]") {
  if (!cuda_device_or_skip()) return;
  qat::Generator gen(11);
  const Tensor f = awkward_floats(10007, 5).view({10007});
  Tensor i32 = Tensor::from_vector_i32({INT32_MIN, -1, 0, 1, INT32_MAX, 12345}, {2, 3});
  const Tensor i8 = Tensor::uniform({300}, gen, -200.f, 200.f).to(DType::i8);
  const Tensor u8 = Tensor::uniform({300}, gen, -10.f, 300.f).to(DType::u8);
  for (const Tensor& t : {f, i32, i8, u8}) {
    const Tensor dev = t.to(Device::cuda);
    CHECK(dev.device() == Device::cuda);
    CHECK(dev.to(Device::cuda).same_storage(dev));  // already there: itself
    require_same_bits(dev.to(Device::cpu), t, std::string("round trip ") + qat::dtype_name(t.dtype()));
  }
  // Strided views: to the device from a CPU view, to the host from a device view.
  const Tensor m = awkward_floats(7 * 13, 9).view({7, 13});
  const Tensor cols = m.narrow(1, 2, 5);  // not contiguous
  require_same_bits(cols.to(Device::cuda).to(Device::cpu), cols.contiguous(), "CPU view to the device");
  require_same_bits(m.to(Device::cuda).narrow(1, 2, 5).to(Device::cpu), cols.contiguous(), "device view to the host");
  require_same_bits(m.to(Device::cuda).narrow(0, 3, 0).to(Device::cpu), m.narrow(0, 3, 0).contiguous(), "empty view");
  require_same_bits(m.to(Device::cuda).narrow(1, 2, 5).clone().to(Device::cpu), cols.contiguous(),
                    "clone of a device view (core/tensor.cu)");
}

TEST_CASE("cuda: zeros, clone, copy_ and item on the device", "[cuda]") {
  if (!cuda_device_or_skip()) return;
  const Tensor z = Tensor::zeros({3, 1000}, DType::f32, Device::cuda);
  require_same_bits(z.to(Device::cpu), Tensor::zeros({3, 1000}), "zeros");
  const Tensor x = awkward_floats(3000, 1).view({3, 1000});
  const Tensor dx = x.to(Device::cuda);
  const Tensor c = dx.clone();
  CHECK_FALSE(c.same_storage(dx));
  require_same_bits(c.to(Device::cpu), x, "clone");
  Tensor dst = Tensor::zeros({3, 1000}, DType::f32, Device::cuda);
  const uint64_t v = dst.version();
  dst.copy_(x);  // host -> device
  CHECK(dst.version() == v + 1);
  require_same_bits(dst.to(Device::cpu), x, "copy_ from the host");
  Tensor host = Tensor::zeros({2, 1000});
  host.copy_(dx.narrow(0, 1, 2));  // device -> host
  require_same_bits(host, x.narrow(0, 1, 2).contiguous(), "copy_ to the host");
  Tensor dst2 = Tensor::zeros({3, 1000}, DType::f32, Device::cuda);
  dst2.copy_(dx);  // device -> device
  require_same_bits(dst2.to(Device::cpu), x, "copy_ on the device");
  CHECK(Tensor::scalar(2.5f).to(Device::cuda).item() == 2.5f);
  CHECK(dx.to_vector().size() == 3000);
  CHECK_THROWS_WITH(dx.data<float>(), Contains("is on cuda"));
}

TEST_CASE("cuda: the device allocator reuses a freed block of the same size", "[cuda]") {
  if (!cuda_device_or_skip()) return;
  cuda::release_cached_memory();
  const cuda::DeviceAllocatorStats s0 = cuda::allocator_stats();
  CHECK(s0.cached_bytes == 0);
  const int64_t n = (int64_t{3} << 20) + 5;  // floats; rounded up to 512 bytes
  const size_t rounded = (static_cast<size_t>(n) * 4 + 511) / 512 * 512;
  void* first = nullptr;
  {
    const Tensor a = Tensor::empty({n}, DType::f32, Device::cuda);
    first = a.device_data<float>();
    const cuda::DeviceAllocatorStats s1 = cuda::allocator_stats();
    CHECK(s1.device_mallocs == s0.device_mallocs + 1);
    CHECK(s1.live_bytes == s0.live_bytes + rounded);
    CHECK(s1.peak_live_bytes >= s1.live_bytes);
  }
  const cuda::DeviceAllocatorStats s2 = cuda::allocator_stats();
  CHECK(s2.cached_bytes == rounded);
  CHECK(s2.live_bytes == s0.live_bytes);
  {
    const Tensor b = Tensor::empty({n}, DType::f32, Device::cuda);  // same size: the cached block
    CHECK(b.device_data<float>() == first);
    CHECK(cuda::allocator_stats().device_mallocs == s2.device_mallocs);
    CHECK(cuda::allocator_stats().cached_bytes == 0);
    const Tensor c = Tensor::empty({n + 1024}, DType::f32, Device::cuda);  // another size: a new block
    CHECK(c.device_data<float>() != first);
    CHECK(cuda::allocator_stats().device_mallocs == s2.device_mallocs + 1);
  }
  CHECK(cuda::allocator_stats().cached_bytes > rounded);
  cuda::release_cached_memory();
  CHECK(cuda::allocator_stats().cached_bytes == 0);
  CHECK(cuda::allocator_stats().live_bytes == s0.live_bytes);
}

// A request the device cannot hold throws DeviceOutOfMemory (what conv2d's
// algorithm search catches to try one needing less workspace), leaves the
// allocator's counts as they were, and the device usable.
TEST_CASE("cuda: an allocation beyond the device's memory throws DeviceOutOfMemory naming the size", "[cuda]") {
  if (!cuda_device_or_skip()) return;
  const cuda::DeviceAllocatorStats s0 = cuda::allocator_stats();
  const size_t too_big = size_t{1} << 50;  // 1 PiB
  std::string msg;
  try {
    (void)cuda::allocate(too_big);
  } catch (const cuda::DeviceOutOfMemory& e) {
    msg = e.what();
  }
  CHECK_THAT(msg, Contains("cudaMalloc(1125899906842624 bytes)"));
  CHECK_THAT(msg, Contains("cudaErrorMemoryAllocation"));
  CHECK(cuda::allocator_stats().live_bytes == s0.live_bytes);
  const Tensor a = Tensor::zeros({1}, DType::f32, Device::cuda);
  CHECK(a.item() == 0.f);
}

TEST_CASE("cuda: relu forward and backward on the device equal the CPU op bit for bit", "[cuda]") {
  if (!cuda_device_or_skip()) return;
  for (const int64_t n : {int64_t{1}, int64_t{1000}, int64_t{1} << 21}) {  // one block, several, grid-stride
    INFO("n = " << n);
    const Tensor x = awkward_floats(n, 3 + n);
    const Tensor g = awkward_floats(n, 4 + n);
    Tensor xc = x.clone().set_requires_grad(true);
    Tensor yc = qat::relu(xc);
    yc.backward(g);
    Tensor xd = x.to(Device::cuda).set_requires_grad(true);
    Tensor yd = qat::relu(xd);
    REQUIRE(yd.device() == Device::cuda);
    yd.backward(g.to(Device::cuda));
    REQUIRE(xd.grad().defined());
    CHECK(xd.grad().device() == Device::cuda);
    require_same_bits(yd.to(Device::cpu), yc.detach(), "relu forward");
    require_same_bits(xd.grad().to(Device::cpu), xc.grad(), "relu backward");
  }
  const Tensor empty = Tensor::empty({0, 4}, DType::f32, Device::cuda);
  CHECK(qat::relu(empty).sizes() == empty.sizes());
  // A CPU gradient for a device graph is refused by name.
  Tensor xd = Tensor::ones({4}).to(Device::cuda).set_requires_grad(true);
  CHECK_THROWS_WITH(qat::relu(xd).backward(Tensor::ones({4})),
                    Contains("relu backward: expected all tensors on one device, but output is on cuda and gradient is on cpu"));
}
