// The ops of a dry run (kernels/dry_run/dry_run_backend.h): nothing is
// computed and no operand is touched, but every op that takes workspace on
// the CPU (oneDNN matmul, layer norm, GELU) carves exactly what the CPU ops
// carve for the same shapes, scratchpads included, so a dry run's workspace
// figure is the CPU run's. Host values an op returns are 0 (a zero gradient
// norm, no inf/NaN): the engine's step then takes its ordinary path.
#pragma once

#include "kernels/cpu/onednn_eltwise_norm.h"
#include "kernels/cpu/onednn_matmul.h"
#include "kernels/ops.h"
#include "kernels/workspace_arena.h"

namespace zero::cpu {

class DryRunOps final : public Ops {
 public:
  explicit DryRunOps(Backend& backend)
      : workspace_(backend), matmul_(workspace_, true), layernorm_(workspace_, true), gelu_(workspace_, true) {}

  void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                         const Tensor& mean, const Tensor& var) override {
    layernorm_.forward(x, gamma, beta, eps, y, mean, var);
  }
  void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                          const Tensor& var, float eps, const Tensor& dx, const Tensor& dgamma,
                          const Tensor& dbeta) override {
    layernorm_.backward(dy, x, gamma, mean, var, eps, dx, dgamma, dbeta);
  }
  void gelu_forward(const Tensor& x, const Tensor& y) override { gelu_.forward(x, y); }
  void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) override { gelu_.backward(x, dy, dx); }

  void rmsnorm_forward(const Tensor&, const Tensor&, float, const Tensor&, const Tensor&, bool = false) override {}
  void rmsnorm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                        bool = false) override {}
  void rope(const Tensor&, const Tensor&, const RopeFreqs&, int64_t, bool) override {}
  void swiglu_forward(const Tensor&, const Tensor&, const Tensor&) override {}
  void swiglu_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) override {}
  void geglu_forward(const Tensor&, const Tensor&, const Tensor&) override {}
  void geglu_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) override {}
  void glu_rows_forward(Glu, const Tensor&, const Tensor&) override {}
  void glu_rows_backward(Glu, const Tensor&, const Tensor&, const Tensor&) override {}
  void moe_router_forward(const Tensor&, int64_t, bool, const Tensor&, const Tensor&, const Tensor&,
                          const Tensor&) override {}
  void moe_router_backward(const Tensor&, const Tensor&, const Tensor&, bool, const Tensor&, float, const Tensor&,
                           const Tensor&) override {}
  void gather_rows(const Tensor&, const Tensor&, const Tensor&) override {}
  void scatter_add_rows(const Tensor&, const Tensor&, const Tensor&) override {}
  void moe_combine(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) override {}
  void moe_combine_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                            const Tensor&) override {}
  void sigmoid_gate_forward(const Tensor&, const Tensor&, const Tensor&) override {}
  void sigmoid_gate_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) override {}
  void softcap_forward(const Tensor&, float, const Tensor&) override {}
  void softcap_backward(const Tensor&, const Tensor&, float, const Tensor&) override {}
  void causal_softmax_forward(const Tensor&, const Tensor&) override {}
  void causal_softmax_backward(const Tensor&, const Tensor&, const Tensor&) override {}
  void split_qkv(const Tensor&, const Tensor&, const Tensor&, const Tensor&) override {}
  void merge_qkv(const Tensor&, const Tensor&, const Tensor&, const Tensor&) override {}
  void transpose12(const Tensor&, const Tensor&) override {}
  void embedding_forward(const Tensor&, const Tensor&, const Tensor&) override {}
  void embedding_backward(const Tensor&, const Tensor&, const Tensor&) override {}
  void embedding_slice_forward(const Tensor&, int64_t, const Tensor&, const Tensor&) override {}
  void embedding_slice_backward(const Tensor&, int64_t, const Tensor&, const Tensor&) override {}
  void add_positional(const Tensor&, const Tensor&) override {}
  void positional_backward(const Tensor&, const Tensor&) override {}
  void add(const Tensor&, const Tensor&, const Tensor&) override {}
  void accumulate(const Tensor&, const Tensor&) override {}
  void bias_backward(const Tensor&, const Tensor&) override {}
  void scale(const Tensor&, float) override {}
  void fill(const Tensor&, float) override {}
  void cast(const Tensor&, const Tensor&) override {}
  void dropout(const Tensor&, const Tensor&, float, const DropoutKey&) override {}
  void cross_entropy(const Tensor&, const Tensor&, float, const Tensor&) override {}
  void row_max(const Tensor&, const Tensor&) override {}
  void cross_entropy_slice_exp(const Tensor&, const Tensor&, int64_t, const Tensor&, const Tensor&) override {}
  void cross_entropy_slice_finish(const Tensor&, const Tensor&, int64_t, const Tensor&, const Tensor&, float,
                                  const Tensor&) override {}
  void adamw(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
             const AdamWHyper&) override {}
  bool adamw_takes_narrow_master() const override { return true; }  // as the CPU ops: no staging to carve
  void sgd(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const SgdHyper&) override {}
  void lion(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const LionHyper&) override {}
  double sum_squares(const Tensor&) override { return 0.0; }
  int64_t count_nonfinite(const Tensor&) override { return 0; }

 protected:
  void run_matmul(const Tensor& a, const Tensor& b, const Tensor& c, const MatmulSpec& spec,
                  const Tensor& bias) override {
    matmul_.run(a, b, c, spec, bias);
  }

 private:
  WorkspaceArena workspace_;
  OneDnnMatmul matmul_;
  OneDnnLayerNorm layernorm_;
  OneDnnGelu gelu_;
};

}  // namespace zero::cpu
