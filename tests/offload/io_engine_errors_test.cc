// IoEngine errors a user can cause, each checked for its code and for a
// message that names the path and what to do: a missing directory or file, a
// read past the end of a short file, a read-only mount, an immutable
// directory, a filesystem without O_DIRECT, and a full filesystem (a loop-
// mounted ext4 image and a tiny tmpfs).
//
// Tests that mount run as root in a private mount namespace (see
// offload_test_util.h) and skip with the reason when that is not possible.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "kernels/cpu/cpu_backend.h"
#include "offload/aligned_buffer_pool.h"
#include "offload/io_engine.h"
#include "tests/offload/offload_test_util.h"

namespace zero {
namespace {

using testing::ScopedMount;
using testing::ScratchDir;
using testing::fill_pattern;

constexpr size_t kPage = kIoAlignment;

#define REQUIRE_PRIVATE_MOUNTS()                                                         \
  do {                                                                                   \
    const std::string why_not = testing::enter_private_mount_namespace();                \
    if (!why_not.empty()) GTEST_SKIP() << "mounting needs root and a private mount namespace: " << why_not; \
  } while (0)

bool contains(const absl::Status& s, std::string_view text) {
  return std::string_view(s.message().data(), s.message().size()).find(text) != std::string_view::npos;
}

class IoEngineErrorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    auto engine = IoEngine::create(IoEngineOptions{});
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *std::move(engine);
    auto pool = AlignedBufferPool::create(backend_, 2, 4 << 20);
    ASSERT_TRUE(pool.ok()) << pool.status();
    pool_ = *std::move(pool);
    engine_->register_buffers(pool_->spans());
  }
  uint8_t* buffer(int i) { return pool_->buffer(i).data; }

  CpuBackend backend_;
  ScratchDir dir_;
  std::unique_ptr<AlignedBufferPool> pool_;
  std::unique_ptr<IoEngine> engine_;  // declared last: gone before the pool it registered
};

TEST_F(IoEngineErrorsTest, MissingDirectoryIsNamedWithTheFix) {
  const std::string missing = dir_.file("no/such/dir");
  auto file = engine_->open(missing + "/state.swp", IoFileMode::kWrite);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(contains(file.status(), "opening for writing " + missing + "/state.swp")) << file.status();
  EXPECT_TRUE(contains(file.status(), "directory " + missing + " does not exist")) << file.status();
  EXPECT_TRUE(contains(file.status(), "mkdir -p")) << file.status();
}

TEST_F(IoEngineErrorsTest, MissingFileOnReadSaysItWasNeverWritten) {
  auto file = engine_->open(dir_.file("never_written.swp"), IoFileMode::kRead);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(contains(file.status(), "never_written.swp")) << file.status();
  EXPECT_TRUE(contains(file.status(), "the file does not exist")) << file.status();
}

TEST_F(IoEngineErrorsTest, DirectoryInsteadOfAFile) {
  for (IoFileMode mode : {IoFileMode::kRead, IoFileMode::kWrite}) {
    auto file = engine_->open(dir_.path(), mode);
    ASSERT_FALSE(file.ok());
    EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument) << file.status();
    EXPECT_TRUE(contains(file.status(), "directory")) << file.status();
  }
}

