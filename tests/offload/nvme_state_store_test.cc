// The NVMe optimizer-state store on a real file: values round-trip exactly
// at odd offsets and lengths across sub-group boundaries, a step's stream
// visits every element once in order and keeps what it wrote, records never
// written by this run read as zeros whatever the disk holds, the file and its
// accounting exist exactly as long as the store and the file has no name in
// the directory (nothing to leave behind); and the preflight errors a
// user can hit (missing or read-only directory, a disk too small, buffers
// larger than memory) name the key, the path and the fix.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <numeric>

#include "core/memory_tracker.h"
#include "kernels/cpu/cpu_backend.h"
#include "offload/nvme_state_store.h"
#include "tests/offload/offload_test_util.h"

namespace zero {
namespace {

namespace fs = std::filesystem;
using testing::ScopedMount;
using testing::ScratchDir;

const std::vector<std::string> kAdam = {"master", "exp_avg", "exp_avg_sq"};

bool contains(const absl::Status& s, std::string_view text) {
  return std::string_view(s.message().data(), s.message().size()).find(text) != std::string_view::npos;
}

NvmeStateStoreOptions options(const std::string& dir, int64_t group, int64_t buffers = 4) {
  NvmeStateStoreOptions o;
  o.nvme_path = dir;
  o.sub_group_size = group;
  o.buffer_count = buffers;
  o.poll_every = 1000;  // several pieces per sub-group
  return o;
}

int64_t tracked(Tier t, MemCategory c) { return MemoryTracker::global().snapshot().at(t, c).current; }

std::vector<float> values(int64_t n, float base) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = base + 0.25f * static_cast<float>(i % 1013) - 1e-3f * i;
  return v;
}

class NvmeStateStoreTest : public ::testing::Test {
 protected:
  CpuBackend backend_;
  ScratchDir dir_{"nvme_store_test"};
};

TEST_F(NvmeStateStoreTest, ValuesRoundTripAtOddOffsetsAcrossSubGroups) {
  ASSERT_TRUE(dir_.ok());
  const int64_t numel = 10007;  // 4 sub-groups of 3001 and one of 1004
  auto store = NvmeStateStore::create(backend_, numel, kAdam, options(dir_.path(), 3001));
  ASSERT_TRUE(store.ok()) << store.status();
  NvmeStateStore& s = **store;
  EXPECT_EQ(s.layout().groups(), 4);
  // Every array through write(), in odd pieces that straddle records.
  std::vector<std::vector<float>> want;
  for (int a = 0; a < 3; ++a) {
    want.push_back(values(numel, 10.0f * a));
    for (int64_t o = 0; o < numel;) {
      const int64_t n = std::min<int64_t>(numel - o, 777 + 1111 * a);
      ASSERT_TRUE(s.write(a, o, absl::MakeConstSpan(want[a]).subspan(o, n)).ok());
      o += n;
    }
  }
  ASSERT_TRUE(s.flush().ok());
  for (int a = 2; a >= 0; --a) {
    EXPECT_EQ(s.read(a, 0, numel).value(), want[a]) << kAdam[a];
    const std::vector<float> mid = s.read(a, 2999, 3005).value();  // groups 0..2
    EXPECT_TRUE(std::equal(mid.begin(), mid.end(), want[a].begin() + 2999)) << kAdam[a];
  }
  // The whole file is what the layout says, header included; it has no name
  // in the directory.
  const std::vector<std::string> files = testing::unnamed_files_in(dir_.path());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(static_cast<int64_t>(fs::file_size(files[0])), s.layout().file_bytes());
  EXPECT_TRUE(fs::is_empty(dir_.path()));
  EXPECT_EQ(s.layout().file_bytes(), kSwapHeaderBytes + 4 * 3 * align_up(3001 * 4, 4096));
}

TEST_F(NvmeStateStoreTest, StreamVisitsEveryElementOnceInOrderAndKeepsItsWrites) {
  ASSERT_TRUE(dir_.ok());
  const int64_t numel = 25000;
  for (int64_t buffers : {1, 2, 3, 4, 6}) {
    auto store = NvmeStateStore::create(backend_, numel, kAdam, options(dir_.path(), 4096, buffers));
    ASSERT_TRUE(store.ok()) << store.status();
    NvmeStateStore& s = **store;
    ASSERT_TRUE(s.write(0, 0, values(numel, 1.0f)).ok());
    for (int pass = 1; pass <= 3; ++pass) {
      int64_t expect_offset = 0;
      ASSERT_TRUE(s.for_each(
                       [&](int64_t offset, absl::Span<const Tensor> arrays) {
                         ASSERT_EQ(offset, expect_offset);
                         ASSERT_EQ(arrays.size(), 3u);
                         const int64_t n = arrays[0].numel();
                         for (int64_t i = 0; i < n; ++i) {
                           arrays[1].f32()[i] += arrays[0].f32()[i];              // exp_avg accumulates master
                           arrays[2].f32()[i] = static_cast<float>(offset + i);  // its own index
                         }
                         expect_offset += n;
                       },
                       /*write_back=*/true)
                      .ok());
      ASSERT_EQ(expect_offset, numel);
      std::vector<float> m = values(numel, 1.0f);
      for (float& x : m) x *= static_cast<float>(pass);
      EXPECT_EQ(s.read(1, 0, numel).value(), m) << buffers << " buffers, pass " << pass;
    }
    std::vector<float> idx(static_cast<size_t>(numel));
    std::iota(idx.begin(), idx.end(), 0.0f);
    EXPECT_EQ(s.read(2, 0, numel).value(), idx) << buffers << " buffers";
    // A read-only pass changes nothing on disk: not the array it scribbles on.
    const std::vector<float> exp_avg = s.read(1, 0, numel).value();
    ASSERT_TRUE(s.for_each([&](int64_t, absl::Span<const Tensor> a) { a[1].f32()[0] = -1.0f; }, false).ok());
    EXPECT_EQ(s.read(1, 0, numel).value(), exp_avg);
    EXPECT_EQ(s.read(2, 0, numel).value(), idx);
    EXPECT_GT(s.io_stats().bytes_read, 0);
  }
}

TEST_F(NvmeStateStoreTest, UnwrittenRecordsAreZerosWhateverTheDiskHolds) {
  ASSERT_TRUE(dir_.ok());
  auto store = NvmeStateStore::create(backend_, 5000, kAdam, options(dir_.path(), 2048));
  ASSERT_TRUE(store.ok()) << store.status();
  NvmeStateStore& s = **store;
  // Garbage where record 1 lives (as a crashed run could have left on disk).
  {
    const std::vector<std::string> files = testing::unnamed_files_in(dir_.path());
    ASSERT_EQ(files.size(), 1u);
    const int fd = ::open(files[0].c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    std::vector<char> junk(static_cast<size_t>(s.layout().record_bytes()), '\x7f');
    ASSERT_EQ(::pwrite(fd, junk.data(), junk.size(), s.layout().record_offset(1)), static_cast<ssize_t>(junk.size()));
    ::close(fd);
  }
  EXPECT_EQ(s.read(1, 2048, 2048).value(), std::vector<float>(2048, 0.0f));
  ASSERT_TRUE(s.for_each([](int64_t, absl::Span<const Tensor> a) {
                 for (int64_t i = 0; i < a[0].numel(); ++i) ASSERT_EQ(a[2].f32()[i], 0.0f);
               }, false).ok());
}

TEST_F(NvmeStateStoreTest, FileAndAccountingLiveExactlyAsLongAsTheStoreAndTheFileHasNoName) {
  ASSERT_TRUE(dir_.ok());
  const int64_t nvme_before = tracked(Tier::kNvme, MemCategory::kOptimizerState);
  const int64_t swap_before = tracked(Tier::kHost, MemCategory::kSwapBuffers);
  // A leftover of an earlier run: reported, never touched.
  const std::string leftover = dir_.file("zeroengine-0123456789abcdef-rank0.optim.swp");
  { std::FILE* f = std::fopen(leftover.c_str(), "w"); std::fclose(f); }
  {
    auto store = NvmeStateStore::create(backend_, 100000, kAdam, options(dir_.path(), 30000, 3));
    ASSERT_TRUE(store.ok()) << store.status();
    const NvmeStateStore& s = **store;
    // The file is open but has no name: the directory holds only the leftover,
    // so nothing of this run can be left behind, whatever ends it.
    EXPECT_EQ(std::distance(fs::directory_iterator(dir_.path()), fs::directory_iterator()), 1);
    const std::vector<std::string> files = testing::unnamed_files_in(dir_.path());
    ASSERT_EQ(files.size(), 1u);
    EXPECT_NE(s.path().find(s.run_id()), std::string::npos) << "messages name it";
    EXPECT_NE(s.describe().find("no name on disk"), std::string::npos) << s.describe();
    EXPECT_EQ(tracked(Tier::kNvme, MemCategory::kOptimizerState) - nvme_before, s.layout().file_bytes());
    EXPECT_EQ(tracked(Tier::kHost, MemCategory::kSwapBuffers) - swap_before, s.layout().buffer_bytes(3));
    ASSERT_EQ(s.leftovers().size(), 1u);
    EXPECT_NE(s.describe().find("swap file(s) of other runs"), std::string::npos) << s.describe();
    // The header says whose file this is (what /proc/<pid>/fd shows).
    std::FILE* f = std::fopen(files[0].c_str(), "r");
    ASSERT_NE(f, nullptr);
    char head[64] = {};
    ASSERT_EQ(std::fread(head, 1, sizeof(head) - 1, f), sizeof(head) - 1);
    std::fclose(f);
    EXPECT_EQ(std::string(head).rfind("ZEROENGINE SWAP 1\nrun_id=" + s.run_id(), 0), 0u) << head;
  }
  EXPECT_TRUE(testing::unnamed_files_in(dir_.path()).empty()) << "closed with the store";
  EXPECT_TRUE(fs::exists(leftover));
  EXPECT_EQ(tracked(Tier::kNvme, MemCategory::kOptimizerState), nvme_before);
  EXPECT_EQ(tracked(Tier::kHost, MemCategory::kSwapBuffers), swap_before);
}

TEST_F(NvmeStateStoreTest, MissingDirectoryAndHugeBuffersAreClearErrors) {
  auto missing = NvmeStateStore::create(backend_, 1000, kAdam, options("/nonexistent/zero-swap", 1000));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(contains(missing.status(), "offload_optimizer.nvme_path: /nonexistent/zero-swap does not exist"))
      << missing.status();
  ASSERT_TRUE(dir_.ok());
  // 4 buffers of a 1e10-element sub-group: 480 GB of host memory.
  auto huge = NvmeStateStore::create(backend_, 10000000000, kAdam, options(dir_.path(), 10000000000));
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(contains(huge.status(), "Lower zero_optimization.sub_group_size")) << huge.status();
  EXPECT_TRUE(fs::is_empty(dir_.path()));
}

#define REQUIRE_PRIVATE_MOUNTS()                                                                            \
  do {                                                                                                      \
    const std::string why_not = testing::enter_private_mount_namespace();                                  \
    if (!why_not.empty()) GTEST_SKIP() << "mounting needs root and a private mount namespace: " << why_not; \
  } while (0)

TEST_F(NvmeStateStoreTest, FullDiskIsRefusedBeforeAnyStepAndLeavesNothing) {
  REQUIRE_PRIVATE_MOUNTS();
  ASSERT_TRUE(dir_.ok());
  ScopedMount tmpfs;
  const std::string err = tmpfs.mount("tmpfs", dir_.path(), "tmpfs", 0, "size=1m");
  if (!err.empty()) GTEST_SKIP() << err;
  // 200k elements x 3 arrays x 4 bytes = 2.4 MB > 1 MiB.
  auto store = NvmeStateStore::create(backend_, 200000, kAdam, options(dir_.path(), 50000));
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(contains(store.status(), dir_.path())) << store.status();
  EXPECT_TRUE(contains(store.status(), "free")) << store.status();
  EXPECT_TRUE(fs::is_empty(dir_.path()));
}

TEST_F(NvmeStateStoreTest, ReadOnlyDirectoryIsAClearError) {
  REQUIRE_PRIVATE_MOUNTS();
  ASSERT_TRUE(dir_.ok());
  ScopedMount bind, remount;
  std::string err = bind.mount(dir_.path(), dir_.path(), nullptr, MS_BIND, nullptr);
  if (!err.empty()) GTEST_SKIP() << err;
  if (::mount(nullptr, dir_.path().c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0) {
    GTEST_SKIP() << "remount read-only: " << std::strerror(errno);
  }
  auto store = NvmeStateStore::create(backend_, 1000, kAdam, options(dir_.path(), 1000));
  ASSERT_FALSE(store.ok());
  EXPECT_TRUE(contains(store.status(), dir_.path())) << store.status();
  EXPECT_TRUE(contains(store.status(), "read-only")) << store.status();
}

}  // namespace
}  // namespace zero
