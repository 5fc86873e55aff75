// oneDNN layer norm and GELU; see onednn_eltwise_norm.h.
#include "kernels/cpu/onednn_eltwise_norm.h"

#include "kernels/cpu/onednn_context.h"
#include "kernels/cpu/simd_kernels.h"

namespace zero::cpu {

namespace {

using dims = dnnl::memory::dims;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

dnnl::memory mem(const dnnl::memory::desc& md, void* p) {
  return dnnl::memory(md, OneDnn::get().engine, p);
}

void execute(dnnl::primitive& p, std::unordered_map<int, dnnl::memory> args,
             const dnnl::memory::desc& scratch_md, void* scratch) {
  if (scratch != nullptr) args.emplace(DNNL_ARG_SCRATCHPAD, mem(scratch_md, scratch));
  p.execute(OneDnn::get().stream, args);
  OneDnn::get().stream.wait();
}

// Layer-norm scale, shift and their gradients: [C] fp32.
dnnl::memory::desc vec_md(int64_t cols) { return dnnl::memory::desc(dims{cols}, dt::f32, tag::a); }

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

}  // namespace

OneDnnLayerNorm::Entry& OneDnnLayerNorm::lookup(int64_t rows, int64_t cols, float eps) {
  auto key = std::make_tuple(rows, cols, eps);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  const auto& engine = OneDnn::get().engine;
  const dnnl::memory::desc md(dims{rows, cols}, dt::f32, tag::ab);
  const auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
  const auto attr = user_scratchpad();
  Entry e;
  e.fwd_pd = dnnl::layer_normalization_forward::primitive_desc(
      dnnl::layer_normalization_forward::desc(dnnl::prop_kind::forward_training, md, eps, flags),
      attr, engine);
  if (!dry_run_) e.fwd = dnnl::layer_normalization_forward(e.fwd_pd);
  e.bwd_pd = dnnl::layer_normalization_backward::primitive_desc(
      dnnl::layer_normalization_backward::desc(dnnl::prop_kind::backward, md, md, eps, flags), attr,
      engine, e.fwd_pd);
  if (!dry_run_) e.bwd = dnnl::layer_normalization_backward(e.bwd_pd);
  return cache_.emplace(key, std::move(e)).first->second;
}

void OneDnnLayerNorm::forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                              const Tensor& y, const Tensor& mean, const Tensor& var) {
  const int64_t cols = x.dim(-1), rows = x.numel() / cols;
  ZE_CHECK(y.numel() == x.numel() && mean.numel() == rows && var.numel() == rows &&
           gamma.numel() == cols && beta.numel() == cols);
  Entry& e = lookup(rows, cols, eps);
  const bool cast_params = gamma.dtype() != DType::kF32 || beta.dtype() != DType::kF32;
  const size_t sizes[2] = {cast_params ? static_cast<size_t>(cols) * 8 : 0,
                           e.fwd_pd.scratchpad_desc().get_size()};
  void* buf[2];
  workspace_.carve(sizes, buf);
  if (dry_run_) return;
  void* g = gamma.data();
  void* b = beta.data();
  if (cast_params) {
    float* staged = static_cast<float*>(buf[0]);
    simd_kernels().cast(gamma.data(), gamma.dtype(), staged, DType::kF32, cols);
    simd_kernels().cast(beta.data(), beta.dtype(), staged + cols, DType::kF32, cols);
    g = staged;
    b = staged + cols;
  }
  execute(e.fwd,
          {{DNNL_ARG_SRC, mem(e.fwd_pd.src_desc(), x.data())},
           {DNNL_ARG_DST, mem(e.fwd_pd.dst_desc(), y.data())},
           {DNNL_ARG_MEAN, mem(e.fwd_pd.mean_desc(), mean.data())},
           {DNNL_ARG_VARIANCE, mem(e.fwd_pd.variance_desc(), var.data())},
           {DNNL_ARG_SCALE, mem(vec_md(cols), g)},
           {DNNL_ARG_SHIFT, mem(vec_md(cols), b)}},
          e.fwd_pd.scratchpad_desc(), buf[1]);
}

