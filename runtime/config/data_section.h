// The "data" section: its keys (declared in data_section.cc) and the rules
// that join them with the rest of the config. What each format reads, and
// the refusals that need the data itself (a byte shard for a BPE model, a
// tokenizer larger than the model's vocabulary), are
// runtime/tools/training_data.h's; this file checks only what the config
// alone says:
//  * data.tokenizer defaults to run.init_from when that directory holds
//    tokenizer files (tokenizer.json or tokenizer.model) and the format reads
//    text ("text", "jsonl", "sft"); --print-config lists it as derived;
//  * a key given for a format it does not apply to is refused by name
//    (data.tokenizer with "llmc" or "bytes", data.jsonl_field without
//    "jsonl", data.packing without "sft").
// zero-estimate reads the same section and plans without the data, so a
// model whose vocabulary the data cannot fill is refused when the data is
// opened, not here.
#pragma once

#include "runtime/config/config_reader.h"
#include "runtime/config/run_config.h"

namespace zero {

// Reads "data" after "run" and "model" (run.init_from is read by then).
void parse_data_section(ConfigReader r, RunConfig& out);

// Whether `dir` is a directory with tokenizer.json or tokenizer.model.
bool has_tokenizer_files(const std::string& dir);

}  // namespace zero