TEST_F(IoEngineErrorsTest, ReadingPastTheEndOfAShortFileFails) {
  if (!testing::supports_o_direct(dir_.path())) GTEST_SKIP() << dir_.path() << " has no O_DIRECT";
  auto file = engine_->open(dir_.file("short.swp"), IoFileMode::kReadWrite);
  ASSERT_TRUE(file.ok()) << file.status();
  fill_pattern(buffer(0), 3 * kPage, 1);
  ASSERT_TRUE(engine_->write(*file, buffer(0), 3 * kPage, 0).ok());

  // Longer than the file: the kernel returns 3 pages, then end of file.
  absl::Status s = engine_->read(*file, buffer(1), 8 * kPage, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
  EXPECT_TRUE(contains(s, "short.swp")) << s;
  EXPECT_TRUE(contains(s, "holds 12288 bytes but the read needs bytes [0, 32768)")) << s;
  EXPECT_TRUE(contains(s, "shorter than expected")) << s;
  // Entirely beyond the end.
  s = engine_->read(*file, buffer(1), kPage, 16 * kPage);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
  // Across pieces: the error of one piece is the transfer's.
  IoEngineOptions small_blocks;
  small_blocks.block_size = kPage;
  auto engine = IoEngine::create(small_blocks);
  ASSERT_TRUE(engine.ok());
  auto again = (*engine)->open(dir_.file("short.swp"), IoFileMode::kRead);
  ASSERT_TRUE(again.ok());
  s = (*engine)->read(*again, buffer(1), 64 * kPage, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
  // The engine is still usable after a failed transfer.
  ASSERT_TRUE((*engine)->read(*again, buffer(1), 3 * kPage, 0).ok());
  EXPECT_EQ(std::memcmp(buffer(0), buffer(1), 3 * kPage), 0);

  // A file whose size is not a multiple of the block size (written elsewhere).
  const std::string odd = dir_.file("odd.swp");
  {
    const int fd = ::open(odd.c_str(), O_WRONLY | O_CREAT, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, buffer(0), 10000), 10000);
    ::close(fd);
  }
  auto odd_file = engine_->open(odd, IoFileMode::kRead);
  ASSERT_TRUE(odd_file.ok());
  s = engine_->read(*odd_file, buffer(1), 3 * kPage, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
  EXPECT_TRUE(contains(s, "holds 10000 bytes")) << s;
}

TEST_F(IoEngineErrorsTest, WritingIntoAReadOnlyMountIsRefused) {
  REQUIRE_PRIVATE_MOUNTS();
  const std::string source = dir_.file("src");
  const std::string target = dir_.file("ro");
  ASSERT_EQ(::mkdir(source.c_str(), 0700), 0);
  ASSERT_EQ(::mkdir(target.c_str(), 0700), 0);
  if (!testing::supports_o_direct(source)) GTEST_SKIP() << source << " has no O_DIRECT";
  {  // a file that exists before the directory turns read-only
    auto file = engine_->open(source + "/existing.swp", IoFileMode::kWrite);
    ASSERT_TRUE(file.ok());
    fill_pattern(buffer(0), kPage, 2);
    ASSERT_TRUE(engine_->write(*file, buffer(0), kPage, 0).ok());
  }
  ScopedMount bind;
  std::string err = bind.mount(source, target, nullptr, MS_BIND, nullptr);
  if (!err.empty()) GTEST_SKIP() << err;
  ScopedMount remount;  // the same mount point; `bind` undoes it
  if (::mount(nullptr, target.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0) {
    GTEST_SKIP() << "remount read-only: " << std::strerror(errno);
  }

  auto created = engine_->open(target + "/new.swp", IoFileMode::kWrite);
  ASSERT_FALSE(created.ok());
  EXPECT_EQ(created.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(contains(created.status(), target + "/new.swp")) << created.status();
  EXPECT_TRUE(contains(created.status(), "read-only")) << created.status();
  auto existing = engine_->open(target + "/existing.swp", IoFileMode::kReadWrite);
  EXPECT_EQ(existing.status().code(), absl::StatusCode::kPermissionDenied) << existing.status();
  // Reading what is there still works.
  auto readable = engine_->open(target + "/existing.swp", IoFileMode::kRead);
  ASSERT_TRUE(readable.ok()) << readable.status();
  ASSERT_TRUE(engine_->read(*readable, buffer(1), kPage, 0).ok());
  EXPECT_EQ(std::memcmp(buffer(0), buffer(1), kPage), 0);
}

// Sets the immutable attribute (chattr +i) on a directory, which stops even
// root from creating files in it; cleared on destruction.
class ImmutableDirectory {
 public:
  explicit ImmutableDirectory(const std::string& dir) {
    fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    if (fd_ < 0 || ::ioctl(fd_, FS_IOC_GETFLAGS, &saved_) != 0) return;
    int flags = saved_ | FS_IMMUTABLE_FL;
    ok_ = ::ioctl(fd_, FS_IOC_SETFLAGS, &flags) == 0;
    if (!ok_) error_ = std::strerror(errno);
  }
  ~ImmutableDirectory() {
    if (ok_) ::ioctl(fd_, FS_IOC_SETFLAGS, &saved_);
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }

 private:
  int fd_ = -1;
  int saved_ = 0;
  bool ok_ = false;
  std::string error_ = "FS_IOC_GETFLAGS failed";
};

TEST_F(IoEngineErrorsTest, CreatingInAnImmutableDirectoryIsRefused) {
  const std::string locked = dir_.file("locked");
  ASSERT_EQ(::mkdir(locked.c_str(), 0700), 0);
  ImmutableDirectory immutable(locked);
  if (!immutable.ok()) GTEST_SKIP() << "chattr +i not possible here: " << immutable.error();
  auto file = engine_->open(locked + "/state.swp", IoFileMode::kWrite);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(contains(file.status(), "no permission in " + locked)) << file.status();
  EXPECT_TRUE(contains(file.status(), "lsattr")) << file.status();
}

TEST_F(IoEngineErrorsTest, FilesystemWithoutODirectIsNamed) {
  REQUIRE_PRIVATE_MOUNTS();
  // tmpfs has O_DIRECT since Linux 6.6; ramfs has never had it.
  const std::string target = dir_.file("mem");
  ASSERT_EQ(::mkdir(target.c_str(), 0700), 0);
  ScopedMount mount;
  std::string fstype;
  for (const char* type : {"tmpfs", "ramfs"}) {
    std::string err = mount.mount(type, target, type, 0, "size=1m");
    if (!err.empty()) continue;
    if (!testing::supports_o_direct(target)) {
      fstype = type;
      break;
    }
    mount.unmount();
  }
  if (fstype.empty()) GTEST_SKIP() << "neither tmpfs nor ramfs could be mounted without O_DIRECT support";

  auto file = engine_->open(target + "/state.swp", IoFileMode::kWrite);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kFailedPrecondition) << file.status();
  EXPECT_TRUE(contains(file.status(), target + "/state.swp")) << file.status();
  EXPECT_TRUE(contains(file.status(), "does not support O_DIRECT")) << file.status();
  EXPECT_TRUE(contains(file.status(), "(" + fstype + ")")) << file.status();
  // The failed open leaves no empty file behind.
  struct stat st;
  EXPECT_NE(::stat((target + "/state.swp").c_str(), &st), 0);
}

// Checks a write larger than the filesystem holding `dir` fails as a full disk.
void expect_full_disk(IoEngine& engine, AlignedBufferPool& pool, const std::string& dir, size_t fs_bytes) {
  uint8_t* data = pool.buffer(0).data;
  fill_pattern(data, pool.buffer_bytes(), 3);
  // A file written before the disk fills must survive it.
  constexpr size_t kExistingBytes = 16 * kPage;
  {
    auto existing = engine.open(dir + "/existing.swp", IoFileMode::kWrite);
    ASSERT_TRUE(existing.ok()) << existing.status();
    ASSERT_TRUE(engine.write(*existing, data, kExistingBytes, 0).ok());
  }
  auto file = engine.open(dir + "/state.swp", IoFileMode::kReadWrite);
  ASSERT_TRUE(file.ok()) << file.status();
  // Ask for twice the filesystem's size, one buffer at a time in one transfer.
  std::vector<IoRequest> requests;
  for (size_t at = 0; at < 2 * fs_bytes; at += pool.buffer_bytes()) {
    requests.push_back(IoRequest{IoOp::kWrite, &*file, data, pool.buffer_bytes(), static_cast<int64_t>(at)});
  }
  absl::Status s = engine.submit(requests).wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_TRUE(contains(s, "writing " + dir + "/state.swp at offset")) << s;
  EXPECT_TRUE(contains(s, "ENOSPC")) << s;
  EXPECT_TRUE(contains(s, "has no room")) << s;
  EXPECT_TRUE(contains(s, "free of")) << s;
  // What was written before the disk filled is intact and readable.
  auto existing = engine.open(dir + "/existing.swp", IoFileMode::kRead);
  ASSERT_TRUE(existing.ok()) << existing.status();
  ASSERT_TRUE(engine.read(*existing, pool.buffer(1).data, kExistingBytes, 0).ok());
  EXPECT_EQ(std::memcmp(pool.buffer(1).data, data, kExistingBytes), 0);
  // Reserving space up front reports the same condition before any write.
  auto other = engine.open(dir + "/reserved.swp", IoFileMode::kWrite);
  ASSERT_TRUE(other.ok());
  s = engine.preallocate(*other, static_cast<int64_t>(2 * fs_bytes));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_TRUE(contains(s, "reserving disk space for " + dir + "/reserved.swp")) << s;
}

TEST_F(IoEngineErrorsTest, FullExt4FilesystemIsReported) {
  REQUIRE_PRIVATE_MOUNTS();
  if (std::system("command -v mkfs.ext4 >/dev/null 2>&1") != 0) GTEST_SKIP() << "mkfs.ext4 is not installed";
  const std::string image = dir_.file("small.img");
  const std::string target = dir_.file("small");
  constexpr size_t kImageBytes = 8 << 20;
  ASSERT_EQ(::mkdir(target.c_str(), 0700), 0);
  {
    const int fd = ::open(image.c_str(), O_WRONLY | O_CREAT, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, kImageBytes), 0);
    ::close(fd);
  }
  if (std::system(("mkfs.ext4 -q -F " + image + " >/dev/null 2>&1").c_str()) != 0) {
    GTEST_SKIP() << "mkfs.ext4 failed on " << image;
  }
  ScopedMount mount;
  if (std::system(("mount -o loop " + image + " " + target + " >/dev/null 2>&1").c_str()) != 0) {
    GTEST_SKIP() << "mount -o loop is not permitted here (no loop devices?)";
  }
  mount.adopt(target);
  expect_full_disk(*engine_, *pool_, target, kImageBytes);
}

TEST_F(IoEngineErrorsTest, FullTmpfsIsReported) {
  REQUIRE_PRIVATE_MOUNTS();
  const std::string target = dir_.file("tiny");
  ASSERT_EQ(::mkdir(target.c_str(), 0700), 0);
  ScopedMount mount;
  std::string err = mount.mount("tmpfs", target, "tmpfs", 0, "size=1m");
  if (!err.empty()) GTEST_SKIP() << err;
  if (!testing::supports_o_direct(target)) GTEST_SKIP() << "tmpfs has no O_DIRECT on this kernel (before 6.6)";
  expect_full_disk(*engine_, *pool_, target, 1 << 20);
}

}  // namespace
}  // namespace zero
