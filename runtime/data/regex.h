// Regular expressions for the tokenizers' split patterns, through PCRE2 in
// UTF mode with Unicode properties (`\p{L}`, `\s` as Unicode white space) and
// its JIT compiler. The patterns Hugging Face files carry (GPT-2's, Llama-3's,
// Qwen2's: `(?i:'s|...)`, `\p{N}{1,3}`, `\s+(?!\S)`) are written for Oniguruma
// and fancy-regex; PCRE2 reads that syntax as they do.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace zero {

class Regex {
 public:
  // Fails naming the pattern and PCRE2's message with its offset.
  static absl::StatusOr<Regex> compile(std::string_view pattern);
  // A pattern that matches `literal` exactly.
  static absl::StatusOr<Regex> literal(std::string_view literal);

  // Calls f(begin, end) for each non-overlapping, non-empty match in `text`
  // (valid UTF-8), left to right.
  template <typename F>
  void for_each_match(std::string_view text, F&& f) const {
    size_t pos = 0;
    size_t begin = 0, end = 0;
    while (pos <= text.size() && find(text, pos, &begin, &end)) {
      if (end > begin) {
        f(begin, end);
        pos = end;
      } else {
        pos = begin + 1;  // an empty match: step over one byte (then to the next character)
        while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
      }
    }
  }

  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  bool find(std::string_view text, size_t from, size_t* begin, size_t* end) const;
  std::shared_ptr<const Code> code_;
  std::string pattern_;
};

}  // namespace zero
