// Tensor and Storage; see tensor.h.
#include "core/tensor.h"

#include "absl/strings/str_join.h"
#include "core/allocator.h"
#include "core/strings.h"

namespace zero {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    ZE_CHECK_GE(d, 0);
    n *= d;
  }
  return n;
}

std::string shape_string(const Shape& shape) { return cat("[", absl::StrJoin(shape, ", "), "]"); }

Storage::Storage(void* ptr, size_t bytes, Tier tier, MemCategory category, RawAllocator* owner,
                 MemoryTracker* also, MemoryTracker* process)
    : ptr_(ptr),
      bytes_(bytes),
      tier_(tier),
      category_(category),
      owner_(owner),
      also_(also),
      process_(process != nullptr ? process : &MemoryTracker::global()) {
  process_->add_allocated(tier_, category_, static_cast<int64_t>(bytes_));
  if (also_ != nullptr) also_->add_allocated(tier_, category_, static_cast<int64_t>(bytes_));
}

Storage::~Storage() {
  process_->add_allocated(tier_, category_, -static_cast<int64_t>(bytes_));
  if (also_ != nullptr) also_->add_allocated(tier_, category_, -static_cast<int64_t>(bytes_));
  if (owner_ != nullptr) owner_->deallocate(ptr_, bytes_);
}

Tensor::Tensor(std::shared_ptr<Storage> storage, Shape shape, DType dtype, size_t offset_bytes)
    : storage_(std::move(storage)), shape_(std::move(shape)), dtype_(dtype), dtype_set_(true) {
  ZE_CHECK(storage_ != nullptr);
  numel_ = shape_numel(shape_);
  ZE_CHECK_LE(offset_bytes + nbytes(), storage_->bytes()) << shape_string(shape_);
  data_ = static_cast<char*>(storage_->data()) + offset_bytes;
  tier_ = storage_->tier();
}

Tensor Tensor::wrap(void* data, Shape shape, DType dtype, Tier tier) {
  Tensor t;
  t.data_ = data;
  t.shape_ = std::move(shape);
  t.numel_ = shape_numel(t.shape_);
  t.dtype_ = dtype;
  t.tier_ = tier;
  t.dtype_set_ = true;
  return t;
}

Tensor Tensor::view(Shape shape) const {
  ZE_CHECK_EQ(shape_numel(shape), numel_) << shape_string(shape) << " from " << shape_string(shape_);
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::slice(int64_t offset_elems, Shape shape) const {
  const int64_t n = shape_numel(shape);
  ZE_CHECK(offset_elems >= 0 && offset_elems + n <= numel_)
      << "slice [" << offset_elems << ", " << offset_elems + n << ") of " << numel_;
  Tensor t = *this;
  t.shape_ = std::move(shape);
  t.numel_ = n;
  t.data_ = static_cast<char*>(data_) + static_cast<size_t>(offset_elems) * dtype_size(dtype_);
  return t;
}

Tensor Tensor::rows(int64_t row_begin, int64_t row_end) const {
  ZE_CHECK(ndim() >= 1 && row_begin >= 0 && row_begin <= row_end && row_end <= shape_[0]);
  Shape s = shape_;
  s[0] = row_end - row_begin;
  return slice(row_begin * (shape_[0] == 0 ? 0 : numel_ / shape_[0]), s);
}

std::string Tensor::debug_string() const {
  return cat(dtype_name(dtype_), shape_string(shape_), " ", tier_name(tier_));
}

}  // namespace zero
