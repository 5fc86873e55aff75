// Normalizers, pre-tokenizers, decoders and post-processors of a
// tokenizer.json; see tokenizer_components.h.
#include "runtime/data/tokenizer_components.h"

#include <utility>

#include "core/status.h"
#include "core/strings.h"
#include "runtime/data/bpe_model.h"
#include "runtime/data/regex.h"
#include "runtime/data/unicode_text.h"

namespace zero {

namespace {

using Status = absl::Status;

std::string type_of(const Json& j) { return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : ""; }

absl::Status unsupported(const std::string& where, const std::string& type, std::string_view kinds) {
  return absl::UnimplementedError(cat(where, ": type \"", type, "\" is not supported (", kinds, " are)"));
}

absl::Status bad_field(const std::string& where, std::string_view field, const Json& value, std::string_view expected) {
  return absl::InvalidArgumentError(cat(where, ".", field, " = ", value.dump(), ": expected ", expected));
}

absl::StatusOr<std::string> string_field(const Json& j, const std::string& where, std::string_view field) {
  const std::string key(field);
  if (!j.contains(key) || !j[key].is_string()) return bad_field(where, field, j.value(key, Json()), "a string");
  return j[key].get<std::string>();
}

// One character, as Metaspace's replacement and Strip's content are.
absl::StatusOr<std::string> char_field(const Json& j, const std::string& where, std::string_view field) {
  ZE_ASSIGN_OR_RETURN(std::string s, string_field(j, where, field));
  if (s.empty() || static_cast<size_t>(unicode::utf8_length(static_cast<unsigned char>(s[0]))) != s.size()) {
    return bad_field(where, field, s, "one character");
  }
  return s;
}

// ---- what a Split-like stage cuts: (begin, end, is_match) segments covering the text

struct Segment {
  size_t begin, end;
  bool is_match;
};

// A pattern of a Replace or Split: a literal string or a regular expression.
class Pattern {
 public:
  static absl::StatusOr<Pattern> from_json(const Json& j, const std::string& where) {
    Pattern p;
    if (j.is_object() && j.contains("String") && j["String"].is_string()) {
      p.literal_ = j["String"].get<std::string>();
      return p;
    }
    if (j.is_object() && j.contains("Regex") && j["Regex"].is_string()) {
      absl::StatusOr<Regex> re = Regex::compile(j["Regex"].get<std::string>());
      if (!re.ok()) return absl::InvalidArgumentError(cat(where, ".Regex: ", re.status().message()));
      p.regex_ = std::move(*re);
      return p;
    }
    return bad_field(where, "", j, "{\"String\": ...} or {\"Regex\": ...}");
  }
  template <typename F>
  void for_each_match(std::string_view text, F&& f) const {
    if (regex_) return regex_->for_each_match(text, f);
    if (literal_.empty()) return;
    for (size_t at = text.find(literal_); at != std::string_view::npos; at = text.find(literal_, at + literal_.size())) {
      f(at, at + literal_.size());
    }
  }

 private:
  std::string literal_;
  std::optional<Regex> regex_;
};

template <typename ForEachMatch>
std::vector<Segment> segments(std::string_view text, ForEachMatch&& for_each_match) {
  std::vector<Segment> out;
  size_t prev = 0;
  for_each_match(text, [&](size_t b, size_t e) {
    if (b > prev) out.push_back({prev, b, false});
    out.push_back({b, e, true});
    prev = e;
  });
  if (prev < text.size()) out.push_back({prev, text.size(), false});
  return out;
}

// Each character for which pred holds is a match of its own.
template <typename Pred>
std::vector<Segment> char_segments(std::string_view text, Pred&& pred) {
  return segments(text, [&](std::string_view t, auto&& emit) {
    for (size_t i = 0; i < t.size();) {
      int len = 0;
      const char32_t cp = unicode::decode_at(t, i, &len);
      if (pred(cp)) emit(i, i + len);
      i += len;
    }
  });
}

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

absl::StatusOr<Behavior> behavior_of(const Json& j, const std::string& where) {
  const std::string b = j.is_string() ? j.get<std::string>() : "";
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  return bad_field(where, "behavior", j, "Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous");
}

// Cuts `piece` at the segments as `tokenizers`' NormalizedString::split does
// and appends the non-empty parts to `out`.
void split_piece(const TextPiece& piece, std::vector<Segment> segs, Behavior behavior, std::vector<TextPiece>& out) {
  struct Part {
    size_t begin, end;
    bool removed;
  };
  std::vector<Part> parts;
  switch (behavior) {
    case Behavior::kIsolated:
      for (const Segment& s : segs) parts.push_back({s.begin, s.end, false});
      break;
    case Behavior::kRemoved:
      for (const Segment& s : segs) parts.push_back({s.begin, s.end, s.is_match});
      break;
    case Behavior::kContiguous: {
      bool previous_match = false;
      for (const Segment& s : segs) {
        if (s.is_match == previous_match && !parts.empty()) parts.back().end = s.end;
        else parts.push_back({s.begin, s.end, false});
        previous_match = s.is_match;
      }
      break;
    }
    case Behavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Segment& s : segs) {
        if (s.is_match && !previous_match && !parts.empty()) parts.back().end = s.end;
        else parts.push_back({s.begin, s.end, false});
        previous_match = s.is_match;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool previous_match = false;
      for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
        if (it->is_match && !previous_match && !parts.empty()) parts.back().begin = it->begin;
        else parts.push_back({it->begin, it->end, false});
        previous_match = it->is_match;
      }
      std::reverse(parts.begin(), parts.end());
      break;
    }
  }
  for (const Part& p : parts) {
    if (p.removed || p.begin == p.end) continue;
    out.push_back(TextPiece{piece.text.substr(p.begin, p.end - p.begin), piece.at_start && p.begin == 0});
  }
}

