// A fixed set of page-aligned host buffers for O_DIRECT I/O: the staging
// memory of the NVMe swappers and the memory IoEngine registers with io_uring.
//
// Every buffer is one tracked allocation (Backend::allocate, Tier::kHost,
// MemCategory::kSwapBuffers), so swap buffers show up in the memory report.
// Count and size are fixed at creation: a registered buffer table cannot grow
// cheaply, and a swapper that runs out should say so rather than allocate.
// Buffer i of the pool is registration index i (see IoEngine::register_buffers).
//
// Threading: acquire/release are not synchronised; the pool belongs to the
// thread that drives its IoEngine. Ownership: an acquired buffer belongs to the
// caller until release(); it must not be released while a transfer using it is
// still in flight (wait for the transfer first).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/backend.h"
#include "offload/io_engine.h"

namespace zero {

// One buffer of a pool; a plain value that names the memory and its index.
struct IoBuffer {
  uint8_t* data = nullptr;
  size_t bytes = 0;  // the pool's buffer_bytes
  int index = -1;    // position in the pool (= io_uring registration index)
};

class AlignedBufferPool {
 public:
  // `count` buffers of `buffer_bytes` each, rounded up to kIoAlignment and
  // zero-filled (so a stray read of unwritten tail bytes is deterministic).
  // Fails with INVALID_ARGUMENT for a zero count or size and with
  // RESOURCE_EXHAUSTED when host memory runs out.
  static absl::StatusOr<std::unique_ptr<AlignedBufferPool>> create(Backend& backend, size_t count,
                                                                   size_t buffer_bytes);

  AlignedBufferPool(const AlignedBufferPool&) = delete;
  AlignedBufferPool& operator=(const AlignedBufferPool&) = delete;
  ~AlignedBufferPool();

  size_t buffer_count() const { return storages_.size(); }
  size_t buffer_bytes() const { return buffer_bytes_; }
  size_t free_count() const { return free_.size(); }

  // A free buffer, or RESOURCE_EXHAUSTED naming the pool's size when all are
  // in use (the swapper's buffer_count is too small).
  absl::StatusOr<IoBuffer> acquire();
  // Returns an acquired buffer. Releasing a buffer twice or one of another
  // pool is a bug (aborts).
  void release(const IoBuffer& buffer);

  // Buffer i, acquired or not (for registration and for tests).
  IoBuffer buffer(int index) const;
  // All buffers as byte spans, in index order: what IoEngine registers.
  std::vector<absl::Span<uint8_t>> spans() const;

 private:
  AlignedBufferPool(std::vector<std::shared_ptr<Storage>> storages, size_t buffer_bytes);

  std::vector<std::shared_ptr<Storage>> storages_;
  size_t buffer_bytes_;
  std::vector<int> free_;       // indices of free buffers; acquire takes from the back
  std::vector<bool> in_use_;
};

}  // namespace zero
