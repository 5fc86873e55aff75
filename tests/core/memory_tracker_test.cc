// The tracking allocator: every byte allocated through the backend is counted
// under its category and tier, peaks are peaks of the running sums, cached
// blocks are reused without new mappings, and what the tracker reports agrees
// with what the operating system sees (RSS). The cache never lifts reserved
// above the allocated high-water mark.
//
// RSS margin: the tracker counts our allocations; RSS also holds code, the
// oneDNN/OpenMP runtimes and glibc's heap. Measuring growth across the test
// removes those, leaving page granularity (4 KiB per block) and allocator
// metadata: we allow 2 % + 4 MiB.
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/cpu/cpu_backend.h"

namespace zero {
namespace {

constexpr int64_t kMiB = 1024 * 1024;

TEST(MemoryTrackerTest, CategoriesAndPeaksEqualWhatWasAllocated) {
  CpuBackend backend;
  const MemorySnapshot before = MemoryTracker::global().snapshot();
  MemoryTracker::global().reset_peaks();
  const auto& host = [](const MemorySnapshot& s, MemCategory c) { return s.at(Tier::kHost, c); };
  {
    Tensor p = backend.empty({1000, 250}, DType::kF32, MemCategory::kParameters);  // 1,000,000 B
    Tensor g = backend.empty({1000, 250}, DType::kBF16, MemCategory::kGradients);  //   500,000 B
    Tensor a = backend.empty({3, 7}, DType::kF32, MemCategory::kActivations);      //        84 B
    const MemorySnapshot s = MemoryTracker::global().snapshot();
    EXPECT_EQ(host(s, MemCategory::kParameters).current - host(before, MemCategory::kParameters).current, 1000000);
    EXPECT_EQ(host(s, MemCategory::kGradients).current - host(before, MemCategory::kGradients).current, 500000);
    EXPECT_EQ(host(s, MemCategory::kActivations).current - host(before, MemCategory::kActivations).current, 84);
    EXPECT_EQ(s.allocated[0].current - before.allocated[0].current, 1500084);
    // Views do not allocate.
    Tensor v = p.slice(10, {20});
    EXPECT_EQ(MemoryTracker::global().snapshot().allocated[0].current, s.allocated[0].current);
    a = Tensor();
    Tensor a2 = backend.empty({10}, DType::kF32, MemCategory::kActivations);
  }
  const MemorySnapshot after = MemoryTracker::global().snapshot();
  EXPECT_EQ(after.allocated[0].current, before.allocated[0].current);
  EXPECT_EQ(host(after, MemCategory::kParameters).peak - host(before, MemCategory::kParameters).current, 1000000);
  // The total peak is the peak of the sum: activations 84 B were freed before the 40 B ones arrived.
  EXPECT_EQ(after.allocated[0].peak - before.allocated[0].current, 1500084);
}

TEST(MemoryTrackerTest, FreedBlocksAreReusedWithoutNewMappings) {
  CpuBackend backend;
  {
    Tensor t = backend.empty({8 * kMiB / 4}, DType::kF32, MemCategory::kActivations);
  }
  const int64_t reserved = MemoryTracker::global().snapshot().reserved[0].current;
  for (int i = 0; i < 5; ++i) {
    Tensor t = backend.empty({8 * kMiB / 4}, DType::kF32, MemCategory::kActivations);
    EXPECT_EQ(MemoryTracker::global().snapshot().reserved[0].current, reserved) << "iteration " << i;
  }
  backend.release_cached();
  EXPECT_EQ(MemoryTracker::global().snapshot().reserved[0].current, reserved - 8 * kMiB);
}

// A cache that only grew would hold every size a step ever used: here 8 MiB
// and 4 MiB blocks, used one at a time, would hold 12 MiB. The allocator
// unmaps cached blocks of other sizes before mapping a new one past its
// allocated high-water mark, so reserved stays at 8 MiB, and blocks of a
// size that is asked again are still reused without a new mapping.
TEST(MemoryTrackerTest, CachedBlocksNeverLiftReservedAboveTheAllocatedPeak) {
  CpuBackend backend;
  const int64_t base = MemoryTracker::global().snapshot().reserved[0].current;
  auto reserved = [&] { return MemoryTracker::global().snapshot().reserved[0].current - base; };
  for (int i = 0; i < 3; ++i) {
    { Tensor a = backend.empty({8 * kMiB / 4}, DType::kF32, MemCategory::kActivations); }
    EXPECT_EQ(reserved(), 8 * kMiB) << "round " << i << ": the 8 MiB block, cached";
    {
      Tensor b = backend.empty({4 * kMiB / 4}, DType::kF32, MemCategory::kCommBuffers);
      EXPECT_EQ(reserved(), 4 * kMiB) << "round " << i << ": the 8 MiB block gave way to the 4 MiB one";
    }
  }
  // Two 4 MiB blocks live at once stay under the 8 MiB mark: both cached, both reused.
  {
    Tensor b1 = backend.empty({4 * kMiB / 4}, DType::kF32, MemCategory::kCommBuffers);
    Tensor b2 = backend.empty({4 * kMiB / 4}, DType::kF32, MemCategory::kCommBuffers);
  }
  for (int i = 0; i < 3; ++i) {
    Tensor b1 = backend.empty({4 * kMiB / 4}, DType::kF32, MemCategory::kCommBuffers);
    Tensor b2 = backend.empty({4 * kMiB / 4}, DType::kF32, MemCategory::kCommBuffers);
    EXPECT_EQ(reserved(), 8 * kMiB) << "round " << i << ": no new mapping";
  }
  backend.release_cached();
  EXPECT_EQ(reserved(), 0);
}

TEST(MemoryTrackerTest, ReportedMemoryAgreesWithRss) {
  CpuBackend backend;
  backend.release_cached();
  const int64_t rss0 = process_rss_bytes();
  const int64_t reserved0 = MemoryTracker::global().snapshot().reserved[0].current;
  std::vector<Tensor> held;
  const MemCategory cats[] = {MemCategory::kParameters, MemCategory::kGradients, MemCategory::kOptimizerState,
                              MemCategory::kActivations};
  for (int i = 0; i < 24; ++i) {  // 24 x 12 MiB = 288 MiB, touched
    Tensor t = backend.empty({12 * kMiB / 4}, DType::kF32, cats[i % 4]);
    std::memset(t.data(), 1, t.nbytes());
    held.push_back(t);
  }
  const int64_t tracked = MemoryTracker::global().snapshot().reserved[0].current - reserved0;
  const int64_t rss_growth = process_rss_bytes() - rss0;
  EXPECT_EQ(tracked, 288 * kMiB);
  EXPECT_NEAR(static_cast<double>(rss_growth), static_cast<double>(tracked), 0.02 * tracked + 4 * kMiB);
  held.clear();
  backend.release_cached();
  const int64_t rss_after = process_rss_bytes();
  EXPECT_LT(rss_after - rss0, 8 * kMiB) << "memory went back to the OS";
}

}  // namespace
}  // namespace zero
