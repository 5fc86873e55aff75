// A checkpoint's LoRA adapters as PEFT's adapter directory, what
// peft.PeftModel.from_pretrained(base_model, DIR) loads:
//
//   adapter_config.json        the manifest's "adapter" (the run's
//                              peft_adapter_config_json, runtime/config/
//                              peft_config.h), pretty-printed
//   adapter_model.safetensors  every lora_A / lora_B tensor under PEFT's
//                              name, "base_model.model." + Hugging Face's
//                              tensor name ("...q_proj.lora_A.weight"
//                              [r, in], "...lora_B.weight" [out, r]), in the
//                              manifest's order; metadata {"format": "pt"}
//   tokenizer files            the tokenizer files and chat template the
//                              checkpoint carries (hf_model_files.h), byte
//                              for byte, as adapter repositories often ship
//                              them; not generation_config.json, which is
//                              the base model's
//
// The adapters are never transposed, not even GPT-2's: PEFT's lora_A and
// lora_B are nn.Linear layers over a Conv1D too (the config's
// fan_in_fan_out: true says the base layer is one). The base weights are not
// written; a merged model is `consolidate_to_hf`'s (hf_weights.h).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "core/dtype.h"

namespace zero {

// Writes checkpoint <dir>/<tag> (tag empty: the newest complete one)'s LoRA
// adapters as a PEFT adapter directory `out_dir` in `dtype` (fp32 or bf16).
// FAILED_PRECONDITION when the checkpoint has none (its manifest has no
// "adapter": a run without model.lora) or no model description, or its
// parameters are not the described model and adapters
// (checkpoint_model_config, safetensors.h). Atomic
// (write_directory_atomic, file_io.h): refused when out_dir exists and is
// not empty (it is left as it was).
absl::Status consolidate_to_peft(const std::string& dir, const std::string& tag, const std::string& out_dir,
                                 DType dtype);

}  // namespace zero
