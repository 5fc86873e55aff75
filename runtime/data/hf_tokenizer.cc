// tokenizer.json reading and the encode/decode pipeline; see hf_tokenizer.h.
#include "runtime/data/hf_tokenizer.h"

#include <algorithm>
#include <cstring>

#include "core/status.h"
#include "core/strings.h"
#include "runtime/config/json_file.h"
#include "runtime/data/bpe_model.h"
#include "runtime/data/tokenizer_components.h"
#include "runtime/data/unicode_text.h"

namespace zero {

namespace {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  std::string text;  // what decoding writes: content, normalized when "normalized" is true (as `tokenizers` 0.23)
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
};

// Added tokens of one kind (normalized or not), found leftmost-longest as
// the aho-corasick automaton `tokenizers` uses finds them: a byte trie, so a
// file with thousands of added tokens (`<unused123>`) costs one walk of the
// longest match per candidate position, not a scan of every token.
class AddedTokenMatcher {
 public:
  void add(const AddedToken* token, const std::string& pattern) {
    if (pattern.empty()) return;
    first_bytes_[static_cast<unsigned char>(pattern[0])] = true;
    int32_t node = 0;
    for (unsigned char c : pattern) {
      const uint64_t edge = (static_cast<uint64_t>(node) << 8) | c;
      auto it = edges_.find(edge);
      if (it == edges_.end()) {
        it = edges_.emplace(edge, static_cast<int32_t>(terminal_.size())).first;
        terminal_.push_back(nullptr);
      }
      node = it->second;
    }
    if (terminal_[node] == nullptr) terminal_[node] = token;  // the first of two equal texts wins
  }
  bool empty() const { return terminal_.size() == 1; }

  // Cuts `piece` into text parts and added tokens, appended to `out` as
  // (token or nullptr, part).
  void split(const TextPiece& piece, std::vector<std::pair<const AddedToken*, TextPiece>>& out) const {
    const std::string& s = piece.text;
    size_t start_offset = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (!first_bytes_[static_cast<unsigned char>(s[i])]) continue;
      const AddedToken* hit = nullptr;
      size_t hit_length = 0;
      int32_t node = 0;
      for (size_t k = i; k < s.size(); ++k) {
        const auto it = edges_.find((static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(s[k]));
        if (it == edges_.end()) break;
        node = it->second;
        if (terminal_[node] != nullptr) {
          hit = terminal_[node];
          hit_length = k + 1 - i;
        }
      }
      if (hit == nullptr) continue;
      size_t start = i, stop = i + hit_length;
      const AddedToken& t = *hit;
      if (t.single_word && ((start > 0 && word_char_before(s, start)) || (stop < s.size() && word_char_at(s, stop)))) {
        i = stop - 1;  // the automaton moves past a match it then rejects
        continue;
      }
      if (t.lstrip) {
        size_t b = start;
        while (b > start_offset) {
          size_t c = b - 1;
          while (c > 0 && (static_cast<unsigned char>(s[c]) & 0xC0) == 0x80) --c;
          int len = 0;
          if (!unicode::is_whitespace(unicode::decode_at(s, c, &len))) break;
          b = c;
        }
        start = b;
      }
      if (t.rstrip) {
        while (stop < s.size()) {
          int len = 0;
          if (!unicode::is_whitespace(unicode::decode_at(s, stop, &len))) break;
          stop += len;
        }
      }
      if (start > start_offset) {
        out.push_back({nullptr, TextPiece{s.substr(start_offset, start - start_offset), piece.at_start && start_offset == 0}});
      }
      out.push_back({&t, TextPiece{}});
      start_offset = stop;
      i = stop - 1;
    }
    if (start_offset < s.size() || (s.empty() && start_offset == 0)) {
      out.push_back({nullptr, TextPiece{s.substr(start_offset), piece.at_start && start_offset == 0}});
    }
  }

