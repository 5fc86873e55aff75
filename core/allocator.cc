// Host caching allocator; see allocator.h.
#include "core/allocator.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "core/check.h"

namespace zero {

namespace {
constexpr size_t kPageBytes = 4096;
}

size_t HostAllocator::rounded_size(size_t bytes) {
  return (bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
}

HostAllocator::~HostAllocator() { release_cached(); }

void* HostAllocator::allocate(size_t bytes, size_t alignment) {
  ZE_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0) << "alignment " << alignment;
  if (bytes == 0) bytes = 1;
  if (bytes < kCacheMinBytes && alignment <= kPageBytes) {
    const size_t a = alignment < sizeof(void*) ? sizeof(void*) : alignment;
    void* p = std::aligned_alloc(a, (bytes + a - 1) / a * a);
    if (p != nullptr) MemoryTracker::global().add_reserved(Tier::kHost, static_cast<int64_t>(bytes));
    return p;
  }
  ZE_CHECK_LE(alignment, kPageBytes) << "host alignment beyond a page is not supported";
  const size_t size = rounded_size(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = free_blocks_.find(size);
  if (it != free_blocks_.end() && !it->second.empty()) {
    void* p = it->second.back().ptr;  // the most recently freed: its pages are the likeliest still warm
    it->second.pop_back();
    if (it->second.empty()) free_blocks_.erase(it);
    cached_bytes_ -= size;
    live_bytes_ += size;
    return p;  // stays reserved: it was never returned to the OS
  }
  live_high_water_ = std::max(live_high_water_, live_bytes_ + size);
  evict_for(size);
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  live_bytes_ += size;
  MemoryTracker::global().add_reserved(Tier::kHost, static_cast<int64_t>(size));
  return p;
}

void HostAllocator::evict_for(size_t incoming) {
  while (cached_bytes_ > 0 && live_bytes_ + cached_bytes_ + incoming > live_high_water_) {
    auto oldest = free_blocks_.begin();
    for (auto it = free_blocks_.begin(); it != free_blocks_.end(); ++it)
      if (it->second.front().freed_seq < oldest->second.front().freed_seq) oldest = it;
    const size_t size = oldest->first;
    ZE_CHECK(munmap(oldest->second.front().ptr, size) == 0);
    oldest->second.erase(oldest->second.begin());
    if (oldest->second.empty()) free_blocks_.erase(oldest);
    cached_bytes_ -= size;
    MemoryTracker::global().add_reserved(Tier::kHost, -static_cast<int64_t>(size));
  }
}

void HostAllocator::deallocate(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  if (bytes == 0) bytes = 1;
  if (bytes < kCacheMinBytes) {
    std::free(ptr);
    MemoryTracker::global().add_reserved(Tier::kHost, -static_cast<int64_t>(bytes));
    return;
  }
  const size_t size = rounded_size(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  free_blocks_[size].push_back({free_seq_++, ptr});
  cached_bytes_ += size;
  live_bytes_ -= size;
}

void HostAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [size, blocks] : free_blocks_) {
    for (const CachedBlock& b : blocks) {
      ZE_CHECK(munmap(b.ptr, size) == 0);
      MemoryTracker::global().add_reserved(Tier::kHost, -static_cast<int64_t>(size));
    }
  }
  free_blocks_.clear();
  cached_bytes_ = 0;
}

size_t HostAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_bytes_;
}

}  // namespace zero
