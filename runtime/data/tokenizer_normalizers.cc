// Normalizers of a tokenizer.json (text -> text); see tokenizer_components.h.
#include "runtime/data/tokenizer_components.h"

#include "runtime/data/tokenizer_json_parts.h"

namespace zero {

using namespace tokenizer_json;  // NOLINT: the shared parts of every stage file

namespace {

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(unicode::NormalForm form) : form_(form) {}
  void apply(std::string& text) const override { text = unicode::normalize(text, form_); }

 private:
  unicode::NormalForm form_;
};

class LowercaseNormalizer final : public Normalizer {
 public:
  void apply(std::string& text) const override { text = unicode::lowercase(text); }
};

class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void apply(std::string& text) const override {
    size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        int len = 0;
        if (!unicode::is_whitespace(unicode::decode_at(text, begin, &len))) break;
        begin += len;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        int len = 0;
        if (!unicode::is_whitespace(unicode::decode_at(text, start, &len))) break;
        end = start;
      }
    }
    text = text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void apply(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(Pattern pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void apply(std::string& text) const override { replace_pattern(text, pattern_, content_); }

 private:
  Pattern pattern_;
  std::string content_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> stages) : stages_(std::move(stages)) {}
  void apply(std::string& text) const override {
    for (const auto& s : stages_) s->apply(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> stages_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Normalizer>> make_normalizer(const Json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j);
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(unicode::NormalForm::kNFC);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(unicode::NormalForm::kNFD);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(unicode::NormalForm::kNFKC);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(unicode::NormalForm::kNFKD);
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "Strip") return std::make_unique<StripNormalizer>(j.value("strip_left", true), j.value("strip_right", true));
  if (type == "Prepend") {
    ZE_ASSIGN_OR_RETURN(std::string prefix, string_field(j, where, "prepend"));
    return std::make_unique<PrependNormalizer>(std::move(prefix));
  }
  if (type == "Replace") {
    ZE_ASSIGN_OR_RETURN(Pattern pattern, Pattern::from_json(j.value("pattern", Json()), where + ".pattern"));
    ZE_ASSIGN_OR_RETURN(std::string content, string_field(j, where, "content"));
    return std::make_unique<ReplaceNormalizer>(std::move(pattern), std::move(content));
  }
  if (type == "Sequence") {
    ZE_ASSIGN_OR_RETURN(auto stages, make_all<Normalizer>(j, where, "normalizers", make_normalizer));
    return std::make_unique<SequenceNormalizer>(std::move(stages));
  }
  return unsupported(where, type, "NFC, NFD, NFKC, NFKD, Lowercase, Strip, Prepend, Replace and Sequence");
}

}  // namespace zero
