// UTF-8 helpers; see unicode_text.h. Normal forms, case and categories come
// from ICU (Debian's libicu-dev), the library Unicode's own data ships in.
#include "runtime/data/unicode_text.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include "core/check.h"

namespace zero::unicode {

int valid_sequence_length(std::string_view s, size_t i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  const unsigned char c = p[i];
  if (c < 0x80) return 1;
  auto cont = [&](size_t k) { return i + k < n && (p[i + k] & 0xC0) == 0x80; };
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    if (c == 0xE0 && p[i + 1] < 0xA0) return 0;  // overlong
    if (c == 0xED && p[i + 1] >= 0xA0) return 0;  // surrogate
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if (c == 0xF0 && p[i + 1] < 0x90) return 0;  // overlong
    if (c == 0xF4 && p[i + 1] >= 0x90) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;
}

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    // Eight ASCII bytes at a time: most text is mostly ASCII.
    while (i + 8 <= s.size()) {
      uint64_t w;
      __builtin_memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= s.size()) break;
    const int len = valid_sequence_length(s, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

namespace {

// Bytes of the maximal subpart of an ill-formed sequence at s[i]: the lead
// byte and the continuation bytes that could still have completed it
// (Unicode's "maximal subpart" rule, which Python and Rust follow).
size_t ill_formed_length(std::string_view s, size_t i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const unsigned char c = p[i];
  int need = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) need = 1;
  else if (c == 0xE0) need = 2, lo = 0xA0;
  else if (c == 0xED) need = 2, hi = 0x9F;
  else if (c >= 0xE1 && c <= 0xEF) need = 2;
  else if (c == 0xF0) need = 3, lo = 0x90;
  else if (c == 0xF4) need = 3, hi = 0x8F;
  else if (c >= 0xF1 && c <= 0xF3) need = 3;
  else return 1;
  size_t k = 1;
  if (i + k < s.size() && p[i + k] >= lo && p[i + k] <= hi) {
    ++k;
    while (static_cast<int>(k) <= need && i + k < s.size() && (p[i + k] & 0xC0) == 0x80) ++k;
  }
  return k;
}

}  // namespace

std::string repair_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 16);
  size_t i = 0;
  while (i < s.size()) {
    const int len = valid_sequence_length(s, i);
    if (len == 0) {
      out += "\xEF\xBF\xBD";
      i += ill_formed_length(s, i);
    } else {
      out.append(s.data() + i, len);
      i += len;
    }
  }
  return out;
}

char32_t decode_at(std::string_view s, size_t i, int* length) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + i;
  const int len = utf8_length(p[0]);
  *length = len;
  switch (len) {
    case 1: return p[0];
    case 2: return ((p[0] & 0x1F) << 6) | (p[1] & 0x3F);
    case 3: return ((p[0] & 0x0F) << 12) | ((p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    default: return ((p[0] & 0x07) << 18) | ((p[1] & 0x3F) << 12) | ((p[2] & 0x3F) << 6) | (p[3] & 0x3F);
  }
}

void append_utf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

bool is_ascii(std::string_view s) {
  for (unsigned char c : s) {
    if (c >= 0x80) return false;
  }
  return true;
}

const icu::Normalizer2* normalizer_for(NormalForm form) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case NormalForm::kNFC: n = icu::Normalizer2::getNFCInstance(status); break;
    case NormalForm::kNFD: n = icu::Normalizer2::getNFDInstance(status); break;
    case NormalForm::kNFKC: n = icu::Normalizer2::getNFKCInstance(status); break;
    case NormalForm::kNFKD: n = icu::Normalizer2::getNFKDInstance(status); break;
  }
  ZE_CHECK(U_SUCCESS(status) && n != nullptr) << "ICU normalizer data unavailable: " << u_errorName(status);
  return n;
}

}  // namespace

std::string normalize(std::string_view s, NormalForm form) {
  if (is_ascii(s)) return std::string(s);
  const icu::Normalizer2* n = normalizer_for(form);
  const icu::UnicodeString in = icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size())));
  UErrorCode status = U_ZERO_ERROR;
  const icu::UnicodeString normalized = n->normalize(in, status);
  ZE_CHECK(U_SUCCESS(status)) << "ICU normalize: " << u_errorName(status);
  std::string out;
  normalized.toUTF8String(out);
  return out;
}

std::string lowercase(std::string_view s) {
  if (is_ascii(s)) {
    std::string out(s);
    for (char& c : out) {
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
    return out;
  }
  // One code point at a time, as Rust's char::to_lowercase: no context (a
  // final sigma stays σ), but full mappings (İ becomes i + U+0307).
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    int len = 0;
    const char32_t cp = decode_at(s, i, &len);
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp >= 'A' && cp <= 'Z' ? cp - 'A' + 'a' : cp));
    } else {
      icu::UnicodeString u(static_cast<UChar32>(cp));
      u.toLower(icu::Locale::getRoot());
      u.toUTF8String(out);
    }
    i += len;
  }
  return out;
}

bool is_numeric(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  const int8_t t = u_charType(static_cast<UChar32>(cp));
  return t == U_DECIMAL_DIGIT_NUMBER || t == U_LETTER_NUMBER || t == U_OTHER_NUMBER;
}

bool is_word_char(char32_t cp) {
  if (cp < 0x80) return cp == '_' || (cp >= '0' && cp <= '9') || ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z');
  if (cp == 0x200C || cp == 0x200D) return true;  // Join_Control
  const int8_t t = u_charType(static_cast<UChar32>(cp));
  return u_hasBinaryProperty(static_cast<UChar32>(cp), UCHAR_ALPHABETIC) || t == U_NON_SPACING_MARK ||
         t == U_ENCLOSING_MARK || t == U_COMBINING_SPACING_MARK || t == U_DECIMAL_DIGIT_NUMBER ||
         t == U_CONNECTOR_PUNCTUATION;
}

bool is_whitespace(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return u_hasBinaryProperty(static_cast<UChar32>(cp), UCHAR_WHITE_SPACE);
}

}  // namespace zero::unicode
