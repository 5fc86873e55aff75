// IoEngine on a real disk: byte-exact round trips at odd sizes and offsets,
// many transfers in flight, short-completion resubmission, both registration
// modes and the fallback when registration is refused, and unnamed files. Error cases that need
// special filesystems are in io_engine_errors_test.cc.
#include "offload/io_engine.h"

#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "offload/aligned_buffer_pool.h"
#include "tests/offload/offload_test_util.h"

namespace zero {
namespace {

using testing::ScratchDir;
using testing::fill_pattern;

constexpr size_t kPage = kIoAlignment;
constexpr int64_t kBlock = 64 * 1024;  // small blocks: every transfer below is many pieces

// Parameter: registered buffers and files (true) or plain requests (false).
class IoEngineRoundTrip : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    if (!testing::supports_o_direct(dir_.path())) GTEST_SKIP() << dir_.path() << " has no O_DIRECT";
    options_.block_size = kBlock;
    options_.queue_depth = 4;
    options_.register_buffers = GetParam();
    options_.register_files = GetParam();
  }

  std::unique_ptr<IoEngine> make_engine() {
    auto engine = IoEngine::create(options_);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return engine.ok() ? *std::move(engine) : nullptr;
  }

  // `count` buffers of `bytes` from a pool registered with `engine` (if asked).
  std::unique_ptr<AlignedBufferPool> make_pool(IoEngine& engine, size_t count, size_t bytes) {
    auto pool = AlignedBufferPool::create(backend_, count, bytes);
    EXPECT_TRUE(pool.ok()) << pool.status();
    const IoEngineMode& mode = engine.register_buffers((*pool)->spans());
    if (GetParam() && !mode.buffers_registered && !mode.buffers_fallback.empty()) {
      refused_ = mode.describe();  // e.g. a small RLIMIT_MEMLOCK without CAP_IPC_LOCK
    } else {
      EXPECT_EQ(mode.buffers_registered, GetParam()) << mode.describe();
      EXPECT_EQ(mode.files_registered, GetParam()) << mode.describe();
    }
    return *std::move(pool);
  }

  std::string refused_;  // why registration was refused where it was asked for

  CpuBackend backend_;
  ScratchDir dir_;
  IoEngineOptions options_;
};

// After make_pool(): the registered variant skips where this machine refuses registration.
#define SKIP_IF_REGISTRATION_REFUSED() \
  if (!refused_.empty()) GTEST_SKIP() << "registration refused here: " << refused_

