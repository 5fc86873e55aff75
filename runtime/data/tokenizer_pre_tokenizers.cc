// Pre-tokenizers of a tokenizer.json (text -> pieces); see tokenizer_components.h.
#include "runtime/data/tokenizer_components.h"

#include "runtime/data/tokenizer_json_parts.h"

namespace zero {

using namespace tokenizer_json;  // NOLINT: the shared parts of every stage file

namespace {

// GPT-2's split, which ByteLevel applies when use_regex is true.
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::optional<Regex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}
  void apply(std::vector<TextPiece>& pieces) const override {
    if (add_prefix_space_) {
      for (TextPiece& p : pieces) {
        if (!p.text.empty() && p.text[0] != ' ') p.text.insert(p.text.begin(), ' ');  // an empty piece stays empty
      }
    }
    if (regex_) {
      split_all(pieces, Behavior::kIsolated, [&](std::string_view t) {
        return segments(t, [&](std::string_view s, auto&& emit) { regex_->for_each_match(s, emit); });
      });
    }
  }
  bool byte_level() const override { return true; }

 private:
  bool add_prefix_space_;
  std::optional<Regex> regex_;
};

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Pattern pattern, Behavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void apply(std::vector<TextPiece>& pieces) const override {
    split_all(pieces, behavior_, [&](std::string_view t) {
      std::vector<Segment> segs = segments(t, [&](std::string_view s, auto&& emit) { pattern_.for_each_match(s, emit); });
      if (invert_) {
        for (Segment& s : segs) s.is_match = !s.is_match;
      }
      return segs;
    });
  }

 private:
  Pattern pattern_;
  Behavior behavior_;
  bool invert_;
};

class DigitsPreTokenizer final : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual) : individual_(individual) {}
  void apply(std::vector<TextPiece>& pieces) const override {
    split_all(pieces, individual_ ? Behavior::kIsolated : Behavior::kContiguous,
              [](std::string_view t) { return char_segments(t, unicode::is_numeric); });
  }

 private:
  bool individual_;
};

class WhitespaceSplitPreTokenizer final : public PreTokenizer {
 public:
  void apply(std::vector<TextPiece>& pieces) const override {
    split_all(pieces, Behavior::kRemoved, [](std::string_view t) { return char_segments(t, unicode::is_whitespace); });
  }
};

// `\w+|[^\w\s]+` (Oniguruma's \w): words and runs of punctuation; white space dropped.
class WhitespacePreTokenizer final : public PreTokenizer {
 public:
  explicit WhitespacePreTokenizer(Regex regex) : regex_(std::move(regex)) {}
  void apply(std::vector<TextPiece>& pieces) const override {
    split_all(pieces, Behavior::kRemoved, [&](std::string_view t) {
      std::vector<Segment> segs = segments(t, [&](std::string_view s, auto&& emit) { regex_.for_each_match(s, emit); });
      for (Segment& s : segs) s.is_match = !s.is_match;
      return segs;
    });
  }

 private:
  Regex regex_;
};

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, Prepend prepend, bool split)
      : replacement_(std::move(replacement)), prepend_(prepend), split_(split) {}
  void apply(std::vector<TextPiece>& pieces) const override {
    for (TextPiece& p : pieces) {
      replace_all(p.text, " ", replacement_);
      const bool prepend = prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && p.at_start);
      // As `tokenizers`' NormalizedString::prepend, nothing is prepended to an empty piece.
      if (prepend && !p.text.empty() && p.text.compare(0, replacement_.size(), replacement_) != 0) p.text.insert(0, replacement_);
    }
    if (split_) {
      split_all(pieces, Behavior::kMergedWithNext, [&](std::string_view t) {
        return segments(t, [&](std::string_view s, auto&& emit) {
          for (size_t at = s.find(replacement_); at != std::string_view::npos; at = s.find(replacement_, at + replacement_.size())) {
            emit(at, at + replacement_.size());
          }
        });
      });
    }
  }

 private:
  std::string replacement_;
  Prepend prepend_;
  bool split_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> stages) : stages_(std::move(stages)) {}
  void apply(std::vector<TextPiece>& pieces) const override {
    for (const auto& s : stages_) s->apply(pieces);
  }
  bool byte_level() const override { return !stages_.empty() && stages_.back()->byte_level(); }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> stages_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(const Json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j);
  if (type == "ByteLevel") {
    std::optional<Regex> regex;
    if (j.value("use_regex", true)) {
      ZE_ASSIGN_OR_RETURN(Regex re, Regex::compile(kGpt2Pattern));
      regex = std::move(re);
    }
    return std::make_unique<ByteLevelPreTokenizer>(j.value("add_prefix_space", true), std::move(regex));
  }
  if (type == "Split") {
    ZE_ASSIGN_OR_RETURN(Pattern pattern, Pattern::from_json(j.value("pattern", Json()), where + ".pattern"));
    ZE_ASSIGN_OR_RETURN(Behavior behavior, behavior_of(j.value("behavior", Json()), where));
    return std::make_unique<SplitPreTokenizer>(std::move(pattern), behavior, j.value("invert", false));
  }
  if (type == "Digits") return std::make_unique<DigitsPreTokenizer>(j.value("individual_digits", false));
  if (type == "WhitespaceSplit") return std::make_unique<WhitespaceSplitPreTokenizer>();
  if (type == "Whitespace") {
    // \w as Oniguruma has it (UTS #18's word characters); PCRE2's \w differs (marks, No).
    ZE_ASSIGN_OR_RETURN(Regex re, Regex::compile(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}]+|)"
                                                 R"([^\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}\s]+)"));
    return std::make_unique<WhitespacePreTokenizer>(std::move(re));
  }
  if (type == "Metaspace") {
    ZE_ASSIGN_OR_RETURN(std::string replacement, char_field(j, where, "replacement"));
    ZE_ASSIGN_OR_RETURN(Prepend prepend, prepend_scheme_of(j, where));
    return std::make_unique<MetaspacePreTokenizer>(std::move(replacement), prepend, j.value("split", true));
  }
  if (type == "Sequence") {
    ZE_ASSIGN_OR_RETURN(auto stages, make_all<PreTokenizer>(j, where, "pretokenizers", make_pre_tokenizer));
    for (size_t i = 0; i + 1 < stages.size(); ++i) {
      if (stages[i]->byte_level()) {
        return absl::UnimplementedError(cat(where, ".pretokenizers[", i,
                                            "]: ByteLevel before another pre-tokenizer is not supported (it must come last)"));
      }
    }
    return std::make_unique<SequencePreTokenizer>(std::move(stages));
  }
  return unsupported(where, type, "ByteLevel, Split, Digits, Metaspace, Whitespace, WhitespaceSplit and Sequence");
}

}  // namespace zero
