// What the tokenizer.json stages share (tokenizer_components.h lists the
// stages): reading their JSON fields with messages that say where a value
// sits; patterns (a literal or a regular expression) and the cuts a Split
// makes with them, following `tokenizers`' NormalizedString::split for each
// delimiter behaviour; Metaspace's prepend scheme, read by its pre-tokenizer
// and its decoder.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/status.h"
#include "core/strings.h"
#include "runtime/config/json_file.h"
#include "runtime/data/regex.h"
#include "runtime/data/tokenizer_components.h"
#include "runtime/data/unicode_text.h"

namespace zero::tokenizer_json {

inline std::string type_of(const Json& j) { return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : ""; }

inline absl::Status unsupported(const std::string& where, const std::string& type, std::string_view kinds) {
  return absl::UnimplementedError(cat(where, ": type \"", type, "\" is not supported (", kinds, " are)"));
}

inline absl::Status bad_field(const std::string& where, std::string_view field, const Json& value, std::string_view expected) {
  return absl::InvalidArgumentError(cat(where, ".", field, " = ", value.dump(), ": expected ", expected));
}

inline absl::StatusOr<std::string> string_field(const Json& j, const std::string& where, std::string_view field) {
  const std::string key(field);
  if (!j.contains(key) || !j[key].is_string()) return bad_field(where, field, j.value(key, Json()), "a string");
  return j[key].get<std::string>();
}

// One character, as Metaspace's replacement and Strip's content are.
inline absl::StatusOr<std::string> char_field(const Json& j, const std::string& where, std::string_view field) {
  absl::StatusOr<std::string> s = string_field(j, where, field);
  if (!s.ok()) return s.status();
  if (s->empty() || static_cast<size_t>(unicode::utf8_length(static_cast<unsigned char>((*s)[0]))) != s->size()) {
    return bad_field(where, field, *s, "one character");
  }
  return *s;
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

inline absl::StatusOr<Behavior> behavior_of(const Json& j, const std::string& where) {
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
inline void split_piece(const TextPiece& piece, std::vector<Segment> segs, Behavior behavior, std::vector<TextPiece>& out) {
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
inline void split_all(std::vector<TextPiece>& pieces, Behavior behavior, SegmentsOf&& segments_of) {
  std::vector<TextPiece> out;
  out.reserve(pieces.size() * 4);
  for (const TextPiece& p : pieces) split_piece(p, segments_of(p.text), behavior, out);
  pieces = std::move(out);
}

inline void replace_all(std::string& text, std::string_view from, std::string_view to) {
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

inline void replace_pattern(std::string& text, const Pattern& pattern, std::string_view content) {
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

enum class Prepend { kAlways, kFirst, kNever };

inline absl::StatusOr<Prepend> prepend_scheme_of(const Json& j, const std::string& where) {
  if (j.contains("prepend_scheme")) {
    const std::string s = j["prepend_scheme"].is_string() ? j["prepend_scheme"].get<std::string>() : "";
    if (s == "always") return Prepend::kAlways;
    if (s == "first") return Prepend::kFirst;
    if (s == "never") return Prepend::kNever;
    return bad_field(where, "prepend_scheme", j["prepend_scheme"], "\"always\", \"first\" or \"never\"");
  }
  return j.value("add_prefix_space", true) ? Prepend::kAlways : Prepend::kNever;  // files before prepend_scheme
}

// The stages of a Sequence, each made by `make` and named by its index.
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


}  // namespace zero::tokenizer_json
