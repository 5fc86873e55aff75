// The pipeline stages of a tokenizer.json, each read from its JSON object:
// normalizers (text -> text), pre-tokenizers (text -> pieces), decoders
// (tokens -> text) and the post-processor (the special ids around a
// sequence). Each follows the `tokenizers` library's semantics for the
// types it names; any other type is refused by name, with where it sits in
// the file ("tokenizer.json: pre_tokenizer.pretokenizers[1]: type
// \"Punctuation\" is not supported").
//
// Each kind lives in its file (tokenizer_normalizers.cc, tokenizer_pre_tokenizers.cc,
// tokenizer_decoders.cc, tokenizer_post_processors.cc); what they share is in
// tokenizer_json_parts.h. Read: normalizers NFC, NFD, NFKC, NFKD, Lowercase, Strip, Prepend, Replace,
// Sequence; pre-tokenizers ByteLevel, Split, Digits, Metaspace, Whitespace,
// WhitespaceSplit, Sequence; decoders ByteLevel, Metaspace, Replace,
// ByteFallback, Fuse, Strip, Sequence; post-processors TemplateProcessing,
// ByteLevel, RobertaProcessing, BertProcessing, Sequence.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/config/json_file.h"

namespace zero {

// A piece of text between pipeline stages. at_start: it begins where the
// original text begins (Metaspace's prepend_scheme "first" looks at that).
struct TextPiece {
  std::string text;
  bool at_start = false;
};

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void apply(std::string& text) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void apply(std::vector<TextPiece>& pieces) const = 0;
  // True when the last stage is ByteLevel: the pieces are raw bytes whose
  // printable spelling the BPE model looks up (bpe_model.h).
  virtual bool byte_level() const { return false; }
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void apply(std::vector<std::string>& tokens) const = 0;
};

// The ids a post-processor puts around one sequence (pairs are not needed for training data).
struct PostProcessor {
  std::vector<int32_t> prefix;
  std::vector<int32_t> suffix;
};

// `where` names the JSON object in messages ("tokenizer.json: normalizer").
// A null object gives nullptr (the stage is absent).
absl::StatusOr<std::unique_ptr<Normalizer>> make_normalizer(const Json& j, const std::string& where);
absl::StatusOr<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(const Json& j, const std::string& where);
absl::StatusOr<std::unique_ptr<Decoder>> make_decoder(const Json& j, const std::string& where);
// token_id looks a special token's text up, for processors that name tokens without ids.
absl::StatusOr<PostProcessor> make_post_processor(
    const Json& j, const std::string& where, const std::function<std::optional<int32_t>(const std::string&)>& token_id);

}  // namespace zero
