// CUDA Ops: shape, dtype and tier checks, then a launcher from cuda_kernels.h
// or cuBLAS (gemm.h). See cuda_ops.h.
#include "kernels/cuda/cuda_ops.h"

#include "kernels/backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace zero::cuda {

namespace {

void check_device(const Tensor& t) {
  ZE_CHECK(t.tier() == Tier::kDevice) << "operand " << t.debug_string() << " is not device memory";
}
void check_f32(const Tensor& t) {
  ZE_CHECK(t.dtype() == DType::kF32) << t.debug_string();
  check_device(t);
}
void check_float(const Tensor& t) {
  ZE_CHECK(dtype_is_float(t.dtype())) << t.debug_string();
  check_device(t);
}
void check_i32(const Tensor& t) {
  ZE_CHECK(t.dtype() == DType::kI32) << t.debug_string();
  check_device(t);
}
void check_same_numel(const Tensor& a, const Tensor& b) {
  ZE_CHECK(a.numel() == b.numel()) << a.debug_string() << " vs " << b.debug_string();
}
float* f32_ptr(const Tensor& t) { return static_cast<float*>(t.data()); }
int32_t* i32_ptr(const Tensor& t) { return static_cast<int32_t*>(t.data()); }

}  // namespace

absl::StatusOr<std::unique_ptr<CudaOps>> CudaOps::create(Backend& backend, int device,
                                                         cudaStream_t compute_stream) {
  ZE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  cublasHandle_t handle = nullptr;
  absl::Status st = cublas_status(cublasCreate(&handle), "cublasCreate");
  if (st.ok()) st = cublas_status(cublasSetStream(handle, compute_stream), "cublasSetStream");
  // fp32 accumulation always: no split-K reductions in 16 bits (and no TF32,
  // which the default math mode does not use for CUBLAS_COMPUTE_32F).
  if (st.ok()) {
    st = cublas_status(cublasSetMathMode(handle, static_cast<cublasMath_t>(
                                                     CUBLAS_DEFAULT_MATH |
                                                     CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
                       "cublasSetMathMode");
  }
  if (!st.ok()) {
    if (handle != nullptr) cublasDestroy(handle);
    return st;
  }
  return std::unique_ptr<CudaOps>(new CudaOps(backend, device, compute_stream, handle));
}

CudaOps::CudaOps(Backend& backend, int device, cudaStream_t stream, cublasHandle_t cublas)
    : backend_(backend),
      device_(device),
      stream_(stream),
      cublas_(cublas),
      workspace_(backend),
      gemm_(backend, cublas, stream) {}

CudaOps::~CudaOps() {
  enter();
  // Work still queued may use the workspaces freed with the members.
  ZE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  ZE_CUBLAS_CHECK(cublasDestroy(cublas_));
}

void CudaOps::enter() const {
  int current = -1;
  ZE_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device_) ZE_CUDA_CHECK(cudaSetDevice(device_));
}

void* CudaOps::host_result() {
  if (host_result_ == nullptr) {
    absl::StatusOr<std::shared_ptr<Storage>> s =
        backend_.allocate(sizeof(double), Tier::kHost, MemCategory::kWorkspace);
    ZE_CHECK(s.ok()) << s.status().ToString();
    host_result_ = *std::move(s);
  }
  return host_result_->data();
}

void CudaOps::run_matmul(const Tensor& a, const Tensor& b, const Tensor& c, const MatmulSpec& spec,
                         const Tensor& bias) {
  enter();
  check_device(a), check_device(b), check_device(c);
  gemm_.run(a, b, c, spec, bias, workspace_);
}

void CudaOps::layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                float eps, const Tensor& y, const Tensor& mean,
                                const Tensor& var) {
  enter();
  check_f32(x), check_f32(y), check_f32(mean), check_f32(var);
  check_float(gamma), check_float(beta);
  const int64_t cols = x.dim(-1), rows = cols == 0 ? 0 : x.numel() / cols;
  ZE_CHECK(y.numel() == x.numel() && mean.numel() == rows && var.numel() == rows &&
           gamma.numel() == cols && beta.numel() == cols)
      << "layernorm " << x.debug_string() << " gamma " << gamma.debug_string();
  launch_layernorm_forward(f32_ptr(x), gamma.data(), gamma.dtype(), beta.data(), beta.dtype(), eps,
                           rows, cols, f32_ptr(y), f32_ptr(mean), f32_ptr(var), stream_);
}