template <typename SegmentsOf>
void split_all(std::vector<TextPiece>& pieces, Behavior behavior, SegmentsOf&& segments_of) {
  std::vector<TextPiece> out;
  out.reserve(pieces.size() * 4);
  for (const TextPiece& p : pieces) split_piece(p, segments_of(p.text), behavior, out);
  pieces = std::move(out);
}

void replace_all(std::string& text, std::string_view from, std::string_view to) {
  if (from.empty() || text.find(from) == std::string::npos) return;
  std::string out;
  out.reserve(text.size());
  size_t prev = 0;
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, prev)) {
    out.append(text, prev, at - prev);
    out.append(to);
    prev = at + from.size();
  }
  out.append(text, prev, std::string::npos);
  text = std::move(out);
}

void replace_pattern(std::string& text, const Pattern& pattern, std::string_view content) {
  std::string out;
  size_t prev = 0;
  bool any = false;
  pattern.for_each_match(text, [&](size_t b, size_t e) {
    out.append(text, prev, b - prev);
    out.append(content);
    prev = e;
    any = true;
  });
  if (!any) return;
  out.append(text, prev, std::string::npos);
  text = std::move(out);
}

// ---------------------------------------------------------------- normalizers

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

// ---------------------------------------------------------------- pre-tokenizers

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

enum class Prepend { kAlways, kFirst, kNever };

absl::StatusOr<Prepend> prepend_scheme_of(const Json& j, const std::string& where) {
  if (j.contains("prepend_scheme")) {
    const std::string s = j["prepend_scheme"].is_string() ? j["prepend_scheme"].get<std::string>() : "";
    if (s == "always") return Prepend::kAlways;
    if (s == "first") return Prepend::kFirst;
    if (s == "never") return Prepend::kNever;
    return bad_field(where, "prepend_scheme", j["prepend_scheme"], "\"always\", \"first\" or \"never\"");
  }
  return j.value("add_prefix_space", true) ? Prepend::kAlways : Prepend::kNever;  // files before prepend_scheme
}

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

// ---------------------------------------------------------------- decoders

