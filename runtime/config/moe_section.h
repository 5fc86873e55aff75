// The mixture-of-experts keys of the model section (graph/moe.h), named as
// Hugging Face's Mixtral and Qwen-MoE configs name them (the architecture:
// num_experts, num_experts_per_tok, moe_intermediate_size, norm_topk_prob,
// shared_expert_intermediate_size, decoder_sparse_step, router_aux_loss_coef)
// and as DeepSpeed-MoE and ST-MoE name the training choices
// (capacity_factor, min_capacity, router_z_loss_coef; aux_loss_scope picks
// transformers' or Megatron's load-balancing loss). Declared in
// moe_section.cc (moe_keys(), config_key_builders.h); the rules:
//  * a family of experts (mixtral, qwen2_moe, qwen3_moe) needs num_experts;
//  * moe_intermediate_size 0 is d_ff (Mixtral's experts are
//    intermediate_size wide);
//  * the experts' split rules (graph/gpt.h check_gpt_split: a SwiGLU family,
//    1 <= num_experts_per_tok <= num_experts, ...), each error naming its key;
//  * ep_size (DeepSpeed-MoE's name; Megatron's expert_model_parallel_size)
//    > 1 splits the experts over that many data-parallel ranks: it needs
//    experts, and must divide num_experts (graph/moe.h
//    check_expert_parallel) and the data-parallel ranks (the mesh section).
#pragma once

#include "graph/gpt.h"
#include "runtime/config/config_reader.h"

namespace zero {

// The rules above, on the model section `r` once the architecture is read.
void check_moe_model(ConfigReader& r, GptConfig& g, int64_t ep_size);

}  // namespace zero
