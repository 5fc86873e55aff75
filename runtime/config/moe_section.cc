// The model section's mixture-of-experts keys and rules; see moe_section.h.
#include "runtime/config/moe_section.h"

#include "absl/strings/strip.h"
#include "core/strings.h"
#include "graph/moe.h"
#include "runtime/config/config_key_builders.h"
#include "runtime/config/config_schema.h"
#include "runtime/config/model_limits.h"

namespace zero {

void check_moe_model(ConfigReader& r, GptConfig& g, int64_t ep_size) {
  if (is_mixture_of_experts(g.arch) && !g.moe.enabled() && r.diagnostics().errors.empty()) {
    r.error("num_experts", cat("the ", model_family(g.arch).display, " family is a mixture of experts: set "
                               "model.num_experts (and num_experts_per_tok, moe_intermediate_size)"));
  }
  if (absl::Status s = check_expert_parallel(g.moe, static_cast<int>(ep_size)); !s.ok()) {
    r.error("ep_size", std::string(absl::StripPrefix(s.message(), "model.ep_size: ")));
  }
  if (!g.moe.enabled() || !r.diagnostics().errors.empty()) return;
  if (g.moe.expert_d_ff == 0) g.moe.expert_d_ff = g.ffn_width();  // Mixtral's: d_ff
  if (absl::Status s = check_gpt_split(g, 1, false); !s.ok()) r.diagnostics().errors.emplace_back(s.message());
}

namespace config_keys {

std::vector<ConfigKey> moe_keys() {
  std::vector<ConfigKey> k;
  k.push_back(integer(kExpertLimit.key, ZE_FIELD(model.gpt.moe.num_experts), kExpertLimit.min, kExpertLimit.max,
                      "RoPE families with SwiGLU: experts per sparse block (Mixtral's num_local_experts, Qwen-MoE's "
                      "num_experts; 0: every MLP dense)"));
  k.push_back(integer("model.num_experts_per_tok", ZE_FIELD(model.gpt.moe.top_k), 1, 1 << 16,
                      "the experts each token is routed to (top-k of the router's softmax)"));
  k.push_back(integer("model.moe_intermediate_size", ZE_FIELD(model.gpt.moe.expert_d_ff), 0, int64_t{1} << 20,
                      "an expert's SwiGLU width (0: d_ff, as Mixtral's experts are intermediate_size wide)"));
  k.push_back(boolean("model.norm_topk_prob", ZE_FIELD(model.gpt.moe.norm_topk_prob),
                      "divide the k chosen probabilities by their sum (Mixtral: always)"));
  k.push_back(integer("model.shared_expert_intermediate_size", ZE_FIELD(model.gpt.moe.shared_expert_d_ff), 0,
                      int64_t{1} << 20,
                      "Qwen2-MoE's shared expert (every token, gated by sigmoid(shared_expert_gate x)); 0: none"));
  k.push_back(integer("model.decoder_sparse_step", ZE_FIELD(model.gpt.moe.decoder_sparse_step), 1, 1 << 16,
                      "block i is sparse when (i + 1) % decoder_sparse_step == 0 (Qwen-MoE's; 1: every block)"));
  k.push_back(number("model.router_aux_loss_coef", ZE_FIELD(model.gpt.moe.aux_loss_coef), kNonNegative,
                     "the load-balancing loss's weight in the loss (Switch Transformer's; 0: none)"));
  k.push_back(choice("model.aux_loss_scope", ZE_FIELD(model.gpt.moe.aux_loss_scope),
                     {{"global", AuxLossScope::kGlobal}, {"per_layer", AuxLossScope::kPerLayer}},
                     "\"global\": one load-balancing loss over every sparse block's tokens at once (transformers' "
                     "load_balancing_loss_func); \"per_layer\": one per block, summed (Megatron, DeepSpeed-MoE)"));
  k.push_back(number("model.router_z_loss_coef", ZE_FIELD(model.gpt.moe.z_loss_coef), kNonNegative,
                     "ST-MoE's router z-loss weight: mean over tokens of logsumexp(router logits)^2 per block, "
                     "summed (0: none)"));
  k.push_back(number("model.capacity_factor", ZE_FIELD(model.gpt.moe.capacity_factor), kNonNegative,
                     "DeepSpeed-MoE's token dropping: each expert takes at most max(min_capacity, ceil(k tokens / "
                     "experts x capacity_factor)) of a micro-batch's choices, first choices first, and drops the "
                     "rest (0: dropless, Mixtral's and Megatron's default)"));
  k.push_back(integer("model.ep_size", ZE_FIELD(ep_size), 1, 1 << 16,
                      "expert parallelism (DeepSpeed-MoE's ep_size): the experts split over groups of this many "
                      "data-parallel ranks, tokens exchanged all-to-all; must divide num_experts and the data-parallel "
                      "ranks (1: every rank holds every expert)"));
  k.push_back(integer("model.min_capacity", ZE_FIELD(model.gpt.moe.min_capacity), 0, int64_t{1} << 30,
                      "the capacity's floor (DeepSpeed-MoE's min_capacity)"));
  return k;
}

}  // namespace config_keys

}  // namespace zero
