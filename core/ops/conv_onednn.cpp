#include "core/ops/conv_onednn.h"

#include <dnnl.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/tensor.h"

// Note [oneDNN convolutions]
// Dense and grouped float convolutions run on oneDNN (Debian's libdnnl, the
// build PyTorch 1.13 links here), as PyTorch's CPU convolutions do. Its JIT
// kernels use the CPU's widest vectors (AVX-512 where there is one; the
// OpenBLAS this machine's environment selects is AVX2 only) and never
// materialize im2col columns: ResNet-18's 3x3 layers at 128 px ran at
// 150 GFLOP/s through im2col and OpenBLAS, at 350-500 through oneDNN on the
// same two Zen 5 cores.
//
// oneDNN's fast kernels want blocked layouts (channels in blocks of 8 or 16);
// qat's tensors are NCHW. Each call reorders its operands into the layouts
// the primitive chose and the result back, into tensors from qat's allocator
// (cached blocks, no page faults); the reorders are memory bound and a few
// percent of a layer's time. Primitive descriptors are made once per shape
// (their creation JIT-compiles a kernel) and kept in a table for the process.
//
// Results do not depend on the run: oneDNN's float convolutions are
// deterministic for a given CPU and thread count, as the im2col path was
// (its weight gradient summed per thread in thread order).
namespace qat::conv_detail {

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
constexpr auto f32 = memory::data_type::f32;

// oneDNN's ceiling for QAT_MAX_CPU_ISA's (core/cpu_features.h), so that a
// capped run's convolutions use the kernels that CPU level would.
dnnl::cpu_isa onednn_ceiling(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::generic:
      return dnnl::cpu_isa::sse41;
    case CpuIsa::avx2:
      return dnnl::cpu_isa::avx2;
    case CpuIsa::avx_vnni:
      return dnnl::cpu_isa::avx2_vnni;
    case CpuIsa::avx512:
      return dnnl::cpu_isa::avx512_core;
    case CpuIsa::avx512_vnni:
      return dnnl::cpu_isa::avx512_core_vnni;
    case CpuIsa::amx:
      break;
  }
  return dnnl::cpu_isa::all;
}

dnnl::engine& cpu_engine() {
  static dnnl::engine engine = [] {
    dnnl::set_max_cpu_isa(onednn_ceiling(max_cpu_isa()));  // (only before oneDNN's first kernel)
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return engine;
}

struct Shapes {
  memory::dims x, w, b, y, strides, dilates, pad_l, pad_r;
};

int64_t right_pad(int64_t in, int64_t out, int64_t k, int64_t s, int64_t d, int64_t pad) {
  return (out - 1) * s + (k - 1) * d + 1 - in - pad;
}

Shapes shapes_of(const Geometry& g, const Conv2dParams& p) {
  Shapes s;
  s.x = {g.n, g.c, g.h, g.w};
  s.w = g.groups == 1 ? memory::dims{g.o, g.c, g.kh, g.kw} : memory::dims{g.groups, g.og(), g.cg(), g.kh, g.kw};
  s.b = {g.o};
  s.y = {g.n, g.o, g.oh, g.ow};
  s.strides = {p.stride_h, p.stride_w};
  s.dilates = {p.dil_h - 1, p.dil_w - 1};  // oneDNN counts the gaps: 0 is undilated
  s.pad_l = {p.pad_h, p.pad_w};
  s.pad_r = {right_pad(g.h, g.oh, g.kh, p.stride_h, p.dil_h, p.pad_h),
             right_pad(g.w, g.ow, g.kw, p.stride_w, p.dil_w, p.pad_w)};
  return s;
}

memory::desc any_desc(const memory::dims& d) { return memory::desc(d, f32, Tag::any); }
Tag weight_tag(const Geometry& g) { return g.groups == 1 ? Tag::oihw : Tag::goihw; }

// One shape's primitives: the forward made on first use, each backward on
// the first backward.
struct Plan {
  Shapes s;
  dnnl::convolution_forward::primitive_desc fwd_pd;
  dnnl::convolution_forward fwd;
  std::optional<dnnl::convolution_backward_data::primitive_desc> bwd_data_pd;
  std::optional<dnnl::convolution_backward_data> bwd_data;
  std::optional<dnnl::convolution_backward_weights::primitive_desc> bwd_weights_pd;
  std::optional<dnnl::convolution_backward_weights> bwd_weights;

  Plan(const Geometry& g, const Conv2dParams& p, bool with_bias) : s(shapes_of(g, p)) {
    const auto b = with_bias ? memory::desc(s.b, f32, Tag::x) : memory::desc();
    dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                      any_desc(s.x), any_desc(s.w), b, any_desc(s.y), s.strides, s.dilates, s.pad_l,
                                      s.pad_r);
    fwd_pd = dnnl::convolution_forward::primitive_desc(d, cpu_engine());
    fwd = dnnl::convolution_forward(fwd_pd);
  }

  void make_backward() {
    if (bwd_data) return;
    dnnl::convolution_backward_data::desc dd(dnnl::algorithm::convolution_direct, any_desc(s.x), any_desc(s.w),
                                             any_desc(s.y), s.strides, s.dilates, s.pad_l, s.pad_r);
    bwd_data_pd.emplace(dd, cpu_engine(), fwd_pd);
    bwd_data.emplace(*bwd_data_pd);
    dnnl::convolution_backward_weights::desc wd(dnnl::algorithm::convolution_direct, any_desc(s.x), any_desc(s.w),
                                                any_desc(s.y), s.strides, s.dilates, s.pad_l, s.pad_r);
    bwd_weights_pd.emplace(wd, cpu_engine(), fwd_pd);
    bwd_weights.emplace(*bwd_weights_pd);
  }
};

