// A grow-only scratch buffer in the backend's compute tier for one op at a
// time: temporary casts of GEMM operands, oneDNN scratchpads, fp32 staging of
// 16-bit values. Allocated through the backend, so it is tracked (category:
// workspace). Ops run in order on the compute stream, so one arena serves them
// all (on CUDA the caching allocator does not reuse a freed block before the
// stream has passed the free, so growing it while earlier ops still read the
// old buffer is safe).
#pragma once

#include <cstddef>
#include <memory>

#include "core/tensor.h"

namespace zero {
class Backend;
}

namespace zero {

class WorkspaceArena {
 public:
  explicit WorkspaceArena(Backend& backend) : backend_(backend) {}

  // Carves consecutive 256-byte-aligned regions of the given sizes out of the
  // arena, growing it when needed; a region of 0 bytes is nullptr. Every call
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
  // At least `bytes` bytes (nullptr for 0).
  void* reserve(size_t bytes);

 private:
  static size_t align(size_t b) { return (b + 255) / 256 * 256; }

  Backend& backend_;
  std::shared_ptr<Storage> buffer_;
};

}  // namespace zero