void CudaOps::layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                 const Tensor& mean, const Tensor& var, float eps,
                                 const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta) {
  enter();
  check_f32(dy), check_f32(x), check_f32(dx), check_f32(mean), check_f32(var);
  check_float(gamma), check_float(dgamma), check_float(dbeta);
  const int64_t cols = x.dim(-1), rows = cols == 0 ? 0 : x.numel() / cols;
  ZE_CHECK(dy.numel() == x.numel() && dx.numel() == x.numel() && mean.numel() == rows &&
           var.numel() == rows && gamma.numel() == cols && dgamma.numel() == cols &&
           dbeta.numel() == cols)
      << "layernorm backward " << x.debug_string() << " dgamma " << dgamma.debug_string();
  void* ws = workspace_.reserve(layernorm_backward_workspace_bytes(rows, cols));
  launch_layernorm_backward(f32_ptr(dy), f32_ptr(x), gamma.data(), gamma.dtype(), f32_ptr(mean),
                            f32_ptr(var), eps, rows, cols, f32_ptr(dx), dgamma.data(),
                            dgamma.dtype(), dbeta.data(), dbeta.dtype(), ws, stream_);
}

void CudaOps::rmsnorm_forward(const Tensor& x, const Tensor& gamma, float eps, const Tensor& y,
                              const Tensor& rstd, bool unit_offset) {
  enter();
  check_f32(x), check_f32(y), check_f32(rstd), check_float(gamma);
  const int64_t cols = x.dim(-1), rows = cols == 0 ? 0 : x.numel() / cols;
  ZE_CHECK(y.numel() == x.numel() && rstd.numel() == rows && gamma.numel() == cols)
      << "rmsnorm " << x.debug_string() << " gamma " << gamma.debug_string() << " y " << y.debug_string()
      << " rstd " << rstd.debug_string();
  launch_rmsnorm_forward(f32_ptr(x), gamma.data(), gamma.dtype(), unit_offset ? 1.0f : 0.0f, eps, rows, cols,
                         f32_ptr(y), f32_ptr(rstd), stream_);
}

void CudaOps::rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& rstd,
                               const Tensor& dx, const Tensor& dgamma, bool unit_offset) {
  enter();
  check_f32(dy), check_f32(x), check_f32(rstd), check_f32(dx);
  check_float(gamma), check_float(dgamma);
  const int64_t cols = x.dim(-1), rows = cols == 0 ? 0 : x.numel() / cols;
  ZE_CHECK(dy.numel() == x.numel() && dx.numel() == x.numel() && rstd.numel() == rows &&
           gamma.numel() == cols && dgamma.numel() == cols)
      << "rmsnorm backward " << x.debug_string() << " dgamma " << dgamma.debug_string();
  void* ws = workspace_.reserve(rmsnorm_backward_workspace_bytes(rows, cols));
  launch_rmsnorm_backward(f32_ptr(dy), f32_ptr(x), gamma.data(), gamma.dtype(), unit_offset ? 1.0f : 0.0f,
                          f32_ptr(rstd), rows, cols, f32_ptr(dx), dgamma.data(), dgamma.dtype(), ws, stream_);
}

void CudaOps::rope(const Tensor& x, const Tensor& y, const RopeFreqs& freqs, int64_t first_position,
                   bool inverse) {
  enter();
  ZE_CHECK(x.ndim() == 4 && y.shape() == x.shape()) << "rope " << x.debug_string() << " -> " << y.debug_string();
  ZE_CHECK(freqs.half > 0 && freqs.half <= RopeFreqs::kMaxHalf && x.dim(3) == 2 * int64_t{freqs.half})
      << "rope " << x.debug_string() << " with " << freqs.half << " frequencies";
  check_f32(x), check_f32(y);
  const int64_t seq = x.dim(2), rows = x.dim(0) * x.dim(1) * seq;
  launch_rope(f32_ptr(x), f32_ptr(y), rows, seq, freqs, first_position, inverse, stream_);
}