using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                       int64_t, int64_t, int64_t, int64_t, bool>;

// The plan for this shape, made on first use. A network has a handful of
// shapes (one more for a smaller last batch); past kMaxPlans (inference on
// many batch sizes) the table starts over. Shared: a caller keeps its plan
// while another thread may clear the table.
constexpr size_t kMaxPlans = 256;

std::shared_ptr<Plan> plan_for(const Geometry& g, const Conv2dParams& p, bool bias, bool backward) {
  static std::mutex mutex;
  static std::map<Key, std::shared_ptr<Plan>> plans;
  const Key key{g.n,        g.c,        g.h,     g.w,     g.o,     g.kh,    g.kw, g.groups,
                p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dil_h, p.dil_w, bias};
  std::lock_guard<std::mutex> lock(mutex);
  if (plans.size() >= kMaxPlans && !plans.count(key)) plans.clear();
  auto& plan = plans[key];
  try {
    if (!plan) plan = std::make_shared<Plan>(g, p, bias);
    if (backward) plan->make_backward();
  } catch (const dnnl::error& e) {
    plans.erase(key);
    QAT_CHECK(false, "conv2d: oneDNN has no convolution for input (", g.n, ",", g.c, ",", g.h, ",", g.w, "), weight (",
              g.o, ",", g.cg(), ",", g.kh, ",", g.kw, "), groups ", g.groups, ", stride (", p.stride_h, ",", p.stride_w,
              "), padding (", p.pad_h, ",", p.pad_w, "): ", e.what());
  }
  return plan;
}

memory user_memory(const memory::dims& d, Tag tag, const float* data) {
  return memory(memory::desc(d, f32, tag), cpu_engine(), const_cast<float*>(data));  // oneDNN only reads inputs
}

// Where a primitive writes a result wanted in `user`'s layout: `user` itself,
// or a scratch tensor `keep` that copy_back then reorders into `user`.
memory out_layout(const memory& user, const memory::desc& want, Tensor& keep) {
  if (user.get_desc() == want) return user;
  keep = Tensor::empty({static_cast<int64_t>((want.get_size() + sizeof(float) - 1) / sizeof(float))});
  return memory(want, cpu_engine(), keep.data<float>());
}

// `user` in the layout `want`: itself, or a reorder of it into `keep`.
memory in_layout(const memory& user, const memory::desc& want, Tensor& keep, dnnl::stream& stream) {
  memory m = out_layout(user, want, keep);
  if (m.get_data_handle() != user.get_data_handle())
    dnnl::reorder(user, m).execute(stream, const_cast<memory&>(user), m);
  return m;
}

void copy_back(memory& result, memory& user, dnnl::stream& stream) {
  if (result.get_data_handle() != user.get_data_handle()) dnnl::reorder(result, user).execute(stream, result, user);
}

}  // namespace