TEST_P(IoEngineRoundTrip, OddSizesAndOffsetsAreByteExact) {
  auto engine = make_engine();
  ASSERT_NE(engine, nullptr);
  // Sizes: one page, an odd number of pages, exactly one block, an odd number
  // of blocks, and several blocks plus a partial last block.
  const std::vector<size_t> sizes = {kPage, 3 * kPage, kBlock, 5 * kBlock, 7 * kBlock + 3 * kPage,
                                     2 * kBlock + kPage};
  const std::vector<int64_t> offsets = {0, static_cast<int64_t>(kPage), 7 * static_cast<int64_t>(kPage),
                                        3 * kBlock + static_cast<int64_t>(kPage)};
  const size_t max_size = *std::max_element(sizes.begin(), sizes.end());
  auto pool = make_pool(*engine, 2, max_size);
  SKIP_IF_REGISTRATION_REFUSED();
  const IoBuffer out = pool->buffer(0);
  const IoBuffer in = pool->buffer(1);

  auto file = engine->open(dir_.file("roundtrip.swp"), IoFileMode::kReadWrite);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->registered(), GetParam());
  // The file's expected contents, so that each write is also checked for not
  // spilling into its neighbours.
  std::vector<uint8_t> image;
  uint64_t seed = 1;
  for (int64_t offset : offsets) {
    for (size_t size : sizes) {
      fill_pattern(out.data, size, seed++);
      ASSERT_TRUE(engine->write(*file, out.data, size, offset).ok());
      if (image.size() < offset + size) image.resize(offset + size, 0);
      std::memcpy(image.data() + offset, out.data, size);
      std::memset(in.data, 0xEE, size);
      const absl::Status s = engine->read(*file, in.data, size, offset);
      ASSERT_TRUE(s.ok()) << s;
      ASSERT_EQ(std::memcmp(in.data, out.data, size), 0) << "size " << size << " offset " << offset;
    }
  }
  auto file_size = file->size();
  ASSERT_TRUE(file_size.ok());
  ASSERT_EQ(static_cast<size_t>(*file_size), image.size());
  std::vector<uint8_t> whole(image.size());
  // Read back the whole file in pool-sized chunks.
  for (size_t at = 0; at < image.size(); at += max_size) {
    const size_t n = std::min(max_size, image.size() - at);
    ASSERT_TRUE(engine->read(*file, in.data, n, static_cast<int64_t>(at)).ok());
    std::memcpy(whole.data() + at, in.data, n);
  }
  EXPECT_TRUE(whole == image) << "the file differs from the writes it received";

  const IoEngineStats& stats = engine->stats();
  EXPECT_GT(stats.requests, 0);
  EXPECT_EQ(stats.fixed_buffer_requests, GetParam() ? stats.requests : 0);
  EXPECT_EQ(stats.fixed_file_requests, GetParam() ? stats.requests : 0);
  EXPECT_EQ(stats.resubmissions, 0);
  EXPECT_TRUE(engine->close(*file).ok());
}

TEST_P(IoEngineRoundTrip, ManyTransfersInFlightAcrossFiles) {
  options_.queue_depth = 8;
  options_.block_size = 16 * 1024;
  auto engine = make_engine();
  ASSERT_NE(engine, nullptr);
  constexpr int kFiles = 3;
  constexpr int kTransfers = 48;
  // Transfer i: (i % 5 + 1) * 3 pages (odd counts of 16 KiB blocks and partial ones).
  auto bytes_of = [](int i) { return static_cast<size_t>(i % 5 + 1) * 3 * kPage; };
  constexpr size_t kSlot = 15 * kPage;  // per-transfer file region, >= the largest transfer
  auto pool = make_pool(*engine, 2 * kTransfers, kSlot);
  SKIP_IF_REGISTRATION_REFUSED();

  std::vector<IoFile> files;
  for (int f = 0; f < kFiles; ++f) {
    auto file = engine->open(dir_.file("many" + std::to_string(f) + ".swp"), IoFileMode::kReadWrite);
    ASSERT_TRUE(file.ok()) << file.status();
    files.push_back(*std::move(file));
  }
  std::vector<IoTransfer> writes;
  for (int i = 0; i < kTransfers; ++i) {
    const IoBuffer b = pool->buffer(i);
    fill_pattern(b.data, bytes_of(i), 1000 + i);
    writes.push_back(engine->submit_write(files[i % kFiles], b.data, bytes_of(i),
                                          static_cast<int64_t>((i / kFiles) * kSlot)));
  }
  EXPECT_LE(engine->in_flight(), options_.queue_depth);
  // Wait out of order: the last first, so every other transfer progresses inside it.
  for (int i = kTransfers - 1; i >= 0; --i) ASSERT_TRUE(writes[i].wait().ok()) << i;

  // Read everything back as one batched transfer of many requests.
  std::vector<IoRequest> reads;
  for (int i = 0; i < kTransfers; ++i) {
    const IoBuffer b = pool->buffer(kTransfers + i);
    std::memset(b.data, 0, kSlot);
    reads.push_back(IoRequest{IoOp::kRead, &files[i % kFiles], b.data, bytes_of(i),
                              static_cast<int64_t>((i / kFiles) * kSlot)});
  }
  IoTransfer batch = engine->submit(reads);
  EXPECT_EQ(batch.bytes(), [&] {
    int64_t total = 0;
    for (const auto& r : reads) total += static_cast<int64_t>(r.bytes);
    return total;
  }());
  ASSERT_TRUE(batch.wait().ok());
  for (int i = 0; i < kTransfers; ++i) {
    ASSERT_EQ(std::memcmp(pool->buffer(i).data, pool->buffer(kTransfers + i).data, bytes_of(i)), 0)
        << "transfer " << i;
  }
  for (auto& f : files) EXPECT_TRUE(engine->close(f).ok());
}

