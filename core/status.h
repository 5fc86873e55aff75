// Status plumbing for errors a user can cause. Everything user-facing returns
// absl::Status / absl::StatusOr<T>; these macros keep call sites short.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "core/strings.h"

#define ZE_CONCAT_INNER(a, b) a##b
#define ZE_CONCAT(a, b) ZE_CONCAT_INNER(a, b)

#define ZE_RETURN_IF_ERROR(expr)                \
  do {                                          \
    ::absl::Status ze_status_ = (expr);         \
    if (!ze_status_.ok()) return ze_status_;    \
  } while (0)

#define ZE_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()

#define ZE_ASSIGN_OR_RETURN(lhs, expr) \
  ZE_ASSIGN_OR_RETURN_IMPL(ZE_CONCAT(ze_statusor_, __LINE__), lhs, expr)

namespace zero {

// Prefixes a status message with context ("reading data file x: ...") while
// keeping its code, so errors read outermost-first like a stack of reasons.
inline absl::Status annotate(const absl::Status& s, std::string_view context) {
  if (s.ok()) return s;
  return absl::Status(s.code(), cat(context, ": ", std::string_view(s.message().data(), s.message().size())));
}

}  // namespace zero
