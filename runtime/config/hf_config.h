// Hugging Face's description of a model, both ways: a config.json read into
// a GptConfig (refusing what our layers do not compute, by key and value),
// the GptConfig written back as the config.json transformers loads, and our
// parameter names mapped to the tensor names of its checkpoints.
//
// Supported: model_type "gpt2" (GPT2LMHeadModel), "llama" (LlamaForCausalLM),
// "mistral" without sliding-window attention, "qwen2", "qwen3" and "gemma"
// (Qwen2/Qwen3/GemmaForCausalLM); each family with RoPE is one row of a
// table (hf_config.cc's kHfFamilies: its class, its keys' defaults, its
// activation, how it asks for biases and sliding windows), its layers'
// features graph/model_features.h's. Tensor names are ours with Hugging
// Face's prefix: "transformer." (GPT-2), "model." (the others; an untied
// "lm_head.weight" has none). GPT-2's Conv1D weights (attn.c_attn,
// attn.c_proj, mlp.c_fc, mlp.c_proj) are stored [in, out], transposed from
// our Linear's [out, in]; the others' are not.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "graph/gpt.h"
#include "runtime/config/json_file.h"

namespace zero {

// config.json -> GptConfig. seq_len = max_positions (the caller may lower
// it); dropout 0. INVALID_ARGUMENT naming `path`, the key and its value for a
// model_type or a setting we do not implement, or a value out of range (a
// size past the model section's limit for the same field, model_limits.h).
// Reads what transformers 4.x writes (top-level "rope_theta" and
// "rope_scaling", "torch_dtype") and what 5.x writes ("rope_parameters":
// {"rope_theta", "rope_type", "factor", ...}, "dtype", an explicit
// "head_dim"); a file holding both forms must say the same in each
// (INVALID_ARGUMENT naming both otherwise).
absl::StatusOr<GptConfig> gpt_config_from_hf(const Json& hf, const std::string& path);

// GptConfig -> the config.json transformers needs to load the model, of the
// family's model_type and class, with torch_dtype "float32" or "bfloat16"
// (`dtype`). Written in transformers
// 4.x's form ("torch_dtype", "rope_theta", "rope_scaling"), which 4.x and
// 5.x both load (5.x converts it to its "rope_parameters"); 4.x would
// ignore 5.x's "rope_parameters" and run plain RoPE of theta 10000.
Json hf_config_json(const GptConfig& c, DType dtype);
// The same, keeping what `source` (the config.json the model was read from)
// says beyond the architecture, as transformers' save_pretrained would: its
// bos/eos/pad token ids (even where the family's own form writes null),
// transformers_version, use_cache and the like. The architecture keys are
// ours (they describe the same model: `source` read as `c`); its 5.x
// "rope_parameters" gives way to our 4.x "rope_theta"/"rope_scaling", and
// both "torch_dtype" and a 5.x "dtype" say `dtype`. A null `source`: the
// plain form above.
Json hf_config_json(const GptConfig& c, DType dtype, const Json& source);

// The first key of hf_config_json on which two models differ, as
// "num_hidden_layers 2 vs 4" ("" when they are the same model): how a
// checkpoint's model and a run's config are compared. What only training
// sets (seq_len, dropout, initializer_range) is not compared, nor the
// positions of two RoPE models (no weight depends on them).
std::string hf_model_difference(const GptConfig& a, const GptConfig& b);

// Our parameter name -> Hugging Face's tensor name ("h.0.ln_1.weight" ->
// "transformer.h.0.ln_1.weight").
std::string hf_tensor_name(const GptConfig& c, const std::string& ours);
// The inverse, also accepting names without the prefix (GPT-2's hub files
// store GPT2Model's names; our own older exports store ours): the prefix is
// removed when present.
std::string ours_from_hf_tensor_name(const GptConfig& c, const std::string& hf);
// True when Hugging Face stores the tensor transposed ([in, out]): GPT-2's Conv1D weights.
bool hf_stores_transposed(const GptConfig& c, const std::string& ours);
// True for GPT-2's four Conv1D weights of a block, by name.
bool is_gpt2_conv1d_weight(const std::string& name);

// The whole model's parameters for `c` (our names, unsplit shapes [out, in]),
// in the model's order; the tied head is not one of them.
std::vector<std::pair<std::string, Shape>> gpt_parameter_shapes(const GptConfig& c);

}  // namespace zero