TEST_P(IoEngineRoundTrip, ShortCompletionsAreResubmittedForTheRemainder) {
  // The disk never returns short; crediting each completion with one page
  // makes every block piece come back short 15 times out of 16.
  options_.max_credited_bytes_for_testing = kPage;
  auto engine = make_engine();
  ASSERT_NE(engine, nullptr);
  const size_t bytes = 3 * kBlock + 5 * kPage;
  auto pool = make_pool(*engine, 2, bytes);
  SKIP_IF_REGISTRATION_REFUSED();
  auto file = engine->open(dir_.file("short.swp"), IoFileMode::kReadWrite);
  ASSERT_TRUE(file.ok()) << file.status();
  fill_pattern(pool->buffer(0).data, bytes, 77);
  ASSERT_TRUE(engine->write(*file, pool->buffer(0).data, bytes, 2 * kPage).ok());
  ASSERT_TRUE(engine->read(*file, pool->buffer(1).data, bytes, 2 * kPage).ok());
  EXPECT_EQ(std::memcmp(pool->buffer(0).data, pool->buffer(1).data, bytes), 0);
  // Each direction: bytes / kPage completions, of which all but the pieces' first are resubmissions.
  const int64_t pieces = 3 + 1;
  EXPECT_EQ(engine->stats().resubmissions, 2 * (static_cast<int64_t>(bytes / kPage) - pieces));
  EXPECT_EQ(engine->stats().bytes_written, static_cast<int64_t>(bytes));
  EXPECT_EQ(engine->stats().bytes_read, static_cast<int64_t>(bytes));
}

TEST_P(IoEngineRoundTrip, PollAndDoneDriveATransferWithoutBlocking) {
  options_.queue_depth = 2;
  auto engine = make_engine();
  ASSERT_NE(engine, nullptr);
  const size_t bytes = 16 * kBlock;
  auto pool = make_pool(*engine, 1, bytes);
  SKIP_IF_REGISTRATION_REFUSED();
  auto file = engine->open(dir_.file("poll.swp"), IoFileMode::kReadWrite);
  ASSERT_TRUE(file.ok());
  fill_pattern(pool->buffer(0).data, bytes, 5);
  IoTransfer t = engine->submit_write(*file, pool->buffer(0).data, bytes, 0);
  EXPECT_EQ(engine->in_flight(), 2);  // queue_depth pieces started by submit()
  while (!t.done()) ASSERT_LE(engine->in_flight(), 2);  // done() polls; never more than queue_depth pieces
  EXPECT_TRUE(t.wait().ok());
  EXPECT_TRUE(t.done());
  EXPECT_EQ(engine->in_flight(), 0);
  EXPECT_EQ(engine->stats().bytes_written, static_cast<int64_t>(bytes));
}

TEST_P(IoEngineRoundTrip, BatchedModeAndSingleSubmitRoundTrip) {
  // DeepSpeed's overlap_events=false (issue queue_depth, wait for all) and single_submit=true.
  options_.overlap_events = false;
  options_.single_submit = true;
  options_.queue_depth = 3;
  auto engine = make_engine();
  ASSERT_NE(engine, nullptr);
  const size_t bytes = 10 * kBlock + kPage;
  auto pool = make_pool(*engine, 2, bytes);
  SKIP_IF_REGISTRATION_REFUSED();
  auto file = engine->open(dir_.file("batched.swp"), IoFileMode::kReadWrite);
  ASSERT_TRUE(file.ok());
  fill_pattern(pool->buffer(0).data, bytes, 9);
  ASSERT_TRUE(engine->write(*file, pool->buffer(0).data, bytes, 0).ok());
  ASSERT_TRUE(engine->read(*file, pool->buffer(1).data, bytes, 0).ok());
  EXPECT_EQ(std::memcmp(pool->buffer(0).data, pool->buffer(1).data, bytes), 0);
}