void CudaOps::swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& h) {
  enter();
  check_f32(gate), check_f32(up), check_f32(h), check_same_numel(gate, up), check_same_numel(gate, h);
  launch_swiglu_forward(f32_ptr(gate), f32_ptr(up), f32_ptr(h), gate.numel(), stream_);
}

void CudaOps::swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dh, const Tensor& dgate,
                              const Tensor& dup) {
  enter();
  check_f32(gate), check_f32(up), check_f32(dh), check_f32(dgate), check_f32(dup);
  check_same_numel(gate, up), check_same_numel(gate, dh), check_same_numel(gate, dgate),
      check_same_numel(gate, dup);
  launch_swiglu_backward(f32_ptr(gate), f32_ptr(up), f32_ptr(dh), f32_ptr(dgate), f32_ptr(dup), gate.numel(),
                         stream_);
}

void CudaOps::geglu_forward(const Tensor& gate, const Tensor& up, const Tensor& h) {
  enter();
  check_f32(gate), check_f32(up), check_f32(h), check_same_numel(gate, up), check_same_numel(gate, h);
  launch_geglu_forward(f32_ptr(gate), f32_ptr(up), f32_ptr(h), gate.numel(), stream_);
}

void CudaOps::geglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dh, const Tensor& dgate,
                             const Tensor& dup) {
  enter();
  check_f32(gate), check_f32(up), check_f32(dh), check_f32(dgate), check_f32(dup);
  check_same_numel(gate, up), check_same_numel(gate, dh), check_same_numel(gate, dgate),
      check_same_numel(gate, dup);
  launch_geglu_backward(f32_ptr(gate), f32_ptr(up), f32_ptr(dh), f32_ptr(dgate), f32_ptr(dup), gate.numel(),
                        stream_);
}

// One launch for every row (Ops' default launches two kernels per row: a
// Llama MLP's 8192 rows were 16384 launches per layer).
void CudaOps::glu_rows_forward(Glu kind, const Tensor& gate_up, const Tensor& h) {
  enter();
  check_f32(gate_up), check_f32(h);
  const int64_t f = h.dim(-1), n = f > 0 ? h.numel() / f : 0;
  ZE_CHECK(gate_up.numel() == 2 * n * f && gate_up.dim(-1) == 2 * f)
      << gate_up.debug_string() << " -> " << h.debug_string();
  launch_glu_rows_forward(kind == Glu::kGeGlu, f32_ptr(gate_up), f32_ptr(h), n, f, stream_);
}

void CudaOps::glu_rows_backward(Glu kind, const Tensor& gate_up, const Tensor& dh, const Tensor& dgate_up) {
  enter();
  check_f32(gate_up), check_f32(dh), check_f32(dgate_up);
  const int64_t f = dh.dim(-1), n = f > 0 ? dh.numel() / f : 0;
  ZE_CHECK(gate_up.numel() == 2 * n * f && dgate_up.numel() == gate_up.numel() && gate_up.dim(-1) == 2 * f)
      << gate_up.debug_string() << " " << dh.debug_string() << " " << dgate_up.debug_string();
  launch_glu_rows_backward(kind == Glu::kGeGlu, f32_ptr(gate_up), f32_ptr(dh), f32_ptr(dgate_up), n, f, stream_);
}

void CudaOps::moe_router_forward(const Tensor& logits, int64_t k, bool renormalize, const Tensor& probs,
                                 const Tensor& indices, const Tensor& weights, const Tensor& lse) {
  enter();
  check_f32(logits), check_f32(probs), check_f32(weights), check_f32(lse);
  const int64_t n = logits.dim(0), e = logits.dim(1);
  ZE_CHECK(logits.ndim() == 2 && k >= 1 && k <= e && probs.numel() == n * e && indices.numel() == n * k &&
           weights.numel() == n * k && lse.numel() == n && indices.dtype() == DType::kI32)
      << "moe_router_forward k " << k << " of " << logits.debug_string();
  launch_moe_router_forward(f32_ptr(logits), n, e, k, renormalize, f32_ptr(probs), i32_ptr(indices), f32_ptr(weights),
                            f32_ptr(lse), stream_);
}

