// Mixture of experts: the sparse MLP of Mixtral, Qwen2-MoE and Qwen3-MoE
// (and DeepSpeed-MoE's capacity-bounded form), in place of a block's dense
// MLP.
//
// For x [B, T, C], N = B T tokens, E experts, k per token:
//   logits = gate(x) [N, E]  (the router, a Linear without bias: "mlp.gate")
//   p = softmax(logits) (fp32); the k largest p of each token are its experts,
//       their p its weights, divided by their sum when norm_topk_prob
//       (Mixtral always; Qwen-MoE as its config says)
//   dispatch: each expert's tokens gathered into rows [n_e, C] (token order,
//       first choices before second ones); with a capacity (capacity_factor
//       > 0, DeepSpeed-MoE's), an expert keeps at most
//       max(min_capacity, ceil(k N / E * capacity_factor)) and the rest of
//       its (token, choice) pairs are dropped: they add nothing and their
//       weights get no gradient (Megatron's drop, no re-normalisation)
//   y = sum over a token's kept choices of weight * expert(x) (each expert
//       the gated MLP, SwiGLU, of moe_intermediate_size: "mlp.experts.<e>")
//   plus, with a shared expert (Qwen2-MoE), sigmoid(shared_expert_gate(x))
//       * shared_expert(x)
// Every expert is called on every micro-batch, with one row of zeros when no
// token chose it (its weights then get exact zeros), so every rank runs the
// same module calls, and so the same ZeRO gathers and reductions, whatever
// its tokens chose.
//
// Expert parallelism (DeepSpeed-MoE's, over an expert group of P ranks, the
// mesh's ep axis): rank r holds experts [r E/P, (r + 1) E/P), named by their
// global index ("experts.<e>"). Each rank routes its own tokens; the ranks
// exchange the per-expert row counts (all-to-all), then the rows
// (all-to-all-v: each rank's rows for an owner are one block, expert after
// expert); each owner runs its experts on what it received from every rank
// (a row of zeros when none came) and sends the outputs back the same way,
// where they are combined. Backward runs the two exchanges in reverse
// (graph/collective_ops.h's exchange_rows). The router, the attention and
// the norms stay whole on every rank; the aux losses are each rank's own
// tokens' (as DeepSpeed computes them per rank).
//
// The routers' auxiliary losses (MoeLosses): the load-balancing loss of
// Switch Transformer as transformers computes it (load_balancing_loss_func:
// E * sum_e f_e P_e, f_e the share of top-k choices that went to e and P_e
// the mean probability of e, both over the tokens of every MoE layer at
// once: aux_loss_scope "global"), or per layer and summed (Megatron's and
// DeepSpeed's: "per_layer"), times router_aux_loss_coef; and ST-MoE's router
// z-loss, the mean over tokens of logsumexp(logits)^2 per layer, summed,
// times router_z_loss_coef. Their gradients enter at each router's backward
// (treating f as constant, as the papers and transformers do), scaled as
// the cross-entropy's gradient is (loss scale, accumulation steps).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "graph/module.h"

namespace zero {

struct BlockConfig;
struct DispatchPlan;
class Communicator;

enum class AuxLossScope { kGlobal, kPerLayer };

struct MoeConfig {
  int64_t num_experts = 0;        // 0: every MLP dense
  int64_t top_k = 2;              // num_experts_per_tok
  int64_t expert_d_ff = 0;        // moe_intermediate_size (Mixtral: intermediate_size)
  bool norm_topk_prob = true;     // renormalise the k weights to sum to 1
  int64_t shared_expert_d_ff = 0; // Qwen2-MoE's shared_expert_intermediate_size; 0: none
  float aux_loss_coef = 0.0f;     // router_aux_loss_coef
  AuxLossScope aux_loss_scope = AuxLossScope::kGlobal;
  float z_loss_coef = 0.0f;       // router_z_loss_coef
  double capacity_factor = 0.0;   // 0: dropless; else DeepSpeed-MoE's capacity per expert
  int64_t min_capacity = 4;       // the capacity's floor (DeepSpeed-MoE's min_capacity)
  // Which blocks are sparse (Qwen-MoE's): block i when (i + 1) % decoder_sparse_step == 0
  // and i is not in mlp_only_layers; the others keep the dense MLP of d_ff.
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;

