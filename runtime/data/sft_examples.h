// Supervised fine-tuning examples: one JSON example to token ids and labels,
// with the loss on the reply only. Two shapes, as TRL's SFTTrainer reads them:
//  * {"prompt": "...", "completion": "..."}: the ids of prompt + completion +
//    eos (eos not appended when the completion already ends with its text),
//    with the post-processor's special tokens (add_special_tokens=True: bos
//    for Llama, Mistral, Gemma; nothing for GPT-2, Qwen2, SmolLM). The
//    completion and the eos are trained; the rest is masked.
//  * {"messages": [{"role", "content"}, ...]}: the conversation rendered with
//    the tokenizer's chat format (chat_template.h), tokenized without the
//    post-processor (the template writes bos itself). Each assistant reply
//    and the token that ends it (<|eot_id|>, <|im_end|>, <end_of_turn>,
//    </s>) are trained; system and user turns and the markup are masked.
// labels[i] is ids[i] where the loss trains on token i and kIgnoreLabel
// elsewhere: aligned with ids, as Hugging Face's labels (the loss shifts).
//
// Tokenization is exact: the ids equal tokenizer.encode(the whole text), and
// the masked/trained boundary is found by encoding the text up to it. Where
// the tokenizer merges the last prompt character and the first reply
// character into one token (ChatML's "assistant\n" before a reply that starts
// with a newline, say), that token is trained, as TRL's assistant mask does
// (the token holding the reply's first character), and the example counts
// it in merged_boundaries.
//
// SftEncoder is immutable after create(); encode() is const and thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "runtime/config/json_file.h"
#include "runtime/data/chat_template.h"
#include "runtime/data/tokenizer.h"

namespace zero {

inline constexpr int32_t kIgnoreLabel = -1;

struct SftExample {
  std::vector<int32_t> ids;
  std::vector<int32_t> labels;    // same length as ids: ids[i], or kIgnoreLabel where not trained
  int64_t trained_tokens = 0;     // labels that are not kIgnoreLabel
  int64_t merged_boundaries = 0;  // masked/trained boundaries that fell inside a token
};

class SftEncoder {
 public:
  // Reads the tokenizer's chat format and the tokens its post-processor adds.
  // A tokenizer without a usable chat template is accepted: its "messages"
  // examples are refused with the reason. `tokenizer` must outlive the encoder.
  static absl::StatusOr<SftEncoder> create(const Tokenizer& tokenizer);

  // One example, of either shape. Errors say what is wrong with it (the
  // caller adds the file and line): neither or both shapes, a field that is
  // not a string, a message with an unknown role or non-string content, an
  // empty conversation, one with no assistant reply.
  absl::StatusOr<SftExample> encode(const Json& example) const;
  absl::StatusOr<SftExample> encode_prompt_completion(std::string_view prompt, std::string_view completion) const;
  // add_generation_prompt: end with the assistant header, as for generation
  // (an evaluation prompt); training examples end with their last reply.
  absl::StatusOr<SftExample> encode_conversation(absl::Span<const ChatMessage> messages,
                                                 bool add_generation_prompt = false) const;

  // The chat format, or null with chat_status() saying why there is none.
  const ChatFormat* chat_format() const { return chat_ ? &*chat_ : nullptr; }
  const absl::Status& chat_status() const { return chat_status_; }

 private:
  // A token the encoder writes by id: its text, and whether encode() reads
  // that text back as this one id (tokenizer.json's added tokens do;
  // libsentencepiece does not read special tokens in text).
  struct KnownToken {
    std::string text;
    int32_t id;
    bool read_in_text;
  };
  explicit SftEncoder(const Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}
  const KnownToken* known_token(std::string_view text) const;
  absl::Status encode_segments(absl::Span<const ChatSegment> segments, SftExample* out) const;

  const Tokenizer* tokenizer_;
  std::optional<ChatFormat> chat_;
  absl::Status chat_status_;
  std::vector<KnownToken> known_tokens_;  // the chat format's markup, and eos
  std::optional<KnownToken> eos_;
  std::vector<int32_t> post_prefix_, post_suffix_;  // the ids encode(text, add_special=true) adds around text
};

}  // namespace zero
