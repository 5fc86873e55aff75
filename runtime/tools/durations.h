// Durations as a person reads them in a progress line: "42s", "3m07s",
// "1h05m" ("?" when negative or not finite), for zero-train's ETA and wall
// time and zero-data's.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "absl/strings/str_format.h"

namespace zero {

inline std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t t = static_cast<int64_t>(seconds + 0.5);
  if (t >= 3600) return absl::StrFormat("%dh%02dm", t / 3600, (t / 60) % 60);
  if (t >= 60) return absl::StrFormat("%dm%02ds", t / 60, t % 60);
  return absl::StrFormat("%ds", t);
}

}  // namespace zero
