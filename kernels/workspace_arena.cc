// Grow-only workspace; see workspace_arena.h.
#include "kernels/workspace_arena.h"

#include "kernels/backend.h"

namespace zero {

void* WorkspaceArena::reserve(size_t bytes) {
  if (bytes == 0) return nullptr;
  if (buffer_ == nullptr || buffer_->bytes() < bytes) {
    buffer_.reset();  // free first so the peak is not old + new
    const size_t grown = bytes + bytes / 4;
    absl::StatusOr<std::shared_ptr<Storage>> s =
        backend_.allocate(grown, backend_.compute_tier(), MemCategory::kWorkspace);
    ZE_CHECK(s.ok()) << s.status().ToString();
    buffer_ = *std::move(s);
  }
  return buffer_->data();
}

}  // namespace zero
