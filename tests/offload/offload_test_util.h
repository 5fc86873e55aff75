// Helpers shared by the offload tests: a scratch directory that removes
// itself, deterministic byte patterns, O_DIRECT probing, the unnamed files a
// directory's swap files are, and mounts that are undone however a test ends.
//
// Mounts happen inside a private mount namespace that the test process enters
// first (enter_private_mount_namespace), so even a crashed test leaves no
// mount behind on the host: the namespace, and with it every mount and the
// loop devices they hold (autoclear), goes away when the process exits.
// ScopedMount also unmounts on scope exit, which covers failed assertions.
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace zero::testing {

// A fresh directory under the working directory (the build tree, a real disk
// filesystem, rather than /tmp, which may be tmpfs), removed recursively on
// destruction.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix = "offload_test") {
    std::string tmpl = (std::filesystem::current_path() / (prefix + ".XXXXXX")).string();
    if (mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~ScratchDir() {
    if (path_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  bool ok() const { return !path_.empty(); }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Byte i of the pattern for `seed`; distinct seeds give distinct streams, and
// every 8-byte word differs from its neighbours so misplaced blocks show.
inline void fill_pattern(uint8_t* data, size_t bytes, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < bytes; ++i) {
    if (i % 8 == 0) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
    }
    data[i] = static_cast<uint8_t>(x >> (8 * (i % 8)));
  }
}

// True when a file in `dir` can be created with O_DIRECT (the probe file is removed).
inline bool supports_o_direct(const std::string& dir) {
  const std::string probe = dir + "/.o_direct_probe";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_DIRECT, 0600);
  const bool ok = fd >= 0;
  if (ok) ::close(fd);
  ::unlink(probe.c_str());
  return ok;
}

// The files this process holds open that were in `dir` and have no name
// there now (swap files: IoEngine::open_unnamed), as /proc/self/fd/N paths,
// which reach the file itself (stat, truncate, open).
inline std::vector<std::string> unnamed_files_in(const std::string& dir) {
  std::vector<std::string> found;
  const std::string prefix = std::filesystem::canonical(dir).string() + "/";
  const std::string deleted = " (deleted)";
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    char target[4096];
    const ssize_t n = ::readlink(e.path().c_str(), target, sizeof(target) - 1);
    if (n <= 0) continue;
    const std::string t(target, static_cast<size_t>(n));
    if (t.rfind(prefix, 0) == 0 && t.size() > deleted.size() &&
        t.compare(t.size() - deleted.size(), deleted.size(), deleted) == 0 &&
        t.find('/', prefix.size()) == std::string::npos) {
      found.push_back(e.path().string());
    }
  }
  return found;
}

// Enters a private mount namespace once per process. Empty on success, else why not.
inline std::string enter_private_mount_namespace() {
  static std::string result = [] {
    if (geteuid() != 0) return std::string("not running as root");
    if (::unshare(CLONE_NEWNS) != 0) return std::string("unshare(CLONE_NEWNS): ") + std::strerror(errno);
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      return std::string("making / private: ") + std::strerror(errno);
    }
    return std::string();
  }();
  return result;
}

// A mount on `target` that is lazily detached when the object goes away.
class ScopedMount {
 public:
  ScopedMount() = default;
  ~ScopedMount() { unmount(); }
  ScopedMount(const ScopedMount&) = delete;
  ScopedMount& operator=(const ScopedMount&) = delete;

  // mount(2); empty on success, else the error.
  std::string mount(const std::string& source, const std::string& target, const char* fstype,
                    unsigned long flags, const char* options) {
    if (::mount(source.c_str(), target.c_str(), fstype, flags, options) != 0) {
      return std::string("mount ") + (fstype ? fstype : "") + " on " + target + ": " + std::strerror(errno);
    }
    target_ = target;
    return std::string();
  }
  // A mount made by someone else (e.g. mount(8)) that this object now undoes.
  void adopt(const std::string& target) { target_ = target; }
  void unmount() {
    if (target_.empty()) return;
    ::umount2(target_.c_str(), MNT_DETACH);
    target_.clear();
  }

 private:
  std::string target_;
};

}  // namespace zero::testing