INSTANTIATE_TEST_SUITE_P(Registration, IoEngineRoundTrip, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Registered" : "Unregistered";
                         });

class IoEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    if (!testing::supports_o_direct(dir_.path())) GTEST_SKIP() << dir_.path() << " has no O_DIRECT";
  }
  CpuBackend backend_;
  ScratchDir dir_;
};

TEST_F(IoEngineTest, BuffersOutsideTheRegisteredSetUseThePlainPath) {
  auto engine = IoEngine::create(IoEngineOptions{});
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto pool = AlignedBufferPool::create(backend_, 1, 2 * kPage);
  ASSERT_TRUE(pool.ok());
  const IoEngineMode& mode = (*engine)->register_buffers((*pool)->spans());
  if (!mode.buffers_registered) GTEST_SKIP() << "registration refused here: " << mode.describe();
  auto other = AlignedBufferPool::create(backend_, 1, 2 * kPage);  // not registered
  ASSERT_TRUE(other.ok());
  auto file = (*engine)->open(dir_.file("mixed.swp"), IoFileMode::kReadWrite);
  ASSERT_TRUE(file.ok());
  fill_pattern((*pool)->buffer(0).data, 2 * kPage, 3);
  ASSERT_TRUE((*engine)->write(*file, (*pool)->buffer(0).data, 2 * kPage, 0).ok());
  ASSERT_TRUE((*engine)->read(*file, (*other)->buffer(0).data, 2 * kPage, 0).ok());
  EXPECT_EQ(std::memcmp((*pool)->buffer(0).data, (*other)->buffer(0).data, 2 * kPage), 0);
  // A request straddling the end of a registered buffer must not use it either.
  ASSERT_TRUE((*engine)->read(*file, (*pool)->buffer(0).data + kPage, kPage, 0).ok());
  EXPECT_EQ((*engine)->stats().requests, 3);
  EXPECT_EQ((*engine)->stats().fixed_buffer_requests, 2);
}

