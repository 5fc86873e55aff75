// Grow-only device workspace; see device_workspace.h.
#include "kernels/cuda/device_workspace.h"

#include "runtime/backend/backend.h"

namespace zero::cuda {

void* DeviceWorkspace::reserve(size_t bytes) {
  if (bytes == 0) return nullptr;
  if (buffer_ == nullptr || buffer_->bytes() < bytes) {
    buffer_.reset();  // release first so the tracked peak is not old + new
    const size_t grown = bytes + bytes / 4;
    absl::StatusOr<std::shared_ptr<Storage>> s =
        backend_.allocate(grown, Tier::kDevice, MemCategory::kWorkspace);
    ZE_CHECK(s.ok()) << s.status().ToString();
    buffer_ = *std::move(s);
  }
  return buffer_->data();
}

}  // namespace zero::cuda
