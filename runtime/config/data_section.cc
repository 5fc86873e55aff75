// The "data" section's keys and rules; see data_section.h.
#include "runtime/config/data_section.h"

#include <filesystem>

#include "core/strings.h"
#include "runtime/config/config_key_builders.h"
#include "runtime/config/config_schema.h"

namespace zero {

bool has_tokenizer_files(const std::string& dir) {
  std::error_code ec;
  if (dir.empty() || !std::filesystem::is_directory(dir, ec)) return false;
  for (const char* name : {"tokenizer.json", "tokenizer.model"}) {
    if (std::filesystem::is_regular_file(std::filesystem::path(dir) / name, ec)) return true;
  }
  return false;
}

void parse_data_section(ConfigReader r, RunConfig& c) {
  read_declared_keys(r, c);
  DataSection& d = c.data;
  const bool reads_text = d.format == "text" || d.format == "jsonl" || d.format == "sft";
  if (r.has("tokenizer") && !reads_text) {
    r.error("tokenizer", cat("applies to data.format \"text\", \"jsonl\" and \"sft\"; \"", d.format, "\" ",
                             d.format == "llmc" ? "shards hold token ids already (zero-data tokenize made them)"
                                                : "trains on bytes, vocabulary 256",
                             ": remove data.tokenizer or change data.format"));
  }
  if (r.has("jsonl_field") && d.format != "jsonl") {
    r.error("jsonl_field", cat("applies to data.format \"jsonl\" only (\"sft\" lines hold \"prompt\"/\"completion\" "
                               "or \"messages\"); data.format is \"", d.format, "\""));
  }
  if (r.has("packing") && d.packing && d.format != "sft") {
    r.error("packing", cat("applies to data.format \"sft\" only (pretraining windows are full rows already); "
                           "data.format is \"", d.format, "\""));
  }
  // The model's own tokenizer, where --init-from brings one.
  if (d.tokenizer.empty() && reads_text && has_tokenizer_files(c.run.init_from)) {
    d.tokenizer = c.run.init_from;
    r.set_derived("tokenizer", d.tokenizer);
  }
  r.finish();
}

namespace config_keys {

std::vector<ConfigKey> data_keys() {
  std::vector<ConfigKey> k;
  k.push_back(text_choice("data.format", ZE_FIELD(data.format), {"text", "jsonl", "sft", "bytes", "llmc"},
                          "\"text\": text files, one document each, tokenized as read with data.tokenizer (without "
                          "one: bytes, for a model of vocabulary 256 only); \"jsonl\": JSON lines, one document "
                          "each (data.jsonl_field); \"sft\": JSON lines of {\"prompt\", \"completion\"} or "
                          "{\"messages\"}, loss on the replies only; \"bytes\": bytes of files (vocabulary 256) on "
                          "purpose; \"llmc\": llm.c token shards (zero-data tokenize) (docs/data-format.md)"));
  k.push_back(text("data.path", ZE_FIELD(data.path), "a file, a directory (its files) or a glob")
                  .shown("(required to train)"));
  k.push_back(integer("data.seed", ZE_FIELD(data.seed), 0, kMax, "sampling seed"));
  k.push_back(text("data.val_path", ZE_FIELD(data.val_path),
                   "validation data in data.format: a file, a directory or a glob (\"\": no evaluation)"));
  k.push_back(text("data.tokenizer", ZE_FIELD(data.tokenizer),
                   "a Hugging Face model directory (tokenizer.json or tokenizer.model, tokenizer_config.json) or "
                   "one of those files, for \"text\", \"jsonl\" and \"sft\"; its ids must fit model.vocab_size. "
                   "Every rank tokenizes the whole data set in memory at start")
                  .shown("run.init_from, when it has tokenizer files"));
  k.push_back(text("data.jsonl_field", ZE_FIELD(data.jsonl_field),
                   "\"jsonl\": the field of each line's object that holds the document"));
  k.push_back(boolean("data.packing", ZE_FIELD(data.packing),
                      "\"sft\": pack several examples into each row (best-fit decreasing) instead of one per "
                      "padded row; attention stays causal over the whole row, so a packed example attends to "
                      "the examples before it, and positions run on through the row"));
  return k;
}

}  // namespace config_keys

}  // namespace zero
