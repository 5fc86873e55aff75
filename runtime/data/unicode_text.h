// UTF-8 helpers the tokenizers share: decoding one code point, repairing
// invalid UTF-8, the Unicode normal forms and lower-casing (through ICU), and
// the general categories the pre-tokenizers test (numbers). ASCII text takes
// fast paths that never call ICU: it is already in every normal form.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace zero::unicode {

// Length of the UTF-8 sequence starting with byte `lead` (1 for an invalid lead byte).
inline int utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;
}

// Length of the valid UTF-8 sequence at s[i], or 0 when the bytes there are not one.
int valid_sequence_length(std::string_view s, size_t i);

// True when s is valid UTF-8.
bool is_valid_utf8(std::string_view s);

// s with each ill-formed sequence replaced by one U+FFFD, as Python's
// bytes.decode(errors="replace") and Rust's String::from_utf8_lossy do.
std::string repair_utf8(std::string_view s);

// The code point at s[i] (valid UTF-8 assumed) and its length.
char32_t decode_at(std::string_view s, size_t i, int* length);
void append_utf8(char32_t cp, std::string* out);

enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };
std::string normalize(std::string_view s, NormalForm form);
// Unicode lower case one code point at a time, as `tokenizers`' Lowercase normalizer.
std::string lowercase(std::string_view s);

// Rust's char::is_numeric: general category Nd, Nl or No.
bool is_numeric(char32_t cp);
// Rust regex's \w (UTS #18 word characters: Alphabetic, marks, Nd, Pc, Join_Control).
bool is_word_char(char32_t cp);
// Unicode White_Space, as Rust's char::is_whitespace.
bool is_whitespace(char32_t cp);

}  // namespace zero::unicode
