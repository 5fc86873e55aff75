// A grow-only scratch buffer for one op at a time: temporary casts of GEMM
// operands, oneDNN scratchpads, fp32 staging of 16-bit gradients. Allocated
// through the backend, so it is tracked (category: workspace). CPU ops run one
// at a time on the compute stream, so one arena serves them all.
#pragma once

#include <cstddef>
#include <memory>

#include "runtime/core/tensor.h"

namespace zero {
class Backend;
}

namespace zero::cpu {

class WorkspaceArena {
 public:
  explicit WorkspaceArena(Backend& backend) : backend_(backend) {}

  // Carves consecutive 64-byte-aligned regions of the given sizes out of the
  // arena, growing it when needed. Every call invalidates the regions of the
  // previous one.
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
  void* reserve(size_t bytes);

 private:
  static size_t align(size_t b) { return (b + 63) / 64 * 64; }

  Backend& backend_;
  std::shared_ptr<Storage> buffer_;
};

}  // namespace zero::cpu