class ByteLevelDecoder final : public Decoder {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      const size_t mark = bytes.size();
      bool all = true;
      for (size_t i = 0; i < t.size() && all;) {
        int len = 0;
        const int b = byte_level_byte(unicode::decode_at(t, i, &len));
        if (b < 0) all = false;
        else bytes.push_back(static_cast<char>(b));
        i += len;
      }
      if (!all) {  // a token not spelled in bytes (an added token): its own text
        bytes.resize(mark);
        bytes += t;
      }
    }
    tokens.assign(1, unicode::repair_utf8(bytes));
  }
};

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, Prepend prepend) : replacement_(std::move(replacement)), prepend_(prepend) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      replace_all(tokens[i], replacement_, i == 0 && prepend_ != Prepend::kNever ? "" : " ");
    }
  }

 private:
  std::string replacement_;
  Prepend prepend_;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(Pattern pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) replace_pattern(t, pattern_, content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

// Runs of "<0xAB>" tokens become the text their bytes spell; a run that is
// not valid UTF-8 becomes one U+FFFD per byte.
class ByteFallbackDecoder final : public Decoder {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    size_t run = 0;
    auto flush = [&] {
      if (run == 0) return;
      if (unicode::is_valid_utf8(bytes)) {
        out.push_back(bytes);
      } else {
        for (size_t k = 0; k < run; ++k) out.push_back("\xEF\xBF\xBD");
      }
      bytes.clear();
      run = 0;
    };
    for (std::string& t : tokens) {
      if (auto b = byte_token(t)) {
        bytes.push_back(static_cast<char>(*b));
        ++run;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }

 private:
  static std::optional<uint8_t> byte_token(const std::string& t) {
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return std::nullopt;
    auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
    const int hi = hex(t[3]), lo = hex(t[4]);
    if (hi < 0 || lo < 0) return std::nullopt;
    return static_cast<uint8_t>(hi * 16 + lo);
  }
};

class FuseDecoder final : public Decoder {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

class StripDecoder final : public Decoder {
 public:
  StripDecoder(std::string content, int64_t start, int64_t stop) : content_(std::move(content)), start_(start), stop_(stop) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      size_t begin = 0, end = t.size();
      for (int64_t k = 0; k < start_ && t.compare(begin, content_.size(), content_) == 0 && begin < end; ++k) begin += content_.size();
      for (int64_t k = 0; k < stop_ && end >= begin + content_.size() && t.compare(end - content_.size(), content_.size(), content_) == 0; ++k) end -= content_.size();
      t = t.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;
  int64_t start_, stop_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> stages) : stages_(std::move(stages)) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (const auto& s : stages_) s->apply(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> stages_;
};

template <typename T, typename Make>
absl::StatusOr<std::vector<std::unique_ptr<T>>> make_all(const Json& j, const std::string& where, std::string_view field,
                                                         Make&& make) {
  const std::string key(field);
  if (!j.contains(key) || !j[key].is_array()) return bad_field(where, field, j.value(key, Json()), "an array");
  std::vector<std::unique_ptr<T>> stages;
  for (size_t i = 0; i < j[key].size(); ++i) {
    ZE_ASSIGN_OR_RETURN(std::unique_ptr<T> s, make(j[key][i], cat(where, ".", field, "[", i, "]")));
    if (s) stages.push_back(std::move(s));
  }
  return stages;
}

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

absl::StatusOr<std::unique_ptr<Decoder>> make_decoder(const Json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j);
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") {
    ZE_ASSIGN_OR_RETURN(std::string replacement, char_field(j, where, "replacement"));
    ZE_ASSIGN_OR_RETURN(Prepend prepend, prepend_scheme_of(j, where));
    return std::make_unique<MetaspaceDecoder>(std::move(replacement), prepend);
  }
  if (type == "Replace") {
    ZE_ASSIGN_OR_RETURN(Pattern pattern, Pattern::from_json(j.value("pattern", Json()), where + ".pattern"));
    ZE_ASSIGN_OR_RETURN(std::string content, string_field(j, where, "content"));
    return std::make_unique<ReplaceDecoder>(std::move(pattern), std::move(content));
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    ZE_ASSIGN_OR_RETURN(std::string content, char_field(j, where, "content"));
    return std::make_unique<StripDecoder>(std::move(content), j.value("start", int64_t{0}), j.value("stop", int64_t{0}));
  }
  if (type == "Sequence") {
    ZE_ASSIGN_OR_RETURN(auto stages, make_all<Decoder>(j, where, "decoders", make_decoder));
    return std::make_unique<SequenceDecoder>(std::move(stages));
  }
  return unsupported(where, type, "ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip and Sequence");
}

absl::StatusOr<PostProcessor> make_post_processor(
    const Json& j, const std::string& where, const std::function<std::optional<int32_t>(const std::string&)>& token_id) {
  PostProcessor out;
  if (j.is_null()) return out;
  const std::string type = type_of(j);
  if (type == "ByteLevel") return out;  // offsets only
  if (type == "Sequence") {
    const Json& list = j.value("processors", Json());
    if (!list.is_array()) return bad_field(where, "processors", list, "an array");
    for (size_t i = 0; i < list.size(); ++i) {
      ZE_ASSIGN_OR_RETURN(PostProcessor p, make_post_processor(list[i], cat(where, ".processors[", i, "]"), token_id));
      out.prefix.insert(out.prefix.end(), p.prefix.begin(), p.prefix.end());
      out.suffix.insert(out.suffix.begin(), p.suffix.begin(), p.suffix.end());
    }
    return out;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    for (const char* field : {"cls", "sep"}) {
      const Json& pair = j.value(field, Json());
      if (!pair.is_array() || pair.size() != 2 || !pair[1].is_number_integer()) {
        return bad_field(where, field, pair, "[\"token\", id]");
      }
      (std::string(field) == "cls" ? out.prefix : out.suffix).push_back(pair[1].get<int32_t>());
    }
    return out;
  }
  if (type == "TemplateProcessing") {
    const Json& single = j.value("single", Json());
    const Json& specials = j.value("special_tokens", Json::object());
    if (!single.is_array()) return bad_field(where, "single", single, "an array of {\"SpecialToken\"} and {\"Sequence\"}");
    bool seen_sequence = false;
    for (size_t i = 0; i < single.size(); ++i) {
      const Json& item = single[i];
      if (item.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      if (!item.contains("SpecialToken") || !item["SpecialToken"].contains("id")) {
        return bad_field(where, cat("single[", i, "]"), item, "{\"SpecialToken\": {\"id\": ...}} or {\"Sequence\": ...}");
      }
      const std::string name = item["SpecialToken"]["id"].get<std::string>();
      std::vector<int32_t> ids;
      if (specials.contains(name) && specials[name].contains("ids")) {
        for (const Json& id : specials[name]["ids"]) ids.push_back(id.get<int32_t>());
      } else if (auto id = token_id(name)) {
        ids.push_back(*id);
      } else {
        return absl::InvalidArgumentError(cat(where, ".single[", i, "]: special token \"", name, "\" has no id"));
      }
      auto& side = seen_sequence ? out.suffix : out.prefix;
      side.insert(side.end(), ids.begin(), ids.end());
    }
    return out;
  }
  return unsupported(where, type, "TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing and Sequence");
}

}  // namespace zero
