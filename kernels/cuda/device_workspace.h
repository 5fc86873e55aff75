// A grow-only device scratch buffer for the op in flight: GEMM operand casts
// and fp32 staging, column-sum partials, the embedding sort, reduction
// partials. Allocated through the backend (device tier, category workspace),
// so it is tracked like every other byte.
//
// Reuse across ops is safe without synchronisation because every op runs on
// the compute stream: the next op's kernels start after the previous op's
// have finished with the buffer. When the buffer grows, the old block goes
// back to the backend's allocator, which does not hand it out again until
// the compute stream has passed the point of release (see cuda_backend.h).
#pragma once

#include <cstddef>
#include <memory>

#include "runtime/core/tensor.h"

namespace zero {
class Backend;
}

namespace zero::cuda {

class DeviceWorkspace {
 public:
  explicit DeviceWorkspace(Backend& backend) : backend_(backend) {}

  // Carves consecutive 256-byte-aligned regions of the given sizes out of the
  // buffer, growing it when needed; a region of 0 bytes is nullptr. Every call
  // invalidates the regions of the previous one.
  template <size_t N>
  void carve(const size_t (&bytes)[N], void* (&out)[N]) {
    size_t total = 0;
    for (size_t b : bytes) total += align(b);
    char* base = static_cast<char*>(reserve(total));
    for (size_t i = 0; i < N; ++i) {
      out[i] = bytes[i] == 0 ? nullptr : base;
      base += align(bytes[i]);
    }
  }
  // At least `bytes` bytes of device memory (nullptr for 0).
  void* reserve(size_t bytes);

 private:
  static size_t align(size_t b) { return (b + 255) / 256 * 256; }

  Backend& backend_;
  std::shared_ptr<Storage> buffer_;
};

}  // namespace zero::cuda
