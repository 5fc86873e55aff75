// How the I/O engine explains a failed system call: one function turns the
// errno of any liburing or system call into an absl::Status whose code follows
// the cause and whose message names the operation, the path and the fix
// ("writing /nvme/swap/opt_3.swp at offset 1048576 (1048576 bytes): No space
// left on device (ENOSPC): the filesystem holding /nvme/swap has no room for
// this (0 B free of 1.0 GiB); free space there or ..."). Code that adds a
// system call to the offload path adds its IoCall here, so every I/O error
// reads alike.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"

namespace zero {

// The calls whose errno io_errno_status() explains.
enum class IoCall : uint8_t {
  kSetup,            // io_uring_queue_init_params
  kRegisterBuffers,  // io_uring_register_buffers
  kRegisterFiles,    // io_uring_register_files_sparse / _update
  kOpenRead,         // open(2) for kRead
  kOpenWrite,        // open(2) for kWrite / kReadWrite
  kRead,             // a read request's completion
  kWrite,            // a write request's completion
  kStat,             // fstat(2)
  kPreallocate,      // fallocate(2)
  kClose,            // close(2)
  kSubmit,           // io_uring_submit / io_uring_wait_cqe
};

std::string_view io_call_name(IoCall call);  // "opening for writing", "reading", ...

// The one place an errno (positive) from liburing or a system call becomes a
// Status: the code follows the cause (ENOSPC -> RESOURCE_EXHAUSTED, EACCES ->
// PERMISSION_DENIED, ENOENT -> NOT_FOUND, EINVAL at open -> FAILED_PRECONDITION
// "no O_DIRECT", ...) and the message reads "<call> <path><detail>: <strerror>
// (<ENAME>): <what to do>".
absl::Status io_errno_status(int err, IoCall call, std::string_view path, std::string_view detail = {});

}  // namespace zero