void CudaOps::moe_router_backward(const Tensor& probs, const Tensor& indices, const Tensor& dweights,
                                  bool renormalize, const Tensor& dprobs_extra, float z_scale, const Tensor& lse,
                                  const Tensor& dlogits) {
  enter();
  const int64_t n = probs.dim(0), e = probs.dim(1), k = n > 0 ? indices.numel() / n : 0;
  ZE_CHECK(dweights.numel() == n * k && dlogits.numel() == n * e && lse.numel() == n &&
           (!dprobs_extra.defined() || dprobs_extra.numel() == e))
      << "moe_router_backward " << probs.debug_string() << " " << dweights.debug_string();
  launch_moe_router_backward(f32_ptr(probs), i32_ptr(indices), f32_ptr(dweights), n, e, k, renormalize,
                             dprobs_extra.defined() ? f32_ptr(dprobs_extra) : nullptr, z_scale, f32_ptr(lse),
                             f32_ptr(dlogits), stream_);
}

void CudaOps::gather_rows(const Tensor& x, const Tensor& rows, const Tensor& out) {
  enter();
  check_f32(x), check_f32(out);
  const int64_t c = x.dim(-1), m = c > 0 ? out.numel() / c : 0;
  ZE_CHECK(rows.dtype() == DType::kI32 && rows.numel() == m) << rows.debug_string() << " for " << out.debug_string();
  launch_gather_rows(f32_ptr(x), i32_ptr(rows), m, c, f32_ptr(out), stream_);
}

void CudaOps::scatter_add_rows(const Tensor& dy, const Tensor& rows, const Tensor& dx) {
  enter();
  check_f32(dy), check_f32(dx);
  const int64_t c = dx.dim(-1), m = c > 0 ? dy.numel() / c : 0;
  ZE_CHECK(rows.dtype() == DType::kI32 && rows.numel() == m) << rows.debug_string() << " for " << dy.debug_string();
  launch_scatter_add_rows(f32_ptr(dy), i32_ptr(rows), m, c, f32_ptr(dx), stream_);
}

void CudaOps::moe_combine(const Tensor& h, const Tensor& rows, const Tensor& slots, const Tensor& weights,
                          const Tensor& y) {
  enter();
  check_f32(h), check_f32(y), check_f32(weights);
  const int64_t c = y.dim(-1), m = c > 0 ? h.numel() / c : 0;
  ZE_CHECK(rows.numel() == m && slots.numel() == m) << rows.debug_string() << " " << h.debug_string();
  launch_moe_combine(f32_ptr(h), i32_ptr(rows), i32_ptr(slots), f32_ptr(weights), m, c, f32_ptr(y), stream_);
}

void CudaOps::moe_combine_backward(const Tensor& dy, const Tensor& h, const Tensor& rows, const Tensor& slots,
                                   const Tensor& weights, const Tensor& dh, const Tensor& dweights) {
  enter();
  check_f32(dy), check_f32(h), check_f32(dh), check_f32(dweights);
  const int64_t c = dy.dim(-1), m = c > 0 ? h.numel() / c : 0;
  ZE_CHECK(rows.numel() == m && slots.numel() == m && dh.numel() == h.numel())
      << rows.debug_string() << " " << h.debug_string();
  launch_moe_combine_backward(f32_ptr(dy), f32_ptr(h), i32_ptr(rows), i32_ptr(slots), f32_ptr(weights), m, c,
                              f32_ptr(dh), f32_ptr(dweights), stream_);
}

void CudaOps::sigmoid_gate_forward(const Tensor& g, const Tensor& x, const Tensor& y) {
  enter();
  check_f32(g), check_f32(x), check_f32(y), check_same_numel(x, y);
  const int64_t n = g.numel(), c = n > 0 ? x.numel() / n : 0;
  launch_sigmoid_gate_forward(f32_ptr(g), f32_ptr(x), n, c, f32_ptr(y), stream_);
}

void CudaOps::sigmoid_gate_backward(const Tensor& g, const Tensor& x, const Tensor& dy, const Tensor& dg,
                                    const Tensor& dx) {
  enter();
  check_f32(g), check_f32(x), check_f32(dy), check_f32(dg), check_f32(dx);
  check_same_numel(x, dy), check_same_numel(x, dx), check_same_numel(g, dg);
  const int64_t n = g.numel(), c = n > 0 ? x.numel() / n : 0;
  launch_sigmoid_gate_backward(f32_ptr(g), f32_ptr(x), f32_ptr(dy), n, c, f32_ptr(dg), f32_ptr(dx), stream_);
}

