// Supervised fine-tuning data: JSON lines of examples (sft_examples.h: each
// line {"prompt", "completion"} or {"messages": [...]}) as rows for
// DataLoader (data_loader.h), read and encoded in memory when the run starts.
//
// A row is seq_len inputs and seq_len targets. An example of n tokens (ids,
// labels: the label is the id where the loss trains, -1 elsewhere) fills n
// positions of it: inputs[t] = ids[t], targets[t] = labels[t + 1], the
// shift Hugging Face's loss makes; so n may be seq_len + 1 (the last token is
// only a target), and a longer example is an error naming its file:line.
//  * Without packing, each example is a row of its own, right-padded: inputs
//    with the tokenizer's pad token (else its eos), targets with -1.
//  * With packing, examples are packed into rows of seq_len + 1 tokens by
//    best-fit decreasing (longest first, each into the fullest row it fits,
//    a row's examples then in file order), one after another, the rest
//    padded. Each keeps its own labels, and its first token is never a
//    target (nothing of it comes before), so exactly the same tokens are
//    trained with and without packing. Attention is the model's plain causal
//    mask over the whole row and positions run on through it: a packed
//    example attends to the examples before it in its row.
// The loss of a micro-batch is the mean over its trained targets (the
// engine's), as transformers' over labels != -100.
//
// Lines are read on the calling thread (DocumentReader: files, directories,
// globs; blank lines skipped; a binary file refused) and encoded on
// `threads` threads; the rows and every message are the same for any thread
// count. Errors name the file and line: a line that is not valid JSON, an
// example the encoder refuses (neither shape, a conversation with no
// assistant reply, a tokenizer without a chat template for "messages"), an
// example longer than seq_len + 1 tokens, one with nothing to train.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/data/data_loader.h"
#include "runtime/data/documents.h"
#include "runtime/data/tokenizer.h"

namespace zero {

struct SftDataOptions {
  std::vector<std::string> inputs;  // files, directories or globs (documents.h)
  int64_t seq_len = 0;              // a row's positions; an example may hold seq_len + 1 tokens
  bool packing = false;
  int threads = 1;                  // encoding threads (>= 1)
  int64_t max_line_bytes = kDefaultMaxDocumentBytes;
};

struct SftDataStats {
  int64_t examples = 0;
  int64_t tokens = 0;             // every example's ids
  int64_t trained_tokens = 0;     // targets with a loss (the same with and without packing)
  int64_t rows = 0;
  int64_t longest = 0;            // tokens of the longest example
  int64_t merged_boundaries = 0;  // prompt/reply boundaries inside one token (trained; sft_examples.h)
  double seconds = 0;             // reading, encoding and packing
};

class SftRows final : public SampleSet {
 public:
  int64_t size() const override { return static_cast<int64_t>(row_starts_.size()) - 1; }
  int64_t seq_len() const override { return seq_len_; }
  absl::Status fill(int64_t row, int32_t* inputs, int32_t* targets) const override;
  // "SFT: 120 examples from 1 JSON-lines file, ...: 5321 tokens, 2100 of them
  // trained (39.5%); one example per row of 64, ...".
  std::string describe() const override { return description_; }

  const SftDataStats& stats() const { return stats_; }
  int32_t pad_id() const { return pad_id_; }

 private:
  friend absl::StatusOr<std::unique_ptr<SftRows>> read_sft_rows(const Tokenizer&, const SftDataOptions&);
  SftRows() = default;

  int64_t seq_len_ = 0;
  int32_t pad_id_ = 0;
  std::vector<int32_t> ids_;
  std::vector<int32_t> labels_;          // -1 at each example's first token and wherever not trained
  std::vector<int64_t> row_starts_{0};   // row r holds [row_starts_[r], row_starts_[r + 1]) of ids_, labels_
  SftDataStats stats_;
  std::string description_;
};

// Reads, encodes and lays out every example of options.inputs with
// `tokenizer` (which must outlive nothing: the rows keep only ids). Errors:
// InvalidArgument naming file:line for a bad example or one too long,
// NotFound for an input that matches nothing, FailedPrecondition for a
// tokenizer with neither pad nor eos token; an input with no example is an
// error naming it.
absl::StatusOr<std::unique_ptr<SftRows>> read_sft_rows(const Tokenizer& tokenizer, const SftDataOptions& options);

}  // namespace zero
