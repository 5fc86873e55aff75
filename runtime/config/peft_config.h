// PEFT's adapter_config.json both ways, for LoRA (graph/lora.h): read into a
// LoraConfig (refusing by key what our adapters do not compute: another
// peft_type, DoRA, biases, per-layer ranks, saved modules, a regular
// expression for target_modules), and written from one as
// PeftModel.save_pretrained writes it, so peft.PeftModel.from_pretrained
// loads our adapters.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "graph/gpt.h"
#include "runtime/config/json_file.h"

namespace zero {

// A PEFT adapter directory's files (PeftModel.save_pretrained's).
inline constexpr const char* kPeftConfigFile = "adapter_config.json";
inline constexpr const char* kPeftAdapterFile = "adapter_model.safetensors";
// The prefix of the adapter file's tensor names (the PeftModel's, then the
// model's): "base_model.model." + the Hugging Face tensor name.
inline constexpr std::string_view kPeftTensorPrefix = "base_model.model.";

// adapter_config.json -> LoraConfig. INVALID_ARGUMENT naming `path`, the
// key and its value for what is not supported or not well formed.
absl::StatusOr<LoraConfig> lora_config_from_peft(const Json& j, const std::string& path);

// The adapter_config.json of `model`'s adapters (model.lora), for the base
// model `base_model_name_or_path` (may be empty: PEFT then needs the base
// given to from_pretrained, as it always is). target_modules lists the
// adapted layers' last names (PEFT's form once applied: "all-linear"
// expanded); fan_in_fan_out is true for GPT-2 (its Conv1D layers).
Json peft_adapter_config_json(const GptConfig& model, const std::string& base_model_name_or_path);

// The first LoRA setting on which two configs of `model`'s adapters differ,
// as "r 4 vs 8" ("" when they are the same adapters: the same rank and
// scaling on the same layers; the dropout does not count).
std::string lora_difference(const GptConfig& model, const LoraConfig& a, const LoraConfig& b);

// The layers of `model` that `lora` adapts, by their last names ("q_proj",
// "c_proj"), sorted, each once.
std::vector<std::string> lora_adapted_names(const GptConfig& model, const LoraConfig& lora);

}  // namespace zero
