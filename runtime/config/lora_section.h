// The "model.lora" section: LoRA adapters with PEFT's names and meaning
// (graph/lora.h), its keys declared in lora_section.cc. Rules:
//  * r > 0 turns LoRA on (every other parameter is frozen); any other key
//    without it is refused by name;
//  * target_modules defaults to PEFT's for the family (q_proj and v_proj;
//    GPT-2's c_attn); each entry must name some adaptable layer of the
//    model (the blocks' linear layers), else an error naming it and the
//    layers there are; "all-linear" is every one of them;
//  * bias: "none" only (PEFT's default);
//  * init_from: a PEFT adapter directory (adapter_config.json and
//    adapter_model.safetensors) whose adapters the run starts from; the
//    keys the section leaves out are taken from its adapter_config.json and
//    the ones it sets must agree with it;
//  * not with tensor_parallel.sequence_parallel (check_lora_composition).
#pragma once

#include "runtime/config/config_reader.h"
#include "runtime/config/run_config.h"

namespace zero {

// Reads "model.lora" once the model's architecture is known.
void parse_lora_section(ConfigReader r, RunConfig& out);

// What LoRA asks of the other sections, once they are read.
void check_lora_composition(ConfigReader& root, const RunConfig& c);

}  // namespace zero