void OneDnnLayerNorm::backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                               const Tensor& mean, const Tensor& var, float eps, const Tensor& dx,
                               const Tensor& dgamma, const Tensor& dbeta) {
  const int64_t cols = x.dim(-1), rows = x.numel() / cols;
  ZE_CHECK(dy.numel() == x.numel() && dx.numel() == x.numel() && dgamma.numel() == cols &&
           dbeta.numel() == cols);
  Entry& e = lookup(rows, cols, eps);
  // [gamma fp32 | dgamma fp32 | dbeta fp32 | scratchpad]
  const size_t sizes[4] = {gamma.dtype() != DType::kF32 ? static_cast<size_t>(cols) * 4 : 0,
                           static_cast<size_t>(cols) * 4, static_cast<size_t>(cols) * 4,
                           e.bwd_pd.scratchpad_desc().get_size()};
  void* buf[4];
  workspace_.carve(sizes, buf);
  if (dry_run_) return;
  void* g = gamma.data();
  if (buf[0] != nullptr) simd_kernels().cast(gamma.data(), gamma.dtype(), g = buf[0], DType::kF32, cols);
  // With use_shift, oneDNN's backward also expects the shift argument, though
  // the gradients do not depend on it; gamma's buffer stands in (read-only).
  execute(e.bwd,
          {{DNNL_ARG_SRC, mem(e.bwd_pd.src_desc(), x.data())},
           {DNNL_ARG_DIFF_DST, mem(e.bwd_pd.diff_dst_desc(), dy.data())},
           {DNNL_ARG_MEAN, mem(e.bwd_pd.mean_desc(), mean.data())},
           {DNNL_ARG_VARIANCE, mem(e.bwd_pd.variance_desc(), var.data())},
           {DNNL_ARG_SCALE, mem(vec_md(cols), g)},
           {DNNL_ARG_SHIFT, mem(vec_md(cols), g)},
           {DNNL_ARG_DIFF_SRC, mem(e.bwd_pd.diff_src_desc(), dx.data())},
           {DNNL_ARG_DIFF_SCALE, mem(vec_md(cols), buf[1])},
           {DNNL_ARG_DIFF_SHIFT, mem(vec_md(cols), buf[2])}},
          e.bwd_pd.scratchpad_desc(), buf[3]);
  simd_kernels().accumulate(dgamma.data(), dgamma.dtype(), static_cast<float*>(buf[1]), cols);
  simd_kernels().accumulate(dbeta.data(), dbeta.dtype(), static_cast<float*>(buf[2]), cols);
}

OneDnnGelu::Entry& OneDnnGelu::lookup(int64_t n) {
  auto it = cache_.find(n);
  if (it != cache_.end()) return it->second;
  const auto& engine = OneDnn::get().engine;
  const dnnl::memory::desc md(dims{n}, dt::f32, tag::a);
  const auto attr = user_scratchpad();
  Entry e;
  e.fwd_pd = dnnl::eltwise_forward::primitive_desc(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training,
                                  dnnl::algorithm::eltwise_gelu_tanh, md, 0.f, 0.f),
      attr, engine);
  if (!dry_run_) e.fwd = dnnl::eltwise_forward(e.fwd_pd);
  e.bwd_pd = dnnl::eltwise_backward::primitive_desc(
      dnnl::eltwise_backward::desc(dnnl::algorithm::eltwise_gelu_tanh, md, md, 0.f, 0.f), attr,
      engine, e.fwd_pd);
  if (!dry_run_) e.bwd = dnnl::eltwise_backward(e.bwd_pd);
  return cache_.emplace(n, std::move(e)).first->second;
}

void OneDnnGelu::forward(const Tensor& x, const Tensor& y) {
  ZE_CHECK(x.numel() == y.numel() && x.dtype() == DType::kF32 && y.dtype() == DType::kF32);
  Entry& e = lookup(x.numel());
  void* scratch = workspace_.reserve(e.fwd_pd.scratchpad_desc().get_size());
  if (dry_run_) return;
  execute(e.fwd,
          {{DNNL_ARG_SRC, mem(e.fwd_pd.src_desc(), x.data())},
           {DNNL_ARG_DST, mem(e.fwd_pd.dst_desc(), y.data())}},
          e.fwd_pd.scratchpad_desc(), e.fwd_pd.scratchpad_desc().get_size() ? scratch : nullptr);
}

void OneDnnGelu::backward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  ZE_CHECK(x.numel() == dy.numel() && x.numel() == dx.numel());
  Entry& e = lookup(x.numel());
  void* scratch = workspace_.reserve(e.bwd_pd.scratchpad_desc().get_size());
  if (dry_run_) return;
  execute(e.bwd,
          {{DNNL_ARG_SRC, mem(e.bwd_pd.src_desc(), x.data())},
           {DNNL_ARG_DIFF_DST, mem(e.bwd_pd.diff_dst_desc(), dy.data())},
           {DNNL_ARG_DIFF_SRC, mem(e.bwd_pd.diff_src_desc(), dx.data())}},
          e.bwd_pd.scratchpad_desc(), e.bwd_pd.scratchpad_desc().get_size() ? scratch : nullptr);
}

}  // namespace zero::cpu
