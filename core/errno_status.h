// errno as an absl::Status: the one mapping from a failed system call's error
// number to the code a caller can act on (the disk is full, permission, a
// missing file or directory), for every file writer in the project.
#pragma once

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "core/strings.h"

namespace zero {

// "writing F: No space left on device (the disk is full)".
inline absl::Status errno_status(int err, const std::string& what) {
  const std::string msg = cat(what, ": ", std::strerror(err));
  switch (err) {
    case ENOSPC:
    case EDQUOT: return absl::ResourceExhaustedError(cat(msg, " (the disk is full)"));
    case ENOENT: return absl::NotFoundError(msg);
    case EACCES:
    case EPERM:
    case EROFS: return absl::PermissionDeniedError(msg);
    default: return absl::InternalError(msg);
  }
}

}  // namespace zero