 private:
  static bool is_word(char32_t cp) { return unicode::is_word_char(cp); }
  static bool word_char_at(const std::string& s, size_t i) {
    int len = 0;
    return is_word(unicode::decode_at(s, i, &len));
  }
  static bool word_char_before(const std::string& s, size_t i) {
    size_t c = i - 1;
    while (c > 0 && (static_cast<unsigned char>(s[c]) & 0xC0) == 0x80) --c;
    return word_char_at(s, c);
  }
  std::vector<const AddedToken*> terminal_{nullptr};  // trie node -> the token ending there; node 0 is the root
  absl::flat_hash_map<uint64_t, int32_t> edges_;      // (node << 8 | byte) -> child node
  bool first_bytes_[256] = {};
};

class HfTokenizer final : public Tokenizer {
 public:
  HfTokenizer(BpeModel model) : model_(std::move(model)) {}

  void encode(std::string_view text, bool add_special, std::vector<int32_t>* out) const override {
    std::string repaired;
    if (!unicode::is_valid_utf8(text)) {
      repaired = unicode::repair_utf8(text);
      text = repaired;
    }
    if (add_special) out->insert(out->end(), post_.prefix.begin(), post_.prefix.end());
    std::vector<std::pair<const AddedToken*, TextPiece>> raw_parts;
    raw_added_.split(TextPiece{std::string(text), true}, raw_parts);
    std::vector<TextPiece> words;
    std::vector<std::pair<const AddedToken*, TextPiece>> parts;
    for (auto& [token, piece] : raw_parts) {
      if (token != nullptr) {
        out->push_back(token->id);
        continue;
      }
      if (normalizer_) normalizer_->apply(piece.text);
      parts.clear();
      if (normalized_added_.empty()) parts.push_back({nullptr, std::move(piece)});
      else normalized_added_.split(piece, parts);
      for (auto& [t, p] : parts) {
        if (t != nullptr) {
          out->push_back(t->id);
          continue;
        }
        words.clear();
        words.push_back(std::move(p));
        if (pre_tokenizer_) pre_tokenizer_->apply(words);
        for (const TextPiece& w : words) model_.encode_word(w.text, out);
      }
    }
    if (add_special) out->insert(out->end(), post_.suffix.begin(), post_.suffix.end());
  }

  std::string decode(absl::Span<const int32_t> ids, bool skip_special) const override {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int32_t id : ids) {
      const auto added = added_by_id_.find(id);
      if (added != added_by_id_.end()) {
        if (!(skip_special && added->second->special)) tokens.push_back(added->second->text);
        continue;
      }
      const std::string& t = model_.id_to_token(id);
      if (!t.empty()) tokens.push_back(t);
    }
    if (!decoder_) {
      std::string joined;
      for (size_t i = 0; i < tokens.size(); ++i) joined += (i ? " " : "") + tokens[i];
      return joined;
    }
    decoder_->apply(tokens);
    std::string text;
    for (const std::string& t : tokens) text += t;
    return text;
  }

  int64_t vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> token_to_id(std::string_view token) const override {
    for (const AddedToken& t : added_) {
      if (t.content == token) return t.id;
    }
    return model_.token_to_id(token);
  }
  std::optional<std::string> id_to_token(int32_t id) const override {
    const auto added = added_by_id_.find(id);
    if (added != added_by_id_.end()) return added->second->content;
    const std::string& t = model_.id_to_token(id);
    if (t.empty()) return std::nullopt;
    return t;
  }
  std::string token_text(int32_t id) const override {
    const auto added = added_by_id_.find(id);
    if (added != added_by_id_.end()) return added->second->content;
    return model_.token_text(id);
  }
  std::string describe() const override { return cat(model_.describe(), ", ", added_.size(), " added tokens (tokenizer.json)"); }

  BpeModel model_;
  std::vector<AddedToken> added_;  // not resized after the matchers point into it
  absl::flat_hash_map<int32_t, const AddedToken*> added_by_id_;
  AddedTokenMatcher raw_added_, normalized_added_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<Decoder> decoder_;
  PostProcessor post_;
  int64_t vocab_size_ = 0;
};

}  // namespace