void CudaOps::softcap_forward(const Tensor& x, float cap, const Tensor& y) {
  enter();
  check_f32(x), check_f32(y), check_same_numel(x, y);
  ZE_CHECK(cap > 0.0f) << "soft-cap " << cap;
  launch_softcap_forward(f32_ptr(x), cap, f32_ptr(y), x.numel(), stream_);
}

void CudaOps::softcap_backward(const Tensor& y, const Tensor& dy, float cap, const Tensor& dx) {
  enter();
  check_f32(y), check_f32(dy), check_f32(dx), check_same_numel(y, dy), check_same_numel(y, dx);
  ZE_CHECK(cap > 0.0f) << "soft-cap " << cap;
  launch_softcap_backward(f32_ptr(y), f32_ptr(dy), cap, f32_ptr(dx), y.numel(), stream_);
}

void CudaOps::gelu_forward(const Tensor& x, const Tensor& y) {
  enter();
  check_f32(x), check_f32(y), check_same_numel(x, y);
  launch_gelu_forward(f32_ptr(x), f32_ptr(y), x.numel(), stream_);
}

void CudaOps::gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  enter();
  check_f32(x), check_f32(dy), check_f32(dx), check_same_numel(x, dy), check_same_numel(x, dx);
  launch_gelu_backward(f32_ptr(x), f32_ptr(dy), f32_ptr(dx), x.numel(), stream_);
}

void CudaOps::causal_softmax_forward(const Tensor& scores, const Tensor& probs) {
  enter();
  ZE_CHECK(scores.ndim() == 3 && scores.dim(1) == scores.dim(2)) << scores.debug_string();
  check_f32(scores), check_f32(probs), check_same_numel(scores, probs);
  launch_causal_softmax_forward(f32_ptr(scores), f32_ptr(probs), scores.dim(0), scores.dim(1),
                                stream_);
}

void CudaOps::causal_softmax_backward(const Tensor& probs, const Tensor& dprobs,
                                      const Tensor& dscores) {
  enter();
  ZE_CHECK(probs.ndim() == 3 && probs.dim(1) == probs.dim(2)) << probs.debug_string();
  check_f32(probs), check_f32(dprobs), check_f32(dscores);
  check_same_numel(probs, dprobs), check_same_numel(probs, dscores);
  launch_causal_softmax_backward(f32_ptr(probs), f32_ptr(dprobs), f32_ptr(dscores), probs.dim(0),
                                 probs.dim(1), stream_);
}

void CudaOps::split_qkv(const Tensor& qkv, const Tensor& q, const Tensor& k, const Tensor& v) {
  enter();
  ZE_CHECK(q.ndim() == 4 && k.ndim() == 4 && qkv.ndim() == 3) << q.debug_string() << " " << qkv.debug_string();
  const int64_t b = q.dim(0), h = q.dim(1), g = k.dim(1), t = q.dim(2), d = q.dim(3);
  ZE_CHECK(qkv.dim(0) == b && qkv.dim(1) == t && qkv.dim(2) == (h + 2 * g) * d && k.shape() == Shape({b, g, t, d}))
      << q.debug_string() << " " << k.debug_string() << " " << qkv.debug_string();
  check_f32(qkv), check_f32(q), check_f32(k), check_f32(v);
  check_same_numel(k, v);
  launch_split_qkv(f32_ptr(qkv), f32_ptr(q), f32_ptr(k), f32_ptr(v), b, t, h, g, d, stream_);
}

void CudaOps::merge_qkv(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        const Tensor& dqkv) {
  enter();
  ZE_CHECK(dq.ndim() == 4 && dk.ndim() == 4 && dqkv.ndim() == 3) << dq.debug_string() << " " << dqkv.debug_string();
  const int64_t b = dq.dim(0), h = dq.dim(1), g = dk.dim(1), t = dq.dim(2), d = dq.dim(3);
  ZE_CHECK(dqkv.dim(0) == b && dqkv.dim(1) == t && dqkv.dim(2) == (h + 2 * g) * d && dk.shape() == Shape({b, g, t, d}))
      << dq.debug_string() << " " << dk.debug_string() << " " << dqkv.debug_string();
  check_f32(dq), check_f32(dk), check_f32(dv), check_f32(dqkv);
  check_same_numel(dk, dv);
  launch_merge_qkv(f32_ptr(dq), f32_ptr(dk), f32_ptr(dv), f32_ptr(dqkv), b, t, h, g, d, stream_);
}

