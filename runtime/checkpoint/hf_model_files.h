// The files of a Hugging Face model directory that are neither config.json
// nor weights: the tokenizer's (tokenizer.json, tokenizer.model,
// tokenizer_config.json, special_tokens_map.json, added_tokens.json,
// vocab.json, merges.txt), the chat template (chat_template.jinja,
// chat_template.json) and generation_config.json — what
// AutoTokenizer.from_pretrained and generate() read beside the model.
//
// A run initialised from a directory reads them once and saves them in
// every checkpoint (checkpoint.h's SaveOptions::model_files, listed in the
// manifest with size and CRC-32C), so a checkpoint is self-contained when
// the source directory is gone and a resumed run carries them on; the
// Hugging Face export (hf_weights.h's consolidate_to_hf) writes them back
// byte for byte, and where the source had no generation_config.json writes
// one from config.json's token ids, as transformers' save_pretrained does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/config/json_file.h"

namespace zero {

inline constexpr const char* kHfModelFileNames[] = {
    "tokenizer.json",      "tokenizer.model",     "tokenizer_config.json", "special_tokens_map.json",
    "added_tokens.json",   "vocab.json",          "merges.txt",            "chat_template.jinja",
    "chat_template.json",  "generation_config.json",
};
inline constexpr const char* kGenerationConfigFile = "generation_config.json";
// A tokenizer.json of Llama 3 is 9 MB, Gemma's tokenizer.model 4 MB: a
// file past this is not one of these (refused, naming it).
inline constexpr int64_t kMaxModelFileBytes = int64_t{1} << 30;

// Those of kHfModelFileNames that `dir` holds, read whole, in that order.
// Each must be a regular file (a named pipe is refused, not waited on) of at
// most kMaxModelFileBytes; errors name the file. A path that is not a
// directory (a single safetensors file) has none.
absl::StatusOr<std::vector<ModelFile>> read_hf_model_files(const std::string& dir);

// The generation_config.json transformers derives from a config.json
// (GenerationConfig.from_model_config): its bos_token_id, eos_token_id
// (a list stays a list) and pad_token_id where they are set.
Json generation_config_json(const Json& config);

}  // namespace zero
