// String building for messages. Debian's Abseil is built with its own
// absl::string_view (not std::string_view), so absl::StrCat does not take the
// std::string_view the rest of the code uses; cat() takes anything a stream
// prints.
#pragma once

#include <sstream>
#include <string>
#include <string_view>

namespace zero {

template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

}  // namespace zero