void CudaOps::transpose12(const Tensor& src, const Tensor& dst) {
  enter();
  ZE_CHECK(src.ndim() == 4 && dst.ndim() == 4 && dst.dim(0) == src.dim(0) &&
           dst.dim(1) == src.dim(2) && dst.dim(2) == src.dim(1) && dst.dim(3) == src.dim(3))
      << src.debug_string() << " -> " << dst.debug_string();
  check_f32(src), check_f32(dst);
  launch_transpose12(f32_ptr(src), f32_ptr(dst), src.dim(0), src.dim(1), src.dim(2), src.dim(3),
                     stream_);
}

void CudaOps::embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out) {
  embedding_lookup(ids, 0, false, table, out);
}

void CudaOps::embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable) {
  embedding_scatter(ids, 0, false, dout, dtable);
}

void CudaOps::embedding_slice_forward(const Tensor& ids, int64_t first, const Tensor& table, const Tensor& out) {
  embedding_lookup(ids, first, true, table, out);
}

void CudaOps::embedding_slice_backward(const Tensor& ids, int64_t first, const Tensor& dout, const Tensor& dtable) {
  embedding_scatter(ids, first, true, dout, dtable);
}

void CudaOps::embedding_lookup(const Tensor& ids, int64_t first, bool sliced, const Tensor& table,
                               const Tensor& out) {
  enter();
  ZE_CHECK(table.ndim() == 2 && out.numel() == ids.numel() * table.dim(1) && first >= 0)
      << ids.debug_string() << " " << table.debug_string() << " " << out.debug_string();
  check_i32(ids), check_float(table), check_f32(out);
  launch_embedding_forward(i32_ptr(ids), ids.numel(), table.data(), table.dtype(), table.dim(0),
                           table.dim(1), f32_ptr(out), first, sliced, stream_);
}

void CudaOps::embedding_scatter(const Tensor& ids, int64_t first, bool sliced, const Tensor& dout,
                                const Tensor& dtable) {
  enter();
  ZE_CHECK(dtable.ndim() == 2 && dout.numel() == ids.numel() * dtable.dim(1) && first >= 0)
      << ids.debug_string() << " " << dout.debug_string() << " " << dtable.debug_string();
  check_i32(ids), check_f32(dout), check_float(dtable);
  const int64_t n = ids.numel(), vocab = dtable.dim(0);
  void* ws = workspace_.reserve(embedding_backward_workspace_bytes(n, vocab, sliced));
  launch_embedding_backward(i32_ptr(ids), n, f32_ptr(dout), dtable.dim(1), dtable.data(),
                            dtable.dtype(), vocab, first, sliced, ws, stream_);
}

void CudaOps::add_positional(const Tensor& x, const Tensor& table) {
  enter();
  ZE_CHECK(x.ndim() == 3 && table.ndim() == 2 && table.dim(1) == x.dim(2) &&
           table.dim(0) >= x.dim(1))
      << x.debug_string() << " " << table.debug_string();
  check_f32(x), check_float(table);
  launch_add_positional(f32_ptr(x), x.dim(0), x.dim(1), x.dim(2), table.data(), table.dtype(),
                        stream_);
}

void CudaOps::positional_backward(const Tensor& dy, const Tensor& dtable) {
  enter();
  ZE_CHECK(dy.ndim() == 3 && dtable.ndim() == 2 && dtable.dim(1) == dy.dim(2) &&
           dtable.dim(0) >= dy.dim(1))
      << dy.debug_string() << " " << dtable.debug_string();
  check_f32(dy), check_float(dtable);
  // dtable[t, c] += sum_b dy[b, t, c]: column sums of dy viewed as [B, T*C]
  // into the first T rows of the table.
  const int64_t rows = dy.dim(0), cols = dy.dim(1) * dy.dim(2);
  void* ws = workspace_.reserve(column_sums_workspace_bytes(rows, cols));
  launch_column_sums_accumulate(f32_ptr(dy), rows, cols, dtable.data(), dtable.dtype(), ws,
                                stream_);
}

