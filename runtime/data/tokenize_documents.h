// Documents to one token stream, on several threads, in document order.
//
// Each document becomes encode(text, add_special) followed by the eos id:
// the tokenizer's post-processor tokens first, as Hugging Face's
// tokenizer(text) gives them (Llama-3's <|begin_of_text|>, Llama-2's and
// Mistral's <s>, Gemma's <bos>; none for GPT-2 and Qwen2), then the
// tokenizer's eos_token as the separator (GPT-2's <|endoftext|>), unless the
// post-processor already ends a document with it. So GPT-2 data reads
// "doc <|endoftext|> doc <|endoftext|>", Llama-3 data
// "<|begin_of_text|> doc <eos> <|begin_of_text|> doc <eos>".
//
// Threads: the calling thread reads records (DocumentReader::next) in
// batches; `threads` worker threads decode JSON lines and encode; the calling
// thread hands each document's ids to the consumer in record order. The
// output is therefore the same for any thread count, byte for byte, and the
// first error in record order is the one returned.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/data/documents.h"
#include "runtime/data/tokenizer.h"

namespace zero {

// What goes around each document's ids.
struct DocumentFraming {
  bool add_special = true;              // the post-processor's tokens around each document
  int32_t eos_id = -1;                  // the separator after each document
  bool eos_from_post_processor = false; // the post-processor already ends each document with eos_id
  std::vector<int32_t> prefix;          // what the post-processor puts before a document (for messages)
};

// The framing for `tokenizer`: its post-processor's tokens (add_special),
// then its eos_token, or eos_override when given. Fails, naming the
// tokenizer's directory, when it has no eos_token and no override is given,
// or when the override is not an id of its vocabulary.
absl::StatusOr<DocumentFraming> document_framing(const Tokenizer& tokenizer, std::optional<int32_t> eos_override,
                                                 bool add_special = true);

// Appends one document's framed ids to *out.
void encode_document(const Tokenizer& tokenizer, const DocumentFraming& framing, std::string_view text,
                     std::vector<int32_t>* out);

// "<|begin_of_text|> … <|eot_id|>": one document as the framing lays it out.
std::string describe_framing(const Tokenizer& tokenizer, const DocumentFraming& framing);

struct TokenizeStats {
  int64_t records = 0;          // records read
  int64_t documents = 0;        // non-empty documents tokenized
  int64_t empty_documents = 0;  // empty ones, skipped (no tokens, no eos)
  int64_t tokens = 0;           // ids handed to the consumer, eos included
  int64_t text_bytes = 0;       // bytes of document text tokenized
};

// Called on the calling thread, once per non-empty document, in record
// order. An error stops the run and is returned as is.
using DocumentConsumer = std::function<absl::Status(const Document& doc, std::span<const int32_t> ids)>;

// Reads every record of `reader`, tokenizes the non-empty documents on
// `threads` (>= 1) worker threads and hands them to `consume` in order. An
// input without a non-empty document is an InvalidArgument error naming it.
// Any reader, decode or consumer error ends the run: the workers are joined
// before it returns.
absl::StatusOr<TokenizeStats> tokenize_documents(const Tokenizer& tokenizer, const DocumentFraming& framing,
                                                 DocumentReader& reader, int threads,
                                                 const DocumentConsumer& consume);

}  // namespace zero
