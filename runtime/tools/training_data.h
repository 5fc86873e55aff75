// The run's data, opened as data.format says (docs/data-format.md,
// docs/fine-tuning.md), for training (data.path) and evaluation
// (data.val_path):
//  * "llmc": llm.c token shards, windows drawn inside each shard;
//  * "text" with a tokenizer, "jsonl": documents (runtime/data/documents.h)
//    tokenized when the run starts, with zero-data tokenize's own code and
//    framing (tokenize_documents: the post-processor's tokens, then eos after
//    each document), into one stream in memory, windows drawn across
//    documents as from one shard: the same tokens as `zero-data tokenize`
//    with no validation split, written as one shard;
//  * "text" without a tokenizer, for a model of vocabulary 256 only, and
//    "bytes": each file's bytes, windows inside each file;
//  * "sft": JSON lines of examples as padded or packed rows
//    (runtime/data/sft_dataset.h), each example once per epoch.
// Every rank reads and tokenizes the whole data set itself, the same way
// (the same ids on any thread count), rather than rank 0 broadcasting it:
// nothing to send, no rank waiting on another, and the data is small enough
// to fit in memory by the formats' definition.
//
// What the data must agree with, each refused naming both sides: a tokenizer
// whose ids do not fit model.vocab_size; "text" without a tokenizer for a
// model whose vocabulary is not 256 (the bytes would be read as its tokens);
// shards written for a vocabulary of 256 (bytes) for a model whose
// vocabulary is not 256, or for a vocabulary larger than the model's; token
// ids at or above model.vocab_size. A data.tokenizer other than the
// tokenizer of run.init_from is allowed when its ids fit.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "runtime/config/run_config.h"
#include "runtime/data/data_loader.h"
#include "runtime/data/tokenizer.h"

namespace zero {

struct TrainingData {
  std::unique_ptr<DataLoader> train;
  std::unique_ptr<DataLoader> val;  // data.val_path's; null without one
};

// Opens data.path and, when run.eval_every is set, data.val_path, tokenizing on `threads`
// threads where the format asks for it. Errors name the key.
absl::StatusOr<TrainingData> open_training_data(const RunConfig& config, int threads);

// data.tokenizer, read, when the format reads text through one ("text" with
// data.tokenizer set, "jsonl", "sft"); null otherwise. Errors name the key,
// and refuse a tokenizer whose ids do not fit model.vocab_size.
absl::StatusOr<std::unique_ptr<Tokenizer>> load_data_tokenizer(const RunConfig& config);

// One path in data.format, named `key` in errors ("data.path",
// "data.val_path"); `tokenizer` is load_data_tokenizer's.
absl::StatusOr<std::unique_ptr<DataLoader>> open_data_path(const RunConfig& config, const std::string& path,
                                                           std::string_view key, const Tokenizer* tokenizer,
                                                           int threads);

// The exit status for an error of the functions above: 2 for bad input
// (what was given does not read or does not fit the model), 1 for a failure
// to read it (I/O).
int data_error_exit_code(const absl::Status& status);

}  // namespace zero
