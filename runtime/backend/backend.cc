// Tracked allocation and the synchronous conveniences shared by all backends.
#include "runtime/backend/backend.h"

#include "runtime/base/strings.h"
#include "runtime/base/check.h"

namespace zero {

absl::StatusOr<std::shared_ptr<Storage>> Backend::allocate(size_t bytes, Tier tier,
                                                           MemCategory category,
                                                           size_t alignment) {
  RawAllocator* raw = raw_allocator(tier);
  if (raw == nullptr) {
    return absl::InvalidArgumentError(
        cat("backend ", name(), " has no ", tier_name(tier), " memory"));
  }
  void* p = raw->allocate(bytes, alignment);
  if (p == nullptr) {
    const MemorySnapshot s = process_tracker().snapshot();
    return absl::ResourceExhaustedError(cat(
        "out of ", tier_name(tier), " memory allocating ", format_bytes(static_cast<int64_t>(bytes)),
        " for ", mem_category_name(category), " (", format_bytes(s.allocated[static_cast<int>(tier)].current),
        " already allocated on this rank)"));
  }
  return std::make_shared<Storage>(p, bytes, tier, category, raw, &tracker_, &process_tracker());
}

Tensor Backend::empty(const Shape& shape, DType dtype, MemCategory category) {
  return empty(shape, dtype, category, compute_tier());
}

Tensor Backend::empty(const Shape& shape, DType dtype, MemCategory category, Tier tier) {
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  absl::StatusOr<std::shared_ptr<Storage>> storage = allocate(bytes, tier, category);
  ZE_CHECK(storage.ok()) << storage.status().ToString();
  return Tensor(*std::move(storage), shape, dtype);
}

Tensor Backend::zeros(const Shape& shape, DType dtype, MemCategory category) {
  Tensor t = empty(shape, dtype, category);
  ops().fill(t, 0.0f);
  return t;
}

void Backend::release_cached() {
  for (Tier t : {Tier::kHost, Tier::kDevice}) {
    if (RawAllocator* raw = raw_allocator(t)) raw->release_cached();
  }
}

void Backend::copy(void* dst, const void* src, size_t bytes) {
  copy_async(dst, src, bytes, kComputeStream);
  synchronize_stream(kComputeStream);
}

void Backend::copy(const Tensor& dst, const Tensor& src) {
  ZE_CHECK_EQ(dst.nbytes(), src.nbytes());
  copy(dst.data(), src.data(), src.nbytes());
}

}  // namespace zero
