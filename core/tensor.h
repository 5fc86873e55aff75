// Tensor: a contiguous, row-major view of typed memory in one tier.
//
// A Tensor either shares ownership of a Storage (allocated through
// Backend::allocate, tracked by category and tier) or is a non-owning view of
// memory someone else keeps alive (Tensor::wrap). Views into a storage (flat
// parameter buffers, slices) keep the storage alive. Copying a Tensor copies
// the handle, never the data.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/inlined_vector.h"
#include "core/check.h"
#include "core/dtype.h"
#include "core/memory_tracker.h"

namespace zero {

class RawAllocator;

using Shape = absl::InlinedVector<int64_t, 4>;

int64_t shape_numel(const Shape& shape);
std::string shape_string(const Shape& shape);  // "[4, 64, 768]"

// One tracked allocation. Frees itself (and its accounting) on destruction.
// Counted in `process` (the process-wide figures: MemoryTracker::global()
// when null, a dry run's own tracker in a plan) and, when given, in `also`
// (the per-backend figures of Backend::memory()); both must outlive the
// storage, as the owner allocator must.
class Storage {
 public:
  Storage(void* ptr, size_t bytes, Tier tier, MemCategory category, RawAllocator* owner,
          MemoryTracker* also = nullptr, MemoryTracker* process = nullptr);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  Tier tier() const { return tier_; }
  MemCategory category() const { return category_; }

 private:
  void* ptr_;
  size_t bytes_;
  Tier tier_;
  MemCategory category_;
  RawAllocator* owner_;  // nullptr: memory not owned (never happens for tracked storage)
  MemoryTracker* also_;
  MemoryTracker* process_;
};

class Tensor {
 public:
  Tensor() = default;

  // A tensor over a whole storage or a part of it starting at offset_bytes.
  Tensor(std::shared_ptr<Storage> storage, Shape shape, DType dtype, size_t offset_bytes = 0);

  // Non-owning view of external memory (tests, memory-mapped inputs).
  static Tensor wrap(void* data, Shape shape, DType dtype, Tier tier = Tier::kHost);

  bool defined() const { return dtype_set_; }
  void* data() const { return data_; }
  template <typename T>
  T* data_as() const {
    ZE_CHECK_EQ(sizeof(T), dtype_size(dtype_));
    return static_cast<T*>(data_);
  }
  float* f32() const {
    ZE_CHECK(dtype_ == DType::kF32) << "tensor is " << dtype_name(dtype_);
    return static_cast<float*>(data_);
  }
  int32_t* i32() const {
    ZE_CHECK(dtype_ == DType::kI32) << "tensor is " << dtype_name(dtype_);
    return static_cast<int32_t*>(data_);
  }

  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const {
    if (i < 0) i += ndim();
    ZE_CHECK(i >= 0 && i < ndim());
    return shape_[i];
  }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Tier tier() const { return tier_; }
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  // Same data, another shape with the same number of elements.
  Tensor view(Shape shape) const;
  // Elements [offset_elems, offset_elems + numel(shape)) of this tensor, as `shape`.
  Tensor slice(int64_t offset_elems, Shape shape) const;
  // Rows [row_begin, row_end) along dimension 0.
  Tensor rows(int64_t row_begin, int64_t row_end) const;

  std::string debug_string() const;  // "fp32[4, 64] host"

 private:
  std::shared_ptr<Storage> storage_;
  void* data_ = nullptr;
  Shape shape_;
  int64_t numel_ = 0;
  DType dtype_ = DType::kF32;
  Tier tier_ = Tier::kHost;
  bool dtype_set_ = false;
};

}  // namespace zero
