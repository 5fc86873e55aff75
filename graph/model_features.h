// A decoder's features as flags, as Megatron's TransformerConfig has them:
// the norm and its (1 + w) form, a bias per projection, the MLP's activation
// and gating, q/k norms, the embedding scale, learned positions or RoPE, the
// tied head, the parameter names. A family (ModelArch: "gpt2", "llama",
// "mistral", "qwen2", "qwen3", "gemma") is a name for one row of
// kModelFamilies; the layers read the flags, never the family. The sizes
// (head_dim, norm eps, RoPE base, ...) are GptConfig's fields.
#pragma once

#include <string_view>

#include "core/check.h"

namespace zero {

enum class ModelArch { kGpt2, kLlama, kMistral, kQwen2, kQwen3, kGemma, kMixtral, kQwen2Moe, kQwen3Moe };

enum class NormKind { kLayerNorm, kRmsNorm };

// The MLP: c_fc, GELU (tanh form), c_proj; or the gated down(act(gate) * up)
// with SiLU (SwiGLU) or the tanh GELU (GeGLU).
enum class MlpKind { kGelu, kSwiGlu, kGeGlu };

struct ModelFeatures {
  NormKind norm = NormKind::kLayerNorm;  // LayerNorm (eps 1e-5, with bias) or RMSNorm (GptConfig::norm_eps)
  bool norm_unit_offset = false;   // RMSNorm scales by (1 + w); w is stored and starts at 0 (Gemma)
  bool learned_positions = true;   // a position table (GPT-2); otherwise RoPE on q and k
  bool fused_qkv = true;           // one c_attn [3 H D, C] (GPT-2); otherwise q_proj, k_proj, v_proj
  bool qkv_bias = true;            // biases on the q, k and v projections
  bool o_bias = true;              // a bias on the attention's output projection
  bool mlp_bias = true;            // biases on the MLP's projections
  MlpKind mlp = MlpKind::kGelu;
  bool qk_norm = false;            // RMSNorm over each q and k head (weight [head_dim]) before RoPE (Qwen3)
  bool embed_scale = false;        // token embeddings times sqrt(d_model), in the model dtype (Gemma)
  bool head_always_tied = true;    // the LM head is the token table whatever tie_word_embeddings says (GPT-2)
  bool gpt2_init = true;           // N(0, 0.02), residual projections / sqrt(2 n_layer); else N(0, init_std)
  bool gpt2_names = true;          // GPT-2's names (wte, h.i.attn.c_attn, ...); else Hugging Face Llama's
};

struct ModelFamily {
  ModelArch arch;
  std::string_view name;     // model.arch's value and Hugging Face's model_type
  std::string_view display;  // in what the programs print ("Llama n_layer=...")
  ModelFeatures features;
};

namespace family_detail {
// The Llama family's features; the others are Llama with a few flags changed.
constexpr ModelFeatures llama() {
  ModelFeatures f;
  f.norm = NormKind::kRmsNorm;
  f.learned_positions = f.fused_qkv = false;
  f.qkv_bias = f.o_bias = f.mlp_bias = false;
  f.mlp = MlpKind::kSwiGlu;
  f.head_always_tied = f.gpt2_init = f.gpt2_names = false;
  return f;
}
constexpr ModelFeatures qwen2() {
  ModelFeatures f = llama();
  f.qkv_bias = true;
  return f;
}
constexpr ModelFeatures qwen3() {
  ModelFeatures f = llama();
  f.qk_norm = true;
  return f;
}
constexpr ModelFeatures gemma() {
  ModelFeatures f = llama();
  f.norm_unit_offset = true;
  f.mlp = MlpKind::kGeGlu;
  f.embed_scale = true;
  return f;
}
}  // namespace family_detail

inline constexpr ModelFamily kModelFamilies[] = {
    {ModelArch::kGpt2, "gpt2", "GPT-2", ModelFeatures{}},
    {ModelArch::kLlama, "llama", "Llama", family_detail::llama()},
    {ModelArch::kMistral, "mistral", "Mistral", family_detail::llama()},  // Llama's layers (no sliding window here)
    {ModelArch::kQwen2, "qwen2", "Qwen2", family_detail::qwen2()},
    {ModelArch::kQwen3, "qwen3", "Qwen3", family_detail::qwen3()},
    {ModelArch::kGemma, "gemma", "Gemma", family_detail::gemma()},
    // Mixtures of experts (GptConfig::moe, graph/moe.h): the attention of
    // Mistral, Qwen2 and Qwen3, sparse MLPs.
    {ModelArch::kMixtral, "mixtral", "Mixtral", family_detail::llama()},
    {ModelArch::kQwen2Moe, "qwen2_moe", "Qwen2-MoE", family_detail::qwen2()},
    {ModelArch::kQwen3Moe, "qwen3_moe", "Qwen3-MoE", family_detail::qwen3()},
};

// The families whose blocks hold mixtures of experts (GptConfig::moe).
constexpr bool is_mixture_of_experts(ModelArch arch) {
  return arch == ModelArch::kMixtral || arch == ModelArch::kQwen2Moe || arch == ModelArch::kQwen3Moe;
}

inline const ModelFamily& model_family(ModelArch arch) {
  for (const ModelFamily& f : kModelFamilies)
    if (f.arch == arch) return f;
  ZE_CHECK(false) << "model family " << static_cast<int>(arch) << " has no row in kModelFamilies";
  return kModelFamilies[0];
}

}  // namespace zero
