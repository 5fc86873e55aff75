// The CUDA implementation of the Ops interface: cuBLAS for GEMMs (gemm.h),
// our kernels (cuda_kernels.h) for everything else. CudaOps checks shapes,
// dtypes and tiers (every operand must be device memory), carves scratch out
// of its WorkspaceArena and launches on the backend's compute stream.
//
// Every op is asynchronous and returns once its kernels are enqueued, except
// sum_squares and count_nonfinite, which copy their result into a pinned host
// word and wait for the compute stream. Gradient outputs (d<param>) are
// accumulated without atomics, so every op gives the same bits on every run
// for the same inputs (cuBLAS is deterministic on one stream with a fixed
// workspace, which CublasGemm gives it).
//
// Ops may be called from any host thread, one at a time (they share the
// workspace and the cuBLAS handle); each call makes the backend's device
// current first.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/workspace_arena.h"
#include "kernels/cuda/gemm.h"
#include "kernels/ops.h"

namespace zero {
class Backend;
}

namespace zero::cuda {

class CudaOps final : public Ops {
 public:
  // Creates the cuBLAS handle bound to `compute_stream` on `device`. `backend`
  // serves the device tier (workspace) and the host tier (pinned result words)
  // and outlives the returned object.
  static absl::StatusOr<std::unique_ptr<CudaOps>> create(Backend& backend, int device,
                                                         cudaStream_t compute_stream);
  ~CudaOps() override;
  CudaOps(const CudaOps&) = delete;
  CudaOps& operator=(const CudaOps&) = delete;

  void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                         const Tensor& y, const Tensor& mean, const Tensor& var) override;
  void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                          const Tensor& mean, const Tensor& var, float eps, const Tensor& dx,
                          const Tensor& dgamma, const Tensor& dbeta) override;
  void rmsnorm_forward(const Tensor& x, const Tensor& gamma, float eps, const Tensor& y, const Tensor& rstd,
                       bool unit_offset = false) override;
  void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& rstd,
                        const Tensor& dx, const Tensor& dgamma, bool unit_offset = false) override;
  void rope(const Tensor& x, const Tensor& y, const RopeFreqs& freqs, int64_t first_position,
            bool inverse) override;
  void swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& h) override;
  void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dh, const Tensor& dgate,
                       const Tensor& dup) override;
  void geglu_forward(const Tensor& gate, const Tensor& up, const Tensor& h) override;
  void geglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dh, const Tensor& dgate,
                      const Tensor& dup) override;
  void moe_router_forward(const Tensor& logits, int64_t k, bool renormalize, const Tensor& probs,
                          const Tensor& indices, const Tensor& weights, const Tensor& lse) override;
  void moe_router_backward(const Tensor& probs, const Tensor& indices, const Tensor& dweights, bool renormalize,
                           const Tensor& dprobs_extra, float z_scale, const Tensor& lse,
                           const Tensor& dlogits) override;
  void gather_rows(const Tensor& x, const Tensor& rows, const Tensor& out) override;
  void scatter_add_rows(const Tensor& dy, const Tensor& rows, const Tensor& dx) override;
  void moe_combine(const Tensor& h, const Tensor& rows, const Tensor& slots, const Tensor& weights,
                   const Tensor& y) override;
  void moe_combine_backward(const Tensor& dy, const Tensor& h, const Tensor& rows, const Tensor& slots,
                            const Tensor& weights, const Tensor& dh, const Tensor& dweights) override;
  void sigmoid_gate_forward(const Tensor& g, const Tensor& x, const Tensor& y) override;
  void sigmoid_gate_backward(const Tensor& g, const Tensor& x, const Tensor& dy, const Tensor& dg,
                             const Tensor& dx) override;
  void glu_rows_forward(Glu kind, const Tensor& gate_up, const Tensor& h) override;
  void glu_rows_backward(Glu kind, const Tensor& gate_up, const Tensor& dh, const Tensor& dgate_up) override;
  void softcap_forward(const Tensor& x, float cap, const Tensor& y) override;
  void softcap_backward(const Tensor& y, const Tensor& dy, float cap, const Tensor& dx) override;
  void gelu_forward(const Tensor& x, const Tensor& y) override;
  void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) override;
  void causal_softmax_forward(const Tensor& scores, const Tensor& probs) override;
  void causal_softmax_backward(const Tensor& probs, const Tensor& dprobs,
                               const Tensor& dscores) override;
  void split_qkv(const Tensor& qkv, const Tensor& q, const Tensor& k, const Tensor& v) override;
  void merge_qkv(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dqkv) override;
  void transpose12(const Tensor& src, const Tensor& dst) override;
  void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out) override;
  void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable) override;
  void embedding_slice_forward(const Tensor& ids, int64_t first, const Tensor& table, const Tensor& out) override;
  void embedding_slice_backward(const Tensor& ids, int64_t first, const Tensor& dout, const Tensor& dtable) override;
  void add_positional(const Tensor& x, const Tensor& table) override;
  void positional_backward(const Tensor& dy, const Tensor& dtable) override;
  void add(const Tensor& a, const Tensor& b, const Tensor& out) override;
  void accumulate(const Tensor& dst, const Tensor& src) override;
  void bias_backward(const Tensor& dy, const Tensor& dbias) override;
  void scale(const Tensor& x, float s) override;
  void fill(const Tensor& x, float v) override;
  void cast(const Tensor& src, const Tensor& dst) override;
  void dropout(const Tensor& x, const Tensor& y, float p, const DropoutKey& key) override;
  void cross_entropy(const Tensor& logits, const Tensor& targets, float grad_scale,
                     const Tensor& losses) override;
  void row_max(const Tensor& x, const Tensor& max) override;
  void cross_entropy_slice_exp(const Tensor& logits, const Tensor& targets, int64_t first, const Tensor& max,
                               const Tensor& sums) override;
  void cross_entropy_slice_finish(const Tensor& probs, const Tensor& targets, int64_t first, const Tensor& max,
                                  const Tensor& sums, float grad_scale, const Tensor& losses) override;
  void adamw(const Tensor& master, const Tensor& grad, const Tensor& m, const Tensor& v,
             const Tensor& param_out, const AdamWHyper& hyper) override;
  void sgd(const Tensor& master, const Tensor& grad, const Tensor& momentum_buf,
           const Tensor& param_out, const SgdHyper& hyper) override;
  void lion(const Tensor& master, const Tensor& grad, const Tensor& exp_avg, const Tensor& param_out,
            const LionHyper& hyper) override;
  double sum_squares(const Tensor& x) override;
  int64_t count_nonfinite(const Tensor& x) override;

  cudaStream_t stream() const { return stream_; }

 protected:
  void run_matmul(const Tensor& a, const Tensor& b, const Tensor& c, const MatmulSpec& spec,
                  const Tensor& bias) override;

 private:
  CudaOps(Backend& backend, int device, cudaStream_t stream, cublasHandle_t cublas);

  // Makes the device current on the calling thread.
  void enter() const;
  // A pinned host word the waiting reductions copy their result into.
  void* host_result();
  // The embedding's lookup and gradient scatter, whole table or vocabulary slice.
  void embedding_lookup(const Tensor& ids, int64_t first, bool sliced, const Tensor& table, const Tensor& out);
  void embedding_scatter(const Tensor& ids, int64_t first, bool sliced, const Tensor& dout, const Tensor& dtable);

  Backend& backend_;
  const int device_;
  const cudaStream_t stream_;
  cublasHandle_t cublas_;
  WorkspaceArena workspace_;
  CublasGemm gemm_;
  std::shared_ptr<Storage> host_result_;
};

}  // namespace zero::cuda
