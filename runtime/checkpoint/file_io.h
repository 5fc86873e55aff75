// File operations for checkpoints, every one checked and mapped to a Status
// that names the path and the operation ("writing /ckpt/x/rank_00001.shard:
// no space left on device"). Writes go to a temporary name, are fsynced, then
// renamed, and the directory is fsynced, so a crash leaves the old file or
// the new one, never a torn one. Reads are of regular files only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace zero {

class FileWriter {
 public:
  // Creates (or truncates) path for writing.
  static absl::StatusOr<FileWriter> create(const std::string& path);
  FileWriter(FileWriter&& other) noexcept;
  FileWriter& operator=(FileWriter&&) = delete;
  ~FileWriter();  // closes without syncing if close() was not called

  absl::Status write(const void* data, size_t bytes);
  // fsync, then close.
  absl::Status close();
  int64_t bytes_written() const { return written_; }
  const std::string& path() const { return path_; }

 private:
  FileWriter(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
  int64_t written_ = 0;
};

class FileReader {
 public:
  // Opens a regular file; anything else (a named pipe, a device, a
  // directory) is FAILED_PRECONDITION naming the path and what it is, at
  // once: a named pipe does not block the open waiting for a writer.
  static absl::StatusOr<FileReader> open(const std::string& path);
  FileReader(FileReader&& other) noexcept;
  FileReader& operator=(FileReader&&) = delete;
  ~FileReader();

  int64_t size() const { return size_; }
  // Reads exactly `bytes` at `offset`; fails naming the path if the file ends first.
  absl::Status read_at(int64_t offset, void* data, size_t bytes) const;
  const std::string& path() const { return path_; }

 private:
  FileReader(int fd, std::string path, int64_t size) : fd_(fd), path_(std::move(path)), size_(size) {}
  int fd_ = -1;
  std::string path_;
  int64_t size_ = 0;
};

// Writes contents to path atomically (path.tmp, fsync, rename, fsync dir).
absl::Status write_file_atomic(const std::string& path, const std::string& contents);
absl::StatusOr<std::string> read_file(const std::string& path);
absl::Status rename_path(const std::string& from, const std::string& to);
absl::Status fsync_directory(const std::string& dir);
absl::Status make_directories(const std::string& dir);
// Removes a directory tree (best effort on already-missing entries).
absl::Status remove_tree(const std::string& path);
// Writes the directory `out_dir` atomically, as the exports do (a Hugging
// Face model directory, a PEFT adapter): fill(partial) writes its files into
// the hidden sibling "<parent>/.<name>.partial" (one an interrupted write
// left is removed first), which is fsynced and renamed to out_dir, then the
// parent is fsynced. Refused with ALREADY_EXISTS, out_dir left as it was,
// when out_dir exists and is not an empty directory (checked before and
// again just before the rename: an empty one is replaced). On any failure
// the partial directory is removed. `what` names the output in errors ("a
// Hugging Face directory").
absl::Status write_directory_atomic(const std::string& out_dir, const std::string& what,
                                    const std::function<absl::Status(const std::string& partial)>& fill);
// Entries of a directory (names only), sorted.
absl::StatusOr<std::vector<std::string>> list_directory(const std::string& dir);

// errno as a Status: "<op> <path>: <strerror>" with the right code.
absl::Status errno_status(int err, const std::string& op, const std::string& path);

}  // namespace zero
