// Page-aligned, tracked swap buffers; see aligned_buffer_pool.h.
#include "offload/aligned_buffer_pool.h"

#include <cstdint>
#include <cstring>

#include "core/check.h"
#include "core/status.h"
#include "offload/huge_pages.h"

namespace zero {

absl::StatusOr<std::unique_ptr<AlignedBufferPool>> AlignedBufferPool::create(Backend& backend,
                                                                             size_t count,
                                                                             size_t buffer_bytes) {
  if (count == 0 || buffer_bytes == 0) {
    return absl::InvalidArgumentError(cat("swap buffer pool needs at least one buffer of at least one byte (got ",
                                          count, " buffers of ", buffer_bytes, " bytes)"));
  }
  const size_t rounded = (buffer_bytes + kIoAlignment - 1) / kIoAlignment * kIoAlignment;
  std::vector<std::shared_ptr<Storage>> storages;
  storages.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    absl::StatusOr<std::shared_ptr<Storage>> s =
        backend.allocate(rounded, Tier::kHost, MemCategory::kSwapBuffers, kIoAlignment);
    if (!s.ok()) {
      return annotate(s.status(), cat("allocating swap buffer ", i + 1, " of ", count, " (",
                                      format_bytes(static_cast<int64_t>(rounded)), " each)"));
    }
    ZE_CHECK_EQ(reinterpret_cast<uintptr_t>((*s)->data()) % kIoAlignment, 0u);
    // Touching every page now also means registration later pins resident
    // memory; asking for 2 MiB pages first makes the IoEngine's collapse into
    // them (io_engine.cc) a no-op instead of a copy of every buffer.
    if (!backend.dry_run()) {
      advise_huge_pages(static_cast<uint8_t*>((*s)->data()), rounded);
      std::memset((*s)->data(), 0, rounded);
    }
    storages.push_back(*std::move(s));
  }
  return std::unique_ptr<AlignedBufferPool>(new AlignedBufferPool(std::move(storages), rounded));
}

AlignedBufferPool::AlignedBufferPool(std::vector<std::shared_ptr<Storage>> storages, size_t buffer_bytes)
    : storages_(std::move(storages)), buffer_bytes_(buffer_bytes), in_use_(storages_.size(), false) {
  free_.reserve(storages_.size());
  // Reverse order so that acquire() hands out buffer 0 first.
  for (int i = static_cast<int>(storages_.size()) - 1; i >= 0; --i) free_.push_back(i);
}

AlignedBufferPool::~AlignedBufferPool() = default;

absl::StatusOr<IoBuffer> AlignedBufferPool::acquire() {
  if (free_.empty()) {
    return absl::ResourceExhaustedError(cat("all ", storages_.size(), " swap buffers of ",
                                            format_bytes(static_cast<int64_t>(buffer_bytes_)),
                                            " are in use; raise the swapper's buffer_count"));
  }
  const int index = free_.back();
  free_.pop_back();
  in_use_[index] = true;
  return buffer(index);
}

void AlignedBufferPool::release(const IoBuffer& b) {
  ZE_CHECK(b.index >= 0 && static_cast<size_t>(b.index) < storages_.size()) << "buffer index " << b.index;
  ZE_CHECK(b.data == storages_[b.index]->data()) << "buffer " << b.index << " is not from this pool";
  ZE_CHECK(in_use_[b.index]) << "swap buffer " << b.index << " released twice";
  in_use_[b.index] = false;
  free_.push_back(b.index);
}

IoBuffer AlignedBufferPool::buffer(int index) const {
  ZE_CHECK(index >= 0 && static_cast<size_t>(index) < storages_.size()) << "buffer index " << index;
  return IoBuffer{static_cast<uint8_t*>(storages_[index]->data()), buffer_bytes_, index};
}

std::vector<absl::Span<uint8_t>> AlignedBufferPool::spans() const {
  std::vector<absl::Span<uint8_t>> out;
  out.reserve(storages_.size());
  for (const auto& s : storages_) out.emplace_back(static_cast<uint8_t*>(s->data()), buffer_bytes_);
  return out;
}

}  // namespace zero