std::string onednn_name() {
  cpu_engine();  // (the ceiling set)
  const dnnl::version_t* v = dnnl::version();
  const char* isa = "";
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41:
      isa = "sse41";
      break;
    case dnnl::cpu_isa::avx:
      isa = "avx";
      break;
    case dnnl::cpu_isa::avx2:
      isa = "avx2";
      break;
    case dnnl::cpu_isa::avx2_vnni:
      isa = "avx2_vnni";
      break;
    case dnnl::cpu_isa::avx512_core:
      isa = "avx512_core";
      break;
    case dnnl::cpu_isa::avx512_core_vnni:
      isa = "avx512_core_vnni";
      break;
    case dnnl::cpu_isa::avx512_core_bf16:
      isa = "avx512_core_bf16";
      break;
    case dnnl::cpu_isa::avx512_core_amx:
      isa = "avx512_core_amx";
      break;
    default:
      isa = "other";
      break;
  }
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) + " " +
         isa;
}

void onednn_forward(const float* x, const float* w, const float* b, const Geometry& g, const Conv2dParams& p,
                    float* out) {
  const std::shared_ptr<Plan> held = plan_for(g, p, b != nullptr, false);
  const Plan& plan = *held;
  dnnl::stream stream(cpu_engine());
  Tensor x_keep, w_keep, y_keep;
  memory x_user = user_memory(plan.s.x, Tag::nchw, x), w_user = user_memory(plan.s.w, weight_tag(g), w);
  memory y_user = user_memory(plan.s.y, Tag::nchw, out);
  memory xm = in_layout(x_user, plan.fwd_pd.src_desc(), x_keep, stream);
  memory wm = in_layout(w_user, plan.fwd_pd.weights_desc(), w_keep, stream);
  memory ym = out_layout(y_user, plan.fwd_pd.dst_desc(), y_keep);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, ym}};
  if (b) args.emplace(DNNL_ARG_BIAS, user_memory(plan.s.b, Tag::x, b));
  plan.fwd.execute(stream, args);
  copy_back(ym, y_user, stream);
  stream.wait();
}

void onednn_backward(const float* gy, const float* x, const float* w, const Geometry& g, const Conv2dParams& p,
                     float* dx, float* dw) {
  if (!dx && !dw) return;
  const std::shared_ptr<Plan> held = plan_for(g, p, false, true);
  const Plan& plan = *held;
  dnnl::stream stream(cpu_engine());
  memory gy_user = user_memory(plan.s.y, Tag::nchw, gy);
  Tensor gy_keep, gyw_keep;
  memory gym;  // gy as the data gradient's kernel wants it (with dx only: a first layer needs no dx)
  if (dx) {
    Tensor w_keep, dx_keep;
    gym = in_layout(gy_user, plan.bwd_data_pd->diff_dst_desc(), gy_keep, stream);
    memory w_user = user_memory(plan.s.w, weight_tag(g), w), dx_user = user_memory(plan.s.x, Tag::nchw, dx);
    memory wm = in_layout(w_user, plan.bwd_data_pd->weights_desc(), w_keep, stream);
    memory dxm = out_layout(dx_user, plan.bwd_data_pd->diff_src_desc(), dx_keep);
    plan.bwd_data->execute(stream, {{DNNL_ARG_DIFF_DST, gym}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DIFF_SRC, dxm}});
    copy_back(dxm, dx_user, stream);
  }
  if (dw) {
    Tensor x_keep, dw_keep;
    memory x_user = user_memory(plan.s.x, Tag::nchw, x), dw_user = user_memory(plan.s.w, weight_tag(g), dw);
    const memory::desc& want = plan.bwd_weights_pd->diff_dst_desc();
    memory gyw = dx && gym.get_desc() == want ? gym : in_layout(gy_user, want, gyw_keep, stream);
    memory xm = in_layout(x_user, plan.bwd_weights_pd->src_desc(), x_keep, stream);
    memory dwm = out_layout(dw_user, plan.bwd_weights_pd->diff_weights_desc(), dw_keep);
    plan.bwd_weights->execute(stream, {{DNNL_ARG_DIFF_DST, gyw}, {DNNL_ARG_SRC, xm}, {DNNL_ARG_DIFF_WEIGHTS, dwm}});
    copy_back(dwm, dw_user, stream);
  }
  stream.wait();
}

}  // namespace qat::conv_detail
