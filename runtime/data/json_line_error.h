// What went wrong in one JSON line, for a message that already names the file
// and line: nlohmann's "[json.exception.parse_error.101] parse error at line
// 1, column 7: syntax error ..." as "column 7: syntax error ...", cut to 200
// characters (an unterminated string's "last read" is the rest of the line).
#pragma once

#include <string>

namespace zero {

inline std::string json_line_error_text(const std::string& what) {
  size_t at = what.find("column ");
  if (at == std::string::npos) at = what.find("] ") == std::string::npos ? 0 : what.find("] ") + 2;
  std::string text = what.substr(at);
  constexpr size_t kMaxChars = 200;
  if (text.size() > kMaxChars) text = text.substr(0, kMaxChars) + "...";
  return text;
}

}  // namespace zero