// Drops CAP_IPC_LOCK from this thread's effective set (root bypasses
// RLIMIT_MEMLOCK only through it) and lowers RLIMIT_MEMLOCK; both restored on
// destruction. ok() is false where capabilities cannot be changed.
class LockedMemoryLimit {
 public:
  explicit LockedMemoryLimit(rlim_t bytes) {
    header_.version = _LINUX_CAPABILITY_VERSION_3;
    header_.pid = 0;
    if (syscall(SYS_capget, &header_, saved_) != 0) return;
    __user_cap_data_struct lowered[2];
    std::memcpy(lowered, saved_, sizeof(lowered));
    lowered[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
    if (syscall(SYS_capset, &header_, lowered) != 0) return;
    if (getrlimit(RLIMIT_MEMLOCK, &saved_limit_) != 0) return;
    rlimit lower = saved_limit_;
    lower.rlim_cur = bytes;
    ok_ = setrlimit(RLIMIT_MEMLOCK, &lower) == 0;
  }
  ~LockedMemoryLimit() {
    setrlimit(RLIMIT_MEMLOCK, &saved_limit_);
    syscall(SYS_capset, &header_, saved_);
  }
  bool ok() const { return ok_; }

 private:
  __user_cap_header_struct header_{};
  __user_cap_data_struct saved_[2]{};
  rlimit saved_limit_{};
  bool ok_ = false;
};

TEST_F(IoEngineTest, RegistrationRefusedByMemlockLimitFallsBackToPlainRequests) {
  auto pool = AlignedBufferPool::create(backend_, 4, 1 << 20);  // 4 MiB > the 64 KiB limit below
  ASSERT_TRUE(pool.ok());
  std::unique_ptr<IoEngine> engine;
  IoEngineMode mode;
  {
    LockedMemoryLimit limit(64 * 1024);
    if (!limit.ok()) GTEST_SKIP() << "cannot lower RLIMIT_MEMLOCK / drop CAP_IPC_LOCK here";
    // The ring notes at creation whether its owner may lock memory freely; the
    // limit is read when the buffers are registered.
    auto created = IoEngine::create(IoEngineOptions{});
    ASSERT_TRUE(created.ok()) << created.status();
    engine = *std::move(created);
    mode = engine->register_buffers((*pool)->spans());
  }
  if (mode.buffers_registered) GTEST_SKIP() << "this kernel does not charge registered buffers to RLIMIT_MEMLOCK";
  EXPECT_NE(mode.buffers_fallback.find("locked memory"), std::string::npos) << mode.buffers_fallback;
  EXPECT_NE(mode.buffers_fallback.find("ulimit -l"), std::string::npos) << mode.buffers_fallback;
  EXPECT_NE(mode.describe().find("unregistered buffers"), std::string::npos) << mode.describe();
  EXPECT_EQ(engine->mode().describe(), mode.describe());

  auto file = engine->open(dir_.file("fallback.swp"), IoFileMode::kReadWrite);
  ASSERT_TRUE(file.ok());
  fill_pattern((*pool)->buffer(0).data, 1 << 20, 11);
  ASSERT_TRUE(engine->write(*file, (*pool)->buffer(0).data, 1 << 20, 0).ok());
  ASSERT_TRUE(engine->read(*file, (*pool)->buffer(1).data, 1 << 20, 0).ok());
  EXPECT_EQ(std::memcmp((*pool)->buffer(0).data, (*pool)->buffer(1).data, 1 << 20), 0);
  EXPECT_EQ(engine->stats().fixed_buffer_requests, 0);
  EXPECT_GT(engine->stats().requests, 0);
}

TEST_F(IoEngineTest, ModeDescribesRegistration) {
  IoEngineOptions options;
  options.register_files = false;
  auto engine = IoEngine::create(options);
  ASSERT_TRUE(engine.ok());
  EXPECT_FALSE((*engine)->mode().files_registered);
  EXPECT_EQ((*engine)->mode().describe(), "unregistered buffers (none offered), unregistered files (file registration is off)");
  auto pool = AlignedBufferPool::create(backend_, 2, 1 << 20);
  ASSERT_TRUE(pool.ok());
  const IoEngineMode& mode = (*engine)->register_buffers((*pool)->spans());
  if (mode.buffers_registered) {
    EXPECT_EQ(mode.registered_buffer_count, 2u);
    EXPECT_EQ(mode.registered_buffer_bytes, 2u << 20);
    EXPECT_NE(mode.describe().find("registered buffers (2, 2.0 MiB)"), std::string::npos) << mode.describe();
  }
  // Registering again replaces the set.
  EXPECT_EQ((*engine)->register_buffers({}).buffers_registered, false);
}

// huge_page_buffers collapses the 2 MiB-aligned part of registered buffers
// into 2 MiB pages before registering them: contents survive, mode() says how
// much, I/O through them is byte-exact, and the option turns it off.
TEST_F(IoEngineTest, HugePageBuffersKeepContentsAndRoundTrip) {
  constexpr size_t kBytes = 6 << 20;  // holds at least 4 MiB of 2 MiB-aligned pages wherever it lands
  for (const bool huge : {true, false}) {
    SCOPED_TRACE(huge ? "huge_page_buffers" : "4 KiB pages");
    IoEngineOptions options;
    options.huge_page_buffers = huge;
    auto engine = IoEngine::create(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    auto pool = AlignedBufferPool::create(backend_, 2, kBytes);
    ASSERT_TRUE(pool.ok());
    uint8_t* data = (*pool)->buffer(0).data;
    std::vector<uint8_t> expected(kBytes);
    fill_pattern(expected.data(), kBytes, huge ? 11 : 12);
    std::memcpy(data, expected.data(), kBytes);
    const IoEngineMode& mode = (*engine)->register_buffers((*pool)->spans());
    if (!mode.buffers_registered) GTEST_SKIP() << "registration refused here: " << mode.describe();
    ASSERT_EQ(std::memcmp(data, expected.data(), kBytes), 0) << "collapsing changed the buffer's contents";
    EXPECT_EQ(mode.huge_page_bytes % (2 << 20), 0u);
    EXPECT_LE(mode.huge_page_bytes, mode.registered_buffer_bytes);
    if (!huge) EXPECT_EQ(mode.huge_page_bytes, 0u);
    if (mode.huge_page_bytes > 0) {
      EXPECT_NE(mode.describe().find(" in 2 MiB pages"), std::string::npos) << mode.describe();
    } else {
      EXPECT_EQ(mode.describe().find(" in 2 MiB pages"), std::string::npos) << mode.describe();
    }
    auto file = (*engine)->open(dir_.file(huge ? "huge.swp" : "small.swp"), IoFileMode::kReadWrite);
    ASSERT_TRUE(file.ok()) << file.status();
    ASSERT_TRUE((*engine)->write(*file, data, kBytes, 0).ok());
    uint8_t* back = (*pool)->buffer(1).data;
    std::memset(back, 0, kBytes);
    ASSERT_TRUE((*engine)->read(*file, back, kBytes, 0).ok());
    EXPECT_EQ(std::memcmp(back, expected.data(), kBytes), 0);
    EXPECT_EQ((*engine)->stats().fixed_buffer_requests, (*engine)->stats().requests);
    ASSERT_TRUE((*engine)->close(*file).ok());
  }
}

TEST_F(IoEngineTest, MisalignedOrWrongModeRequestsFailTheTransferWithoutIo) {
  auto engine = IoEngine::create(IoEngineOptions{});
  ASSERT_TRUE(engine.ok());
  auto pool = AlignedBufferPool::create(backend_, 1, 4 * kPage);
  ASSERT_TRUE(pool.ok());
  uint8_t* buf = (*pool)->buffer(0).data;
  auto file = (*engine)->open(dir_.file("aligned.swp"), IoFileMode::kWrite);
  ASSERT_TRUE(file.ok());

  absl::Status s = (*engine)->write(*file, buf + 512, kPage, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("multiples of 4096"), std::string::npos) << s;
  EXPECT_NE(s.message().find("aligned.swp"), std::string::npos) << s;
  s = (*engine)->write(*file, buf, 1000, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  s = (*engine)->write(*file, buf, kPage, 100);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  s = (*engine)->read(*file, buf, kPage, 0);  // opened write-only
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("write-only"), std::string::npos) << s;
  EXPECT_EQ((*engine)->stats().requests, 0);
  auto size = file->size();
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(*size, 0);
}

TEST_F(IoEngineTest, WriteOpenDoesNotTruncate) {
  auto engine = IoEngine::create(IoEngineOptions{});
  ASSERT_TRUE(engine.ok());
  auto pool = AlignedBufferPool::create(backend_, 2, 8 * kPage);
  ASSERT_TRUE(pool.ok());
  const std::string path = dir_.file("keep.swp");
  fill_pattern((*pool)->buffer(0).data, 8 * kPage, 21);
  {
    auto file = (*engine)->open(path, IoFileMode::kWrite);
    ASSERT_TRUE(file.ok());
    ASSERT_TRUE((*engine)->write(*file, (*pool)->buffer(0).data, 8 * kPage, 0).ok());
  }
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  {
    auto file = (*engine)->open(path, IoFileMode::kWrite);  // rewrite only the first page
    ASSERT_TRUE(file.ok());
    ASSERT_TRUE((*engine)->write(*file, (*pool)->buffer(0).data, kPage, 0).ok());
  }
  auto file = (*engine)->open(path, IoFileMode::kRead);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(*file->size(), static_cast<int64_t>(8 * kPage));
  ASSERT_TRUE((*engine)->read(*file, (*pool)->buffer(1).data, 8 * kPage, 0).ok());
  EXPECT_EQ(std::memcmp((*pool)->buffer(0).data, (*pool)->buffer(1).data, 8 * kPage), 0);
}

// A swap file's open: read-write, round-trips, and never has a name in its
// directory, so nothing is left there whichever way the process ends; a
// directory that cannot hold it is an error naming the file it would be.
TEST_F(IoEngineTest, AnUnnamedFileRoundTripsAndLeavesNothingInItsDirectory) {
  auto engine = IoEngine::create(IoEngineOptions{});
  ASSERT_TRUE(engine.ok());
  auto pool = AlignedBufferPool::create(backend_, 2, 8 * kPage);
  ASSERT_TRUE(pool.ok());
  fill_pattern((*pool)->buffer(0).data, 8 * kPage, 7);
  {
    auto file = (*engine)->open_unnamed(dir_.path(), "state.swp");
    ASSERT_TRUE(file.ok()) << file.status();
    EXPECT_EQ(file->path(), dir_.file("state.swp"));
    EXPECT_EQ(file->mode(), IoFileMode::kReadWrite);
    ASSERT_TRUE((*engine)->preallocate(*file, 16 * kPage).ok());
    ASSERT_TRUE((*engine)->write(*file, (*pool)->buffer(0).data, 8 * kPage, 4 * kPage).ok());
    ASSERT_TRUE((*engine)->read(*file, (*pool)->buffer(1).data, 8 * kPage, 4 * kPage).ok());
    EXPECT_EQ(std::memcmp((*pool)->buffer(0).data, (*pool)->buffer(1).data, 8 * kPage), 0);
    EXPECT_TRUE(std::filesystem::is_empty(dir_.path())) << "the open file has no name";
    EXPECT_EQ(testing::unnamed_files_in(dir_.path()).size(), 1u);
    ASSERT_TRUE((*engine)->close(*file).ok());
  }
  EXPECT_TRUE(testing::unnamed_files_in(dir_.path()).empty());
  EXPECT_TRUE(std::filesystem::is_empty(dir_.path()));
  const std::string missing = dir_.file("no_such_dir");
  auto none = (*engine)->open_unnamed(missing, "state.swp");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound) << none.status();
  EXPECT_NE(none.status().message().find("opening for writing " + missing + "/state.swp"), std::string::npos)
      << none.status();
}

TEST(IoEngineOptionsTest, FromAioHonoursTheSectionAndRefusesWhatItCannotDo) {
  AioConfig aio;
  aio.queue_depth = 16;
  aio.intra_op_parallelism = 2;
  aio.single_submit = true;
  aio.overlap_events = false;
  auto o = IoEngineOptions::from_aio(aio);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->queue_depth, 32);
  EXPECT_EQ(o->block_size, 1 << 20);
  EXPECT_TRUE(o->single_submit);
  EXPECT_FALSE(o->overlap_events);

  aio = AioConfig{};
  aio.use_gds = true;
  EXPECT_EQ(IoEngineOptions::from_aio(aio).status().code(), absl::StatusCode::kUnimplemented);
  aio = AioConfig{};
  aio.block_size = 1000;
  auto bad = IoEngineOptions::from_aio(aio);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("aio.block_size = 1000"), std::string::npos) << bad.status();
  aio = AioConfig{};
  aio.queue_depth = 0;
  EXPECT_EQ(IoEngineOptions::from_aio(aio).status().code(), absl::StatusCode::kInvalidArgument);

  IoEngineOptions direct;
  direct.block_size = 4096 + 512;
  EXPECT_EQ(IoEngine::create(direct).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace zero