namespace {

absl::StatusOr<std::unique_ptr<Tokenizer>> read_tokenizer_json(const std::string& path, const Json& j);

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> open_hf_tokenizer_json(const std::string& path) {
  ZE_ASSIGN_OR_RETURN(const Json j, load_json_file(path));
  // A value of the wrong type ("fuse_unk": null) makes nlohmann throw where a
  // reader asks for a bool: one catch turns every such case into an error naming the file.
  try {
    return read_tokenizer_json(path, j);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(cat(path, ": a value of the wrong type: ", e.what()));
  }
}

namespace {

absl::StatusOr<std::unique_ptr<Tokenizer>> read_tokenizer_json(const std::string& path, const Json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError(cat(path, ": expected a JSON object (a tokenizer.json)"));
  const std::string file = path;
  const Json& model = j.value("model", Json());
  const std::string model_type = model.is_object() ? model.value("type", std::string("BPE")) : "";
  if (!model.is_object()) return absl::InvalidArgumentError(cat(file, ": no \"model\" object"));
  if (model_type != "BPE") {
    return absl::UnimplementedError(cat(file, ": model.type \"", model_type,
                                        "\" is not supported (BPE is: byte-level as GPT-2, Llama-3 and Qwen2, or with byte "
                                        "fallback as Llama-2, Mistral and Gemma); a SentencePiece tokenizer.model beside it "
                                        "is read when tokenizer.json is absent"));
  }
  if (j.contains("truncation") && !j["truncation"].is_null()) {
    return absl::UnimplementedError(cat(file, ": \"truncation\" is set: documents are cut into training windows here, "
                                              "set it to null"));
  }
  ZE_ASSIGN_OR_RETURN(std::unique_ptr<PreTokenizer> pre, make_pre_tokenizer(j.value("pre_tokenizer", Json()), file + ": pre_tokenizer"));
  const bool byte_level = pre && pre->byte_level();
  ZE_ASSIGN_OR_RETURN(BpeModel bpe, BpeModel::from_json(model, file, byte_level));
  auto t = std::make_unique<HfTokenizer>(std::move(bpe));
  t->pre_tokenizer_ = std::move(pre);
  ZE_ASSIGN_OR_RETURN(t->normalizer_, make_normalizer(j.value("normalizer", Json()), file + ": normalizer"));
  ZE_ASSIGN_OR_RETURN(t->decoder_, make_decoder(j.value("decoder", Json()), file + ": decoder"));

  const Json& added = j.value("added_tokens", Json::array());
  if (!added.is_array()) return absl::InvalidArgumentError(cat(file, ": added_tokens: expected an array"));
  t->added_.reserve(added.size());
  for (size_t i = 0; i < added.size(); ++i) {
    const Json& a = added[i];
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") || !a["content"].is_string()) {
      return absl::InvalidArgumentError(cat(file, ": added_tokens[", i, "] = ", a.dump(), ": expected {\"id\": N, \"content\": \"...\", ...}"));
    }
    AddedToken token;
    token.id = a["id"].get<int32_t>();
    token.content = a["content"].get<std::string>();
    token.special = a.value("special", false);
    token.normalized = a.value("normalized", !token.special);
    token.single_word = a.value("single_word", false);
    token.lstrip = a.value("lstrip", false);
    token.rstrip = a.value("rstrip", false);
    token.text = token.content;
    t->added_.push_back(std::move(token));
  }
  int64_t vocab = t->model_.size();
  for (AddedToken& token : t->added_) {
    t->added_by_id_[token.id] = &token;
    vocab = std::max<int64_t>(vocab, token.id + 1);
    if (!token.normalized) {
      t->raw_added_.add(&token, token.content);
    } else {
      std::string pattern = token.content;
      if (t->normalizer_) t->normalizer_->apply(pattern);
      t->normalized_added_.add(&token, pattern);
      token.text = pattern;
    }
  }
  t->vocab_size_ = vocab;
  HfTokenizer* raw = t.get();
  ZE_ASSIGN_OR_RETURN(t->post_, make_post_processor(j.value("post_processor", Json()), file + ": post_processor",
                                                    [raw](const std::string& s) { return raw->token_to_id(s); }));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

}  // namespace

}  // namespace zero
