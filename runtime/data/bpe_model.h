// The BPE model of a tokenizer.json ("model": {"type": "BPE", ...}): a
// vocabulary, ranked merges, and what to do with a character the vocabulary
// lacks (byte fallback to `<0xAB>` tokens, else the unknown token, fused or
// not). A word is merged the way the `tokenizers` library merges it: the
// adjacent pair with the lowest merge rank first, the leftmost among equals,
// O(n log n) with a heap, so a SentencePiece-style file whose words are whole
// lines stays fast.
//
// Byte-level files (GPT-2, Llama-3, Qwen2) spell each byte as a printable
// character; here a byte-level word is given as its raw bytes and each byte
// starts as the id of its character, so no mapped string is ever built.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "runtime/config/json_file.h"

namespace zero {

// GPT-2's printable spelling of byte b (bytes_to_unicode): 33..126, 161..172
// and 174..255 stand for themselves, the other 68 bytes for U+0100 onward.
char32_t byte_level_char(uint8_t b);
// The inverse: the byte a code point spells, or -1 when it spells none.
int byte_level_byte(char32_t cp);

// What a SentencePiece-style piece stands for: "▁" as a space, "<0xAB>" as its byte.
std::string piece_text(std::string_view piece);

class BpeModel {
 public:
  // Reads `model` (the "model" object of `file`). byte_level: the
  // pre-tokenizer hands over raw bytes (see above).
  static absl::StatusOr<BpeModel> from_json(const Json& model, const std::string& file, bool byte_level);
  BpeModel(BpeModel&&) = default;  // vocab_'s keys point into tokens_' strings, which a move keeps in place
  BpeModel& operator=(BpeModel&&) = default;
  BpeModel(const BpeModel&) = delete;

  // Appends the ids of one pre-tokenized word.
  void encode_word(std::string_view word, std::vector<int32_t>* out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token's text as the file spells it ("Ġthe", "▁the", "<0x0A>"); "" for an unused id.
  const std::string& id_to_token(int32_t id) const;
  // What the token stands for: its bytes (byte-level), else its text with
  // "▁" as a space and a fallback "<0xAB>" as its byte.
  std::string token_text(int32_t id) const;
  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  bool byte_level() const { return byte_level_; }
  bool byte_fallback() const { return byte_fallback_; }
  std::string describe() const;

 private:
  BpeModel() = default;
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    bool removed;
  };
  std::optional<Merge> merge_of(int32_t left, int32_t right) const;
  // The starting symbols of `word`.
  void initial_symbols(std::string_view word, std::vector<Symbol>* symbols) const;
  void merge_all(std::vector<Symbol>& symbols) const;

  std::vector<std::string> tokens_;                      // id -> text; stable storage for vocab_'s keys
  absl::flat_hash_map<std::string_view, int32_t> vocab_;  // text -> id
  absl::flat_hash_map<uint64_t, Merge> merges_;           // (left << 32 | right) -> rank, result
  absl::flat_hash_map<std::string, int32_t> raw_vocab_;   // byte-level: a token's raw bytes -> id (ignore_merges)
  int32_t byte_ids_[256];           // byte-level: byte -> id of its character, -1 when absent
  int32_t fallback_ids_[256];       // byte_fallback: byte -> id of "<0xAB>", -1 when absent
  std::optional<int32_t> unk_id_;
  bool byte_level_ = false;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  uint64_t instance_ = 0;  // keys this model's entries in the per-thread word cache
};

}  // namespace zero
