// Tracked allocation and the synchronous conveniences shared by all backends.
#include "kernels/backend.h"

#include "core/check.h"
#include "core/signals.h"
#include "core/strings.h"

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
  // Ops allocate where no Status can travel: a failure (too large a batch,
  // memory taken by another process) ends the run cleanly, exit 1, naming
  // the size and the category.
  if (!storage.ok()) exit_on_fatal_error(cat(storage.status().message(), "; lower the batch or the model, or offload"));
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

void upload_fp32(Backend& backend, absl::Span<const float> host, const Tensor& dst) {
  ZE_CHECK_EQ(static_cast<int64_t>(host.size()), dst.numel());
  if (dst.numel() == 0) return;
  const Tensor src = Tensor::wrap(const_cast<float*>(host.data()), {dst.numel()}, DType::kF32, Tier::kHost);
  if (dst.tier() == Tier::kHost) {
    backend.ops().cast(src, dst.view({dst.numel()}));
    return;
  }
  Tensor staging = backend.empty({dst.numel()}, DType::kF32, MemCategory::kWorkspace);
  backend.copy(staging, src);
  backend.ops().cast(staging, dst.view({dst.numel()}));
}

std::vector<float> download_fp32(Backend& backend, const Tensor& src) {
  Tensor f = src;
  if (src.dtype() != DType::kF32) {
    f = backend.empty({src.numel()}, DType::kF32, MemCategory::kWorkspace);
    backend.ops().cast(src.view({src.numel()}), f);
  }
  std::vector<float> out(static_cast<size_t>(src.numel()));
  backend.copy(out.data(), f.data(), out.size() * sizeof(float));
  return out;
}

}  // namespace zero
