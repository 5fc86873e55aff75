// errno -> absl::Status for the I/O engine; see io_errors.h.
#include "offload/io_errors.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>

#include <cerrno>
#include <cstring>

#include "core/memory_tracker.h"
#include "core/strings.h"

namespace zero {

namespace {

std::string parent_directory(std::string_view path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string_view::npos) return ".";
  if (slash == 0) return "/";
  return std::string(path.substr(0, slash));
}

bool directory_exists(const std::string& dir) {
  struct stat st;
  return ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// " (ext4)": the filesystem type of `dir`, for messages about O_DIRECT support.
std::string filesystem_note(const std::string& dir) {
  struct statfs fs;
  if (::statfs(dir.c_str(), &fs) != 0) return "";
  switch (static_cast<uint64_t>(fs.f_type)) {
    case 0xEF53: return " (ext4)";
    case 0x58465342: return " (xfs)";
    case 0x9123683E: return " (btrfs)";
    case 0x01021994: return " (tmpfs)";
    case 0x858458F6: return " (ramfs)";
    case 0x794C7630: return " (overlayfs)";
    case 0x65735546: return " (fuse)";
    case 0x6969: return " (nfs)";
    case 0xFF534D42: return " (cifs)";
    case 0x9FA0: return " (proc)";
    default: return cat(" (filesystem type 0x", std::hex, static_cast<uint64_t>(fs.f_type), ")");
  }
}

// " (3.2 MiB free of 1.0 GiB)": free space of the filesystem holding `dir`.
std::string free_space_note(const std::string& dir) {
  struct statvfs vfs;
  if (::statvfs(dir.c_str(), &vfs) != 0) return "";
  const auto avail = static_cast<int64_t>(vfs.f_bavail * vfs.f_frsize);
  const auto total = static_cast<int64_t>(vfs.f_blocks * vfs.f_frsize);
  return cat(" (", format_bytes(avail), " free of ", format_bytes(total), ")");
}

std::string memlock_limit_note() {
  struct rlimit rl;
  if (::getrlimit(RLIMIT_MEMLOCK, &rl) != 0) return "";
  if (rl.rlim_cur == RLIM_INFINITY) return " (RLIMIT_MEMLOCK is unlimited)";
  return cat(" (RLIMIT_MEMLOCK is ", format_bytes(static_cast<int64_t>(rl.rlim_cur)), ")");
}

std::string errno_name(int err) {
  const char* name = strerrorname_np(err);
  return name != nullptr ? name : cat("errno ", err);
}

}  // namespace

std::string_view io_call_name(IoCall call) {
  switch (call) {
    case IoCall::kSetup: return "setting up io_uring";
    case IoCall::kRegisterBuffers: return "registering I/O buffers with io_uring";
    case IoCall::kRegisterFiles: return "registering files with io_uring";
    case IoCall::kOpenRead: return "opening for reading";
    case IoCall::kOpenWrite: return "opening for writing";
    case IoCall::kRead: return "reading";
    case IoCall::kWrite: return "writing";
    case IoCall::kStat: return "querying the size of";
    case IoCall::kPreallocate: return "reserving disk space for";
    case IoCall::kClose: return "closing";
    case IoCall::kSubmit: return "submitting to io_uring";
  }
  return "I/O";
}

absl::Status io_errno_status(int err, IoCall call, std::string_view path, std::string_view detail) {
  using Code = absl::StatusCode;
  const std::string dir = path.empty() ? std::string() : parent_directory(path);
  const std::string what = cat(io_call_name(call), path.empty() ? "" : " ", path, detail, ": ",
                               std::strerror(err), " (", errno_name(err), ")");
  auto make = [&](Code code, const std::string& hint) { return absl::Status(code, cat(what, ": ", hint)); };
  const bool opening = call == IoCall::kOpenRead || call == IoCall::kOpenWrite;
  switch (err) {
    case ENOSPC:
    case EDQUOT:
      return make(Code::kResourceExhausted,
                  cat("the filesystem holding ", dir, " has no room for this", free_space_note(dir),
                      "; free space there or point the swap path (nvme_path) at a filesystem with room "
                      "for the swap files"));
    case EROFS:
      return make(Code::kPermissionDenied, cat("the filesystem holding ", dir,
                                               " is mounted read-only; remount it read-write or choose "
                                               "a writable swap directory"));
    case EACCES:
    case EPERM:
      if (call == IoCall::kSetup) {
        return make(Code::kUnavailable,
                    "io_uring is disabled for this process: check sysctl kernel.io_uring_disabled (2 "
                    "disables it, 1 limits it to kernel.io_uring_group) and the container's seccomp "
                    "profile (Docker's default blocks io_uring; run with a profile that allows it)");
      }
      if (call == IoCall::kRegisterBuffers) {
        return make(Code::kResourceExhausted,
                    cat("pinning the buffers needs locked memory", memlock_limit_note(),
                        "; raise it (ulimit -l unlimited, LimitMEMLOCK= in systemd, --ulimit "
                        "memlock=-1 in docker)"));
      }
      return make(Code::kPermissionDenied,
                  cat("no permission in ", dir,
                      "; check the owner and mode of the file and its directory (ls -ld), an "
                      "immutable attribute (lsattr) and whether the mount is read-only"));
    case ENOENT:
      if (call == IoCall::kOpenRead && directory_exists(dir)) {
        return make(Code::kNotFound, "the file does not exist: it is read before it was ever written "
                                     "(swapped out), or the swap directory was cleaned");
      }
      return make(Code::kNotFound,
                  cat("directory ", dir, " does not exist; create it (mkdir -p ", dir, ") or fix the path"));
    case ENOTDIR:
      return make(Code::kNotFound, "a component of the path is not a directory; fix the path");
    case EISDIR:
      return make(Code::kInvalidArgument, "the path is a directory; give a file path inside it");
    case ENAMETOOLONG:
      return make(Code::kInvalidArgument, "the path is too long; use a shorter swap directory");
    case EINVAL:
      if (opening) {
        return make(Code::kFailedPrecondition,
                    cat("the filesystem holding ", dir, filesystem_note(dir),
                        " does not support O_DIRECT; put the swap directory on a local filesystem "
                        "that does (ext4, xfs or btrfs on an NVMe drive)"));
      }
      if (call == IoCall::kRead || call == IoCall::kWrite) {
        return make(Code::kInvalidArgument,
                    "the device rejected the request's alignment: buffer address, file offset and "
                    "length must be multiples of its logical block size (4096 always works)");
      }
      if (call == IoCall::kRegisterBuffers) {
        return make(Code::kInvalidArgument, "the kernel takes at most 16384 buffers of at most 1 GiB each");
      }
      if (call == IoCall::kRegisterFiles) {
        return make(Code::kUnimplemented, "this kernel has no sparse registered file table (Linux 5.19+)");
      }
      if (call == IoCall::kSetup) {
        return make(Code::kInvalidArgument, "the kernel rejected the ring size (aio.queue_depth)");
      }
      return make(Code::kInvalidArgument, "invalid argument");
    case EOPNOTSUPP:
      if (call == IoCall::kRegisterBuffers) {
        return make(Code::kInvalidArgument, "only anonymous (not file-backed) memory can be registered");
      }
      return make(Code::kUnimplemented, cat("the filesystem holding ", dir, filesystem_note(dir),
                                            " does not support this operation"));
    case ENOMEM:
      if (call == IoCall::kRegisterBuffers || call == IoCall::kSetup) {
        return make(Code::kResourceExhausted,
                    cat("not enough locked memory", memlock_limit_note(),
                        "; raise it (ulimit -l unlimited, LimitMEMLOCK= in systemd, --ulimit "
                        "memlock=-1 in docker) or use fewer or smaller buffers"));
      }
      return make(Code::kResourceExhausted, "the kernel is out of memory");
    case ENOSYS:
      return make(Code::kUnavailable, "this kernel has no io_uring (Linux 5.10 or later is needed), or a "
                                      "seccomp profile hides it");
    case EMFILE:
    case ENFILE:
      return make(Code::kResourceExhausted, "too many open files; raise the limit (ulimit -n)");
    case EFBIG:
      return make(Code::kOutOfRange, "the offset is beyond the largest file this filesystem holds");
    case EIO:
      return make(Code::kDataLoss, "the device reported an I/O error; check dmesg and the drive's "
                                   "health (smartctl -a) before trusting this disk");
    case EAGAIN:
    case EBUSY:
      return make(Code::kUnavailable, "the kernel kept refusing the request for lack of resources; retry, "
                                      "or lower aio.queue_depth");
    case EBADF:
      return make(Code::kInternal, "the file descriptor is not open (closed while in use)");
    default:
      return make(Code::kUnknown, "unexpected error");
  }
}

}  // namespace zero
