// The CPU implementation of the Ops interface: oneDNN for GEMMs, layer norm
// and GELU; our SIMD kernels (simd_kernels.h) for everything else. Ops run on
// the calling thread (the CPU backend's compute stream) using the OpenMP pool.
#pragma once

#include "kernels/cpu/onednn_eltwise_norm.h"
#include "kernels/cpu/onednn_matmul.h"
#include "kernels/cpu/simd_kernels.h"
#include "kernels/workspace_arena.h"
#include "kernels/ops.h"

namespace zero {
class Backend;
}

namespace zero::cpu {

class CpuOps final : public Ops {
 public:
  explicit CpuOps(Backend& backend);

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
  void glu_rows_forward(Glu kind, const Tensor& gate_up, const Tensor& h) override;
  void glu_rows_backward(Glu kind, const Tensor& gate_up, const Tensor& dh, const Tensor& dgate_up) override;
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
  bool adamw_takes_narrow_master() const override { return true; }
  void sgd(const Tensor& master, const Tensor& grad, const Tensor& momentum_buf,
           const Tensor& param_out, const SgdHyper& hyper) override;
  void lion(const Tensor& master, const Tensor& grad, const Tensor& exp_avg, const Tensor& param_out,
            const LionHyper& hyper) override;
  double sum_squares(const Tensor& x) override;
  int64_t count_nonfinite(const Tensor& x) override;

  const SimdKernels& simd() const { return simd_; }

 protected:
  void run_matmul(const Tensor& a, const Tensor& b, const Tensor& c, const MatmulSpec& spec,
                  const Tensor& bias) override;

 private:
  const SimdKernels& simd_;
  WorkspaceArena workspace_;
  OneDnnMatmul matmul_;
  OneDnnLayerNorm layernorm_;
  OneDnnGelu gelu_;
};

}  // namespace zero::cpu