void CudaOps::add(const Tensor& a, const Tensor& b, const Tensor& out) {
  enter();
  check_f32(a), check_f32(b), check_f32(out);
  check_same_numel(a, b), check_same_numel(a, out);
  launch_add(f32_ptr(a), f32_ptr(b), f32_ptr(out), a.numel(), stream_);
}

void CudaOps::accumulate(const Tensor& dst, const Tensor& src) {
  enter();
  check_float(dst), check_f32(src), check_same_numel(dst, src);
  launch_accumulate(dst.data(), dst.dtype(), f32_ptr(src), src.numel(), stream_);
}

void CudaOps::bias_backward(const Tensor& dy, const Tensor& dbias) {
  enter();
  check_f32(dy), check_float(dbias);
  const int64_t cols = dbias.numel();
  ZE_CHECK(dy.dim(-1) == cols) << dy.debug_string() << " " << dbias.debug_string();
  const int64_t rows = cols == 0 ? 0 : dy.numel() / cols;
  void* ws = workspace_.reserve(column_sums_workspace_bytes(rows, cols));
  launch_column_sums_accumulate(f32_ptr(dy), rows, cols, dbias.data(), dbias.dtype(), ws, stream_);
}

void CudaOps::scale(const Tensor& x, float s) {
  enter();
  check_float(x);
  launch_scale(x.data(), x.dtype(), s, x.numel(), stream_);
}

void CudaOps::fill(const Tensor& x, float v) {
  enter();
  check_float(x);
  launch_fill(x.data(), x.dtype(), v, x.numel(), stream_);
}

void CudaOps::dropout(const Tensor& x, const Tensor& y, float p, const DropoutKey& key) {
  enter();
  ZE_CHECK(x.ndim() == 3 && x.shape() == y.shape() && x.dtype() == y.dtype())
      << x.debug_string() << " -> " << y.debug_string();
  ZE_CHECK(p >= 0.0f && p < 1.0f) << "dropout p " << p;
  check_float(x);
  launch_dropout(x.data(), y.data(), x.dtype(), x.dim(0), x.dim(1), x.dim(2), p, key, stream_);
}


void CudaOps::cast(const Tensor& src, const Tensor& dst) {
  enter();
  check_float(src), check_float(dst), check_same_numel(src, dst);
  launch_cast(src.data(), src.dtype(), dst.data(), dst.dtype(), src.numel(), stream_);
}

void CudaOps::cross_entropy(const Tensor& logits, const Tensor& targets, float grad_scale,
                            const Tensor& losses) {
  enter();
  check_f32(logits), check_f32(losses), check_i32(targets);
  const int64_t vocab = logits.dim(-1), n = vocab == 0 ? 0 : logits.numel() / vocab;
  ZE_CHECK(targets.numel() == n && losses.numel() == n)
      << logits.debug_string() << " " << targets.debug_string() << " " << losses.debug_string();
  // Targets are in device memory: a target >= vocab is caught by the kernel (it traps).
  launch_cross_entropy(f32_ptr(logits), i32_ptr(targets), n, vocab, grad_scale, f32_ptr(losses),
                       stream_);
}

void CudaOps::row_max(const Tensor& x, const Tensor& max) {
  enter();
  check_f32(x), check_f32(max);
  const int64_t cols = x.dim(-1), n = cols == 0 ? 0 : x.numel() / cols;
  ZE_CHECK(max.numel() == n) << x.debug_string() << " " << max.debug_string();
  launch_row_max(f32_ptr(x), n, cols, f32_ptr(max), stream_);
}

namespace {
// The rows of a vocabulary slice, with checks of the phases' operands.
int64_t slice_rows(const Tensor& logits, const Tensor& targets, const Tensor& max, const Tensor& sums) {
  check_f32(logits), check_i32(targets), check_f32(max), check_f32(sums);
  const int64_t cols = logits.dim(-1), n = cols == 0 ? 0 : logits.numel() / cols;
  ZE_CHECK(targets.numel() == n && max.numel() == n && sums.numel() == 2 * n)
      << logits.debug_string() << " " << targets.debug_string() << " " << max.debug_string() << " "
      << sums.debug_string();
  return n;
}
}  // namespace

