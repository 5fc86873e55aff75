// Tokenizers: text to token ids and back, read from a Hugging Face model
// directory. Two kinds of file are read:
//  * `tokenizer.json` (the `tokenizers` library's format): added and special
//    tokens, a normalizer, a pre-tokenizer, a BPE model (byte-level, or
//    SentencePiece-style with `▁` and byte fallback), a post-processor and a
//    decoder (runtime/data/hf_tokenizer.h lists the components read; any
//    other is refused by name);
//  * `tokenizer.model` (SentencePiece) through libsentencepiece, when the
//    directory has no tokenizer.json.
// `tokenizer_config.json` beside them names the bos/eos/pad/unk tokens and
// the chat template. Ids equal the Python libraries' on the same files
// (tests/runtime/tokenizer_test.cc against tests/data/tokenizers/).
//
// encode() and decode() are const and thread-safe: zero-data encodes
// documents on several threads with one Tokenizer.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace zero {

// The special tokens a tokenizer_config.json (or the SentencePiece model)
// names, with their ids; absent ones are nullopt.
struct SpecialTokens {
  std::optional<int32_t> bos_id;
  std::optional<int32_t> eos_id;
  std::optional<int32_t> pad_id;
  std::optional<int32_t> unk_id;
  std::string bos_token, eos_token, pad_token, unk_token;  // their text ("" when absent)
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Appends the ids of `text` to `out`. add_special: what the file's
  // post-processor adds (Llama's `<s>`, Llama-3's `<|begin_of_text|>`), as
  // Hugging Face's `add_special_tokens=True`. Text that is not valid UTF-8 is
  // read with each invalid byte as U+FFFD, as Python's errors="replace" does.
  virtual void encode(std::string_view text, bool add_special, std::vector<int32_t>* out) const = 0;
  std::vector<int32_t> encode(std::string_view text, bool add_special = false) const {
    std::vector<int32_t> ids;
    encode(text, add_special, &ids);
    return ids;
  }
  // The text of `ids`; skip_special drops special tokens (bos, eos, chat markers).
  virtual std::string decode(absl::Span<const int32_t> ids, bool skip_special = false) const = 0;

  // Number of ids the tokenizer can produce: its vocabulary plus added tokens.
  virtual int64_t vocab_size() const = 0;
  // The id of one token's text ("<|eot_id|>"), or nullopt.
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  virtual std::optional<std::string> id_to_token(int32_t id) const = 0;
  // The text a token stands for in the normalized input: a byte-level token's
  // bytes, a SentencePiece piece with "▁" as a space and "<0xAB>" as its
  // byte, an added token's content; "" for an unknown id. Summed over the
  // ids of an encode, it gives each token's byte span (SFT's label boundaries).
  virtual std::string token_text(int32_t id) const = 0;
  // "byte-level BPE, 50257 tokens (tokenizer.json)"
  virtual std::string describe() const = 0;

  const SpecialTokens& special() const { return special_; }
  // tokenizer_config.json's chat_template ("" when none).
  const std::string& chat_template() const { return chat_template_; }
  // The directory or file it was read from.
  const std::string& source() const { return source_; }

 protected:
  SpecialTokens special_;
  std::string chat_template_;
  std::string source_;
  friend absl::StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer_files(const std::string& path);
};

// Reads the tokenizer of a model directory (tokenizer.json, else
// tokenizer.model; tokenizer_config.json for the special tokens), or one of
// those files named directly. Errors name the file, and for a malformed JSON
// file its line; an unsupported component is refused by its type name.
absl::StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& path);
// load_tokenizer without its catch of JSON type errors (what it calls).
absl::StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer_files(const std::string& path);

}  // namespace zero