  bool enabled() const { return num_experts > 0; }
  bool sparse_layer(int64_t layer) const;
  // The capacity of each expert for `tokens` tokens; 0: unbounded.
  int64_t capacity(int64_t tokens) const;
};

// One sparse layer's routing in one training forward, and what its
// router's backward adds for the auxiliary losses (set by MoeLosses::finish).
struct MoeRouting {
  int64_t layer = 0;
  std::vector<double> choices, prob_sum;  // per expert: top-k choices (kept or not), probabilities summed
  int64_t rows = 0;
  double lse_sq_sum = 0;  // the sum over rows of logsumexp(logits)^2
  int64_t dropped = 0;    // choices a capacity dropped
  // The gradient each expert's probability gets in every row (the
  // load-balancing loss's; empty: none) and the z-loss's factor (ops.h
  // moe_router_backward's z_scale).
  std::vector<float> prob_gradient;
  float z_scale = 0.0f;
};

// The auxiliary losses of one model's MoE layers. Each training forward
// adds its layers' routings (not a recompute's, not an evaluation's);
// finish() turns those added since the last call (one micro-batch's, or
// with pipeline stages one stage's part of it) into the loss and sets the
// gradient factors their routers' backward reads. A routing is kept per
// forward pass (the Context that ran it): a recompute inside backward finds
// its own micro-batch's, even with several micro-batches in flight (a
// pipeline schedule).
class MoeLosses {
 public:
  MoeLosses(const MoeConfig& config) : config_(config) {}

  // Layer `layer`'s routing in the forward pass `pass` (its Context): `rows`
  // tokens, the top-k choices per expert (kept or not), the sum of each
  // expert's probability, the sum of lse^2, and how many choices its
  // capacity dropped. Replaces what an earlier forward of `pass` added.
  std::shared_ptr<const MoeRouting> add(const void* pass, int64_t layer, std::vector<double> choices,
                                        std::vector<double> prob_sum, int64_t rows, double lse_sq_sum,
                                        int64_t dropped = 0);
  // What `pass`'s last forward added for `layer` (a recompute's routing is
  // the first pass's); nullptr: nothing.
  std::shared_ptr<const MoeRouting> find(const void* pass, int64_t layer) const;
  // Drops what a forward added without reaching finish() (a forward that
  // failed): the engine calls it before each training forward.
  void discard_pending() { pending_.clear(); }
  // The weighted auxiliary losses of what was added since the last call
  // (aux_coef * aux + z_coef * z), and the gradients backward adds, times
  // grad_scale (the factor the cross-entropy's mean gradient carries: the
  // loss scale over the accumulation steps). 0 without MoE.
  double finish(double grad_scale);

  // The last finish()'s load-balancing loss (unweighted), z-loss
  // (unweighted), the choices capacities dropped (all layers) and, per layer,
  // the top-k choices each expert received.
  double last_aux_loss() const { return last_aux_; }
  double last_z_loss() const { return last_z_; }
  int64_t last_dropped() const { return last_dropped_; }
  const std::vector<std::pair<int64_t, std::vector<double>>>& last_choices() const { return last_choices_; }

 private:
  MoeConfig config_;
  std::vector<std::shared_ptr<MoeRouting>> pending_;
  std::map<std::pair<const void*, int64_t>, std::shared_ptr<MoeRouting>> by_pass_;
  double last_aux_ = 0, last_z_ = 0;
  int64_t last_dropped_ = 0;
  std::vector<std::pair<int64_t, std::vector<double>>> last_choices_;
};

// The sparse MLP of block `layer` (see the top of this file), named "mlp":
// children "gate" (the router), "experts.<e>" (gated MLPs, graph/transformer.h's
// Mlp) and, with a shared expert, "shared_expert" and "shared_expert_gate".
class MoeMlp : public Module {
 public:
  MoeMlp(std::string name, const BlockConfig& config, int64_t layer);
  Tensor forward(Context& ctx, const Tensor& x) override;
  // The expert group the experts split over (nullptr: every expert here).
  Communicator* expert_group() const { return expert_group_; }
  // The parameters of the experts this rank holds (not the router's, not
  // the shared expert's): what expert parallelism shards apart.
  std::vector<Parameter*> expert_parameters() const;

 private:
  // Dispatch, the experts and combine: every expert here, or (expert
  // parallelism) the tokens exchanged with the experts' owners.
  Tensor local_experts(Context& ctx, const Tensor& xf, const DispatchPlan& plan, const Tensor& weights);
  Tensor exchanged_experts(Context& ctx, const Tensor& xf, const DispatchPlan& plan, const Tensor& weights);

  MoeConfig moe_;
  int64_t layer_;
  MoeLosses* losses_;
  Module* gate_;
  std::vector<Module*> experts_;
  Module* shared_expert_ = nullptr;
  Module* shared_expert_gate_ = nullptr;
  Communicator* expert_group_ = nullptr;  // expert parallelism over > 1 ranks
};

// `stages` pipeline stages for `moe`: INVALID_ARGUMENT naming
// pipeline.stages and model.aux_loss_scope when the load-balancing loss is
// "global" (transformers' form couples every sparse layer of a micro-batch,
// and a stage's backward would need the later stages' routing).
absl::Status check_moe_pipeline(const MoeConfig& moe, int stages);

// Expert parallelism of `ep` ranks for `moe`: INVALID_ARGUMENT naming
// model.ep_size when the model has no experts or ep does not divide them.
absl::Status check_expert_parallel(const MoeConfig& moe, int ep);

}  // namespace zero