void CudaOps::cross_entropy_slice_exp(const Tensor& logits, const Tensor& targets, int64_t first, const Tensor& max,
                                      const Tensor& sums) {
  enter();
  const int64_t n = slice_rows(logits, targets, max, sums);
  launch_cross_entropy_slice_exp(f32_ptr(logits), i32_ptr(targets), n, logits.dim(-1), first, f32_ptr(max),
                                 f32_ptr(sums), stream_);
}

void CudaOps::cross_entropy_slice_finish(const Tensor& probs, const Tensor& targets, int64_t first,
                                         const Tensor& max, const Tensor& sums, float grad_scale,
                                         const Tensor& losses) {
  enter();
  const int64_t n = slice_rows(probs, targets, max, sums);
  check_f32(losses);
  ZE_CHECK(losses.numel() == n) << losses.debug_string();
  launch_cross_entropy_slice_finish(f32_ptr(probs), i32_ptr(targets), n, probs.dim(-1), first, f32_ptr(max),
                                    f32_ptr(sums), grad_scale, f32_ptr(losses), stream_);
}

void CudaOps::adamw(const Tensor& master, const Tensor& grad, const Tensor& m, const Tensor& v,
                    const Tensor& param_out, const AdamWHyper& hyper) {
  enter();
  check_f32(master), check_f32(m), check_f32(v), check_float(grad);
  check_same_numel(master, grad), check_same_numel(master, m), check_same_numel(master, v);
  if (param_out.defined()) check_float(param_out), check_same_numel(master, param_out);
  launch_adamw(f32_ptr(master), grad.data(), grad.dtype(), f32_ptr(m), f32_ptr(v),
               param_out.defined() ? param_out.data() : nullptr, param_out.dtype(),
               master.numel(), hyper, stream_);
}

void CudaOps::sgd(const Tensor& master, const Tensor& grad, const Tensor& momentum_buf,
                  const Tensor& param_out, const SgdHyper& hyper) {
  enter();
  check_f32(master), check_float(grad), check_same_numel(master, grad);
  if (hyper.momentum != 0.0f) check_f32(momentum_buf), check_same_numel(master, momentum_buf);
  if (param_out.defined()) check_float(param_out), check_same_numel(master, param_out);
  launch_sgd(f32_ptr(master), grad.data(), grad.dtype(),
             hyper.momentum != 0.0f ? f32_ptr(momentum_buf) : nullptr,
             param_out.defined() ? param_out.data() : nullptr, param_out.dtype(), master.numel(),
             hyper, stream_);
}

void CudaOps::lion(const Tensor& master, const Tensor& grad, const Tensor& exp_avg, const Tensor& param_out,
                   const LionHyper& hyper) {
  enter();
  check_f32(master), check_f32(exp_avg), check_float(grad);
  check_same_numel(master, grad), check_same_numel(master, exp_avg);
  if (param_out.defined()) check_float(param_out), check_same_numel(master, param_out);
  launch_lion(f32_ptr(master), grad.data(), grad.dtype(), f32_ptr(exp_avg),
              param_out.defined() ? param_out.data() : nullptr, param_out.dtype(), master.numel(), hyper,
              stream_);
}

double CudaOps::sum_squares(const Tensor& x) {
  enter();
  check_float(x);
  const size_t sizes[2] = {sum_squares_workspace_bytes(), sizeof(double)};
  void* buf[2];
  workspace_.carve(sizes, buf);
  auto* result = static_cast<double*>(buf[1]);
  launch_sum_squares(x.data(), x.dtype(), x.numel(), result, buf[0], stream_);
  void* host = host_result();
  ZE_CUDA_CHECK(cudaMemcpyAsync(host, result, sizeof(double), cudaMemcpyDeviceToHost, stream_));
  ZE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return *static_cast<const double*>(host);
}

int64_t CudaOps::count_nonfinite(const Tensor& x) {
  enter();
  check_float(x);
  auto* result = static_cast<unsigned long long*>(workspace_.reserve(sizeof(unsigned long long)));
  launch_count_nonfinite(x.data(), x.dtype(), x.numel(), result, stream_);
  void* host = host_result();
  ZE_CUDA_CHECK(cudaMemcpyAsync(host, result, sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                                stream_));
  ZE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return static_cast<int64_t>(*static_cast<const unsigned long long*>(host));
}

}  // namespace zero::cuda
