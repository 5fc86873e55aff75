// A benchmark's scratch file that is removed however the program ends: when
// the owning object goes, and on SIGINT, SIGTERM and SIGHUP, whose handler
// unlinks it (async-signal-safe: the path in a fixed buffer, then unlink) and
// lets the process die of the signal, so the shell sees 128 + signal
// (SIGKILL aside). One such file at a time per process.
//   FileRemover   removes a path the program names and writes itself
//                 (io_bench's O_DIRECT file);
//   TempTextFile  writes a text to a new file in $TMPDIR (else /tmp) and
//                 removes it (tokenizer_bench's text for its peer).
#pragma once

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace zero::bench {

namespace temp_file_internal {

// The file the signal handler removes; "" when none.
inline char g_signal_path[PATH_MAX] = "";

inline void remove_file_and_die(int sig) {
  if (g_signal_path[0] != '\0') ::unlink(g_signal_path);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace temp_file_internal

// Removes `path` when this object goes, and on SIGINT, SIGTERM and SIGHUP
// (then dies of the signal).
class FileRemover {
 public:
  explicit FileRemover(const std::string& path) : path_(path) {
    std::snprintf(temp_file_internal::g_signal_path, sizeof(temp_file_internal::g_signal_path), "%s", path.c_str());
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, temp_file_internal::remove_file_and_die);
  }
  ~FileRemover() {
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, SIG_DFL);
    temp_file_internal::g_signal_path[0] = '\0';
    ::unlink(path_.c_str());
  }
  FileRemover(const FileRemover&) = delete;
  FileRemover& operator=(const FileRemover&) = delete;

 private:
  std::string path_;
};

// Writes `text` to a new file $TMPDIR/NAME.XXXXXX (else /tmp/NAME.XXXXXX)
// that is removed as FileRemover removes its path. path() is "" when the file
// could not be made; error() says why it could not be made or written.
class TempTextFile {
 public:
  TempTextFile(const std::string& name, const std::string& text) {
    const char* tmp = std::getenv("TMPDIR");
    const std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/" + name + ".XXXXXX";
    std::vector<char> path(pattern.begin(), pattern.end());
    path.push_back('\0');
    const int fd = ::mkstemp(path.data());
    if (fd < 0) {
      error_ = pattern + ": " + std::strerror(errno);
      return;
    }
    path_ = path.data();
    remover_.emplace(path_);
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        error_ = path_ + ": " + std::strerror(errno);
        break;
      }
      done += static_cast<size_t>(w);
    }
    ::close(fd);
  }
  TempTextFile(const TempTextFile&) = delete;
  TempTextFile& operator=(const TempTextFile&) = delete;
  const std::string& path() const { return path_; }
  const std::string& error() const { return error_; }

 private:
  std::string path_, error_;
  std::optional<FileRemover> remover_;  // set once the file exists
};

}  // namespace zero::bench
