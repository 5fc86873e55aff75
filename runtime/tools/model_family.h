// How the programs name a model to a user: its family and shape
// ("GPT-2 n_layer=12 n_head=12 d_model=768", "Llama n_layer=4 n_head=4
// n_kv_head=2 d_model=128 d_ff=352"). zero-estimate's model line and the
// flops profiler's summary say it as zero-train's model line does, so a
// Llama is never called a GPT.
// Header-only: zero-estimate links the config library, not the tools.
#pragma once

#include <string>

#include "absl/strings/str_format.h"
#include "graph/gpt.h"

namespace zero {

// The family and the sizes that define its shape (the RoPE families: with
// their key/value heads, MLP width, head_dim when it is their own, when
// tied " tied head", and a mixture of experts' experts: "experts=8 top_k=2
// expert_d_ff=128 (0.71M of 1.84M parameters active)").
inline std::string model_family_description(const GptConfig& g) {
  if (g.rope()) {
    const std::string head_dim = g.d_head > 0 ? absl::StrFormat(" head_dim=%d", g.head_dim()) : "";
    std::string experts;
    if (const MoeConfig& m = g.moe; m.enabled()) {
      const std::string shared =
          m.shared_expert_d_ff > 0 ? absl::StrFormat(" shared_d_ff=%d", m.shared_expert_d_ff) : "";
      const std::string routing =
          m.capacity_factor > 0 ? absl::StrFormat(" capacity_factor=%g", m.capacity_factor) : " dropless";
      experts = absl::StrFormat(" experts=%d top_k=%d expert_d_ff=%d%s%s (%.3gM of %.3gM parameters active per token)",
                                m.num_experts, m.top_k, m.expert_d_ff, shared, routing,
                                static_cast<double>(g.active_parameters()) / 1e6,
                                static_cast<double>(g.num_parameters()) / 1e6);
    }
    return absl::StrFormat("%s n_layer=%d n_head=%d n_kv_head=%d d_model=%d%s d_ff=%d%s%s", model_family(g.arch).display,
                           g.n_layer, g.n_head, g.kv_heads(), g.d_model, head_dim, g.ffn_width(),
                           g.tied_head() ? " tied head" : "", experts);
  }
  return absl::StrFormat("GPT-2 n_layer=%d n_head=%d d_model=%d", g.n_layer, g.n_head, g.d_model);
}

}  // namespace zero
