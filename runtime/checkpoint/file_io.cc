// Checked file operations; see file_io.h.
#include "runtime/checkpoint/file_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/status.h"
#include "core/errno_status.h"
#include "core/strings.h"

namespace zero {

absl::Status errno_status(int err, const std::string& op, const std::string& path) {
  return errno_status(err, cat(op, " ", path));
}

absl::StatusOr<FileWriter> FileWriter::create(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_status(errno, "creating", path);
  return FileWriter(fd, path);
}

FileWriter::FileWriter(FileWriter&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)), written_(o.written_) {
  o.fd_ = -1;
}

FileWriter::~FileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status FileWriter::write(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t w = ::write(fd_, p, bytes);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno_status(errno, "writing", path_);
    }
    p += w;
    bytes -= static_cast<size_t>(w);
    written_ += w;
  }
  return absl::OkStatus();
}

absl::Status FileWriter::close() {
  if (::fsync(fd_) != 0) return errno_status(errno, "syncing", path_);
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) return errno_status(errno, "closing", path_);
  return absl::OkStatus();
}

namespace {

// What a file that is not a regular one is, for the error.
const char* file_kind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a named pipe (FIFO)";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a plain file";
}

}  // namespace

absl::StatusOr<FileReader> FileReader::open(const std::string& path) {
  // O_NONBLOCK: opening a named pipe for reading would otherwise wait for a
  // writer, for ever; it is refused below. Cleared again for a regular file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return errno_status(errno, "opening", path);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return errno_status(err, "inspecting", path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::FailedPreconditionError(cat(path, ": ", file_kind(st.st_mode), ", not a regular file (give the file "
                                             "itself, not a pipe or device that streams it)"));
  }
  if (const int flags = fcntl(fd, F_GETFL); flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    const int err = errno;
    ::close(fd);
    return errno_status(err, "opening", path);
  }
  return FileReader(fd, path, st.st_size);
}

FileReader::FileReader(FileReader&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)), size_(o.size_) { o.fd_ = -1; }

FileReader::~FileReader() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status FileReader::read_at(int64_t offset, void* data, size_t bytes) const {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t r = ::pread(fd_, p, bytes, offset);
    if (r < 0) {
      if (errno == EINTR) continue;
      return errno_status(errno, "reading", path_);
    }
    if (r == 0) {
      return absl::DataLossError(cat(path_, " ends at byte ", size_, " but ", bytes, " more bytes were expected at ",
                                     offset, " (truncated?)"));
    }
    p += r;
    bytes -= static_cast<size_t>(r);
    offset += r;
  }
  return absl::OkStatus();
}

absl::Status fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno_status(errno, "opening directory", dir);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return errno_status(err, "syncing directory", dir);
  return absl::OkStatus();
}

absl::Status rename_path(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) return errno_status(errno, cat("renaming ", from, " to"), to);
  return absl::OkStatus();
}

absl::Status write_file_atomic(const std::string& path, const std::string& contents) {
  const std::string tmp = path + ".tmp";
  ZE_ASSIGN_OR_RETURN(FileWriter w, FileWriter::create(tmp));
  absl::Status s = w.write(contents.data(), contents.size());
  if (s.ok()) s = w.close();
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  ZE_RETURN_IF_ERROR(rename_path(tmp, path));
  return fsync_directory(std::filesystem::path(path).parent_path().string());
}

absl::StatusOr<std::string> read_file(const std::string& path) {
  ZE_ASSIGN_OR_RETURN(FileReader r, FileReader::open(path));
  std::string out(static_cast<size_t>(r.size()), '\0');
  ZE_RETURN_IF_ERROR(r.read_at(0, out.data(), out.size()));
  return out;
}

absl::Status make_directories(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return errno_status(ec.value(), "creating directory", dir);
  return absl::OkStatus();
}

absl::Status remove_tree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) return errno_status(ec.value(), "removing", path);
  return absl::OkStatus();
}

absl::Status write_directory_atomic(const std::string& out_dir_in, const std::string& what,
                                    const std::function<absl::Status(const std::string& partial)>& fill) {
  namespace fs = std::filesystem;
  std::string out_dir = out_dir_in;
  while (out_dir.size() > 1 && out_dir.back() == '/') out_dir.pop_back();
  if (out_dir.empty()) return absl::InvalidArgumentError(cat("writing ", what, ": no output directory"));
  auto refuse_existing = [&]() -> absl::Status {
    std::error_code ec;
    if (!fs::exists(out_dir, ec)) return absl::OkStatus();
    if (!fs::is_directory(out_dir, ec)) {
      return absl::AlreadyExistsError(cat(out_dir, " exists and is not a directory; not overwriting it"));
    }
    if (!fs::is_empty(out_dir, ec)) {
      return absl::AlreadyExistsError(cat(out_dir, " exists and is not empty; not overwriting it (choose a new "
                                                   "directory, or remove that one)"));
    }
    return absl::OkStatus();
  };
  ZE_RETURN_IF_ERROR(refuse_existing());
  const fs::path out_path(out_dir);
  const std::string parent = out_path.has_parent_path() ? out_path.parent_path().string() : ".";
  const std::string partial = parent + "/." + out_path.filename().string() + ".partial";
  ZE_RETURN_IF_ERROR(make_directories(parent));
  ZE_RETURN_IF_ERROR(remove_tree(partial));  // an interrupted write's
  ZE_RETURN_IF_ERROR(make_directories(partial));
  const absl::Status s = [&]() -> absl::Status {
    ZE_RETURN_IF_ERROR(fill(partial));
    ZE_RETURN_IF_ERROR(fsync_directory(partial));
    ZE_RETURN_IF_ERROR(refuse_existing());              // filled while we wrote?
    ZE_RETURN_IF_ERROR(rename_path(partial, out_dir));  // replaces an empty directory
    return fsync_directory(parent);
  }();
  if (!s.ok()) (void)remove_tree(partial);
  return s;
}

absl::StatusOr<std::vector<std::string>> list_directory(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return errno_status(errno, "listing", dir);
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace zero
