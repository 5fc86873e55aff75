// PCRE2 behind Regex; see regex.h. One match-data block per thread (only
// the whole match's offsets are read), so a compiled Regex is shared by the
// threads that encode documents.
#include "runtime/data/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/check.h"
#include "core/strings.h"

namespace zero {

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

struct MatchData {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  ~MatchData() { pcre2_match_data_free(data); }
};

pcre2_match_data* thread_match_data() {
  thread_local MatchData md;
  return md.data;
}

}  // namespace

namespace {

// White space as Oniguruma's \s (what `tokenizers` runs) has it: PCRE2 10.42
// also counts U+180E MONGOLIAN VOWEL SEPARATOR, which Unicode dropped from
// White_Space in 6.3.
constexpr const char* kSpaceClassBody = R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// `pattern` with \s spelled out as kSpaceClassBody (inside a class, its body;
// outside, a class of it) and \S outside a class as its negation. A \S
// inside a class stays PCRE2's.
std::string with_onig_spaces(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      if (e == 's') {
        out += in_class ? cat(kSpaceClassBody) : cat("[", kSpaceClassBody, "]");
      } else if (e == 'S' && !in_class) {
        out += cat("[^", kSpaceClassBody, "]");
      } else if (e == 'Q') {  // \Q...\E quotes: copied as they are
        const size_t end = pattern.find("\\E", i + 1);
        const size_t stop = end == std::string_view::npos ? pattern.size() : end + 2;
        out += "\\Q";
        out.append(pattern.substr(i + 1, stop - i - 1));
        i = stop - 1;
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {  // [:alpha:]
      const size_t end = pattern.find(":]", i + 2);
      const size_t stop = end == std::string_view::npos ? i + 1 : end + 2;
      out.append(pattern.substr(i, stop - i));
      i = stop - 1;
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

absl::StatusOr<Regex> Regex::compile(std::string_view written) {
  const std::string pattern = with_onig_spaces(written);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    return absl::InvalidArgumentError(
        cat("regular expression \"", written, "\": ", pcre2_message(error), " at offset ", offset,
            pattern != written ? cat(" of \"", pattern, "\" (\\s spelled out)") : std::string()));
  }
  auto c = std::make_shared<Code>();
  c->code = code;
  c->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  Regex r;
  r.code_ = std::move(c);
  r.pattern_ = std::string(written);
  return r;
}

absl::StatusOr<Regex> Regex::literal(std::string_view literal) {
  std::string quoted = "\\Q";
  size_t start = 0;
  // \Q...\E quotes everything but an \E inside it, which is closed and re-opened around.
  for (size_t at; (at = literal.find("\\E", start)) != std::string_view::npos; start = at + 2) {
    quoted.append(literal.substr(start, at - start));
    quoted += "\\E\\\\E\\Q";
  }
  quoted.append(literal.substr(start));
  quoted += "\\E";
  return compile(quoted);
}

bool Regex::find(std::string_view text, size_t from, size_t* begin, size_t* end) const {
  pcre2_match_data* md = thread_match_data();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  int rc = code_->jit ? pcre2_jit_match(code_->code, subject, text.size(), from, 0, md, nullptr)
                      : pcre2_match(code_->code, subject, text.size(), from, PCRE2_NO_UTF_CHECK, md, nullptr);
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {  // a pathological input: the interpreter has no such limit
    rc = pcre2_match(code_->code, subject, text.size(), from, PCRE2_NO_UTF_CHECK, md, nullptr);
  }
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  ZE_CHECK(rc >= 0) << "PCRE2 match of \"" << pattern_ << "\": " << pcre2_message(rc);
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
  *begin = ov[0];
  *end = ov[1];
  return true;
}

}  // namespace zero
