// AlignedBufferPool: page alignment, tracking as swap buffers, acquire/release.
#include "offload/aligned_buffer_pool.h"

#include <gtest/gtest.h>

#include <set>

#include "kernels/cpu/cpu_backend.h"

namespace zero {
namespace {

int64_t swap_buffer_bytes() {
  return MemoryTracker::global().snapshot().at(Tier::kHost, MemCategory::kSwapBuffers).current;
}

TEST(AlignedBufferPoolTest, BuffersArePageAlignedZeroedAndTrackedAsSwapBuffers) {
  CpuBackend backend;
  const int64_t before = swap_buffer_bytes();
  {
    // 100000 bytes round up to 25 pages; small enough for the allocator's
    // aligned_alloc path and large enough for its mmap path below.
    auto small = AlignedBufferPool::create(backend, 3, 100000);
    ASSERT_TRUE(small.ok()) << small.status();
    EXPECT_EQ((*small)->buffer_bytes(), 25 * kIoAlignment);
    auto large = AlignedBufferPool::create(backend, 2, 3 << 20);
    ASSERT_TRUE(large.ok()) << large.status();
    EXPECT_EQ(swap_buffer_bytes() - before, static_cast<int64_t>(3 * 25 * kIoAlignment + 2 * (3 << 20)));
    for (AlignedBufferPool* pool : {small->get(), large->get()}) {
      for (size_t i = 0; i < pool->buffer_count(); ++i) {
        const IoBuffer b = pool->buffer(static_cast<int>(i));
        EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data) % kIoAlignment, 0u);
        EXPECT_EQ(b.index, static_cast<int>(i));
        for (size_t j = 0; j < b.bytes; j += 997) ASSERT_EQ(b.data[j], 0) << "buffer " << i << " byte " << j;
      }
      const auto spans = pool->spans();
      ASSERT_EQ(spans.size(), pool->buffer_count());
      EXPECT_EQ(spans[1].data(), pool->buffer(1).data);
      EXPECT_EQ(spans[1].size(), pool->buffer_bytes());
    }
  }
  EXPECT_EQ(swap_buffer_bytes(), before);
}

TEST(AlignedBufferPoolTest, AcquireReleaseAndExhaustion) {
  CpuBackend backend;
  auto pool = AlignedBufferPool::create(backend, 3, kIoAlignment);
  ASSERT_TRUE(pool.ok());
  std::set<int> seen;
  std::vector<IoBuffer> held;
  for (int i = 0; i < 3; ++i) {
    auto b = (*pool)->acquire();
    ASSERT_TRUE(b.ok());
    seen.insert(b->index);
    held.push_back(*b);
  }
  EXPECT_EQ(seen.size(), 3u);
  EXPECT_EQ((*pool)->free_count(), 0u);
  auto none = (*pool)->acquire();
  EXPECT_EQ(none.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(none.status().message().find("all 3 swap buffers"), std::string::npos) << none.status();
  EXPECT_NE(none.status().message().find("buffer_count"), std::string::npos) << none.status();
  (*pool)->release(held[1]);
  auto again = (*pool)->acquire();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->index, held[1].index);
  EXPECT_EQ(again->data, held[1].data);
}

TEST(AlignedBufferPoolTest, RefusesEmptyPools) {
  CpuBackend backend;
  EXPECT_EQ(AlignedBufferPool::create(backend, 0, 4096).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AlignedBufferPool::create(backend, 2, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(AlignedBufferPoolDeathTest, DoubleReleaseIsABug) {
  CpuBackend backend;
  auto pool = AlignedBufferPool::create(backend, 1, 4096);
  ASSERT_TRUE(pool.ok());
  auto b = (*pool)->acquire();
  ASSERT_TRUE(b.ok());
  (*pool)->release(*b);
  EXPECT_DEATH((*pool)->release(*b), "released twice");
}

}  // namespace
}  // namespace zero
