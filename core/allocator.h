// Raw allocators: where bytes physically come from for one tier. They do not
// know categories; Backend::allocate() wraps them and does the per-category
// accounting, so every tracked byte passes through exactly one place.
//
// HostAllocator is a caching allocator: blocks of kCacheMinBytes or more are
// page-aligned anonymous mappings that are kept on free and handed back for the
// next request of the same rounded size. A training step repeats its sizes, so
// steady-state steps take few page faults (the same reason Open MPI's reducing
// collectives are slow here: they map and unmap temporaries on every call).
// Cached blocks count as reserved, not allocated; release_cached() returns them.
// The cache never lifts what the allocator holds above the high-water mark of
// its live blocks: before a request no cached block fits is mapped, the
// least recently freed blocks are unmapped until live + cached + the new block
// fit under that mark. So reserved (and RSS) peak where allocated peaks, not
// at the sum of every size a step ever used (with a cache that only grew, a
// stage-2 run with buckets of three sizes held 193 MiB of them above its
// allocated peak).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "core/memory_tracker.h"

namespace zero {

inline constexpr size_t kDefaultAlignment = 64;  // one cache line / one AVX-512 vector

class RawAllocator {
 public:
  virtual ~RawAllocator() = default;
  virtual Tier tier() const = 0;
  // Returns nullptr when the memory is not available; never throws.
  virtual void* allocate(size_t bytes, size_t alignment) = 0;
  virtual void deallocate(void* ptr, size_t bytes) = 0;
  // Returns cached blocks to the OS/driver.
  virtual void release_cached() {}
};

class HostAllocator final : public RawAllocator {
 public:
  static constexpr size_t kCacheMinBytes = 256 * 1024;

  HostAllocator() = default;
  ~HostAllocator() override;
  HostAllocator(const HostAllocator&) = delete;
  HostAllocator& operator=(const HostAllocator&) = delete;

  Tier tier() const override { return Tier::kHost; }
  void* allocate(size_t bytes, size_t alignment) override;
  void deallocate(void* ptr, size_t bytes) override;
  void release_cached() override;

  size_t cached_bytes() const;

 private:
  static size_t rounded_size(size_t bytes);
  // Unmaps cached blocks, least recently freed first, until live_bytes_ +
  // cached_bytes_ + incoming fits under the high-water mark (or none is left).
  void evict_for(size_t incoming);

  struct CachedBlock {
    uint64_t freed_seq;  // when it was freed (evicted oldest first)
    void* ptr;
  };
  mutable std::mutex mu_;
  std::map<size_t, std::vector<CachedBlock>> free_blocks_;  // rounded size -> cached mappings, oldest first
  size_t cached_bytes_ = 0;
  size_t live_bytes_ = 0;       // mapped blocks handed out (rounded sizes)
  size_t live_high_water_ = 0;  // the most live_bytes_ has been
  uint64_t free_seq_ = 0;
};

}  // namespace zero
