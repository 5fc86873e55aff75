// Model-state buffer helpers; see state_buffers.h.
#include "zero/state_buffers.h"

#include <algorithm>

#include "core/status.h"
#include "graph/init.h"
#include "kernels/dry_run/dry_run_backend.h"

namespace zero {

InitialValues::InitialValues(const Backend& backend, const Parameter& p, std::optional<uint64_t> seed,
                             int64_t begin, int64_t end, int64_t length) {
  ZE_CHECK(begin <= end && end - begin <= length);
  if (backend.dry_run()) {
    values_ = absl::Span<const float>(reinterpret_cast<const float*>(kDryRunUnbackedAddress),
                                      static_cast<size_t>(length));
    return;
  }
  held_.assign(static_cast<size_t>(length), 0.0f);
  if (seed) init_parameter_values(p, *seed, begin, end, held_.data());
  values_ = held_;
}

absl::Status for_each_initial_piece(const Backend& backend, const Parameter& p, std::optional<uint64_t> seed,
                                    int64_t begin, int64_t end, int64_t length,
                                    absl::FunctionRef<absl::Status(int64_t offset, absl::Span<const float> values)> fn) {
  ZE_CHECK(begin <= end && end - begin <= length);
  for (int64_t o = 0; o < length; o += kInitialValuesPieceElems) {
    const int64_t n = std::min(kInitialValuesPieceElems, length - o);
    const int64_t a = std::min(end, begin + o), b = std::min(end, begin + o + n);  // the piece's values; zeros after
    const InitialValues piece(backend, p, seed, a, b, n);
    ZE_RETURN_IF_ERROR(fn(o, piece.values()));
  }
  return absl::OkStatus();
}

void add_reduced(Backend& backend, const Tensor& dst, const Tensor& src, float scale) {
  if (src.numel() == 0) return;
  if (scale != 1.0f) backend.ops().scale(src, scale);
  if (src.dtype() == DType::kF32) {
    backend.ops().accumulate(dst, src);
    return;
  }
  // Staged in fp32 a piece at a time: the workspace stays bounded however
  // large the reduced part (a tied embedding's gradient is one part).
  const int64_t n = src.numel(), piece = std::min(n, kReducedStagingElems);
  Tensor staged = backend.empty({piece}, DType::kF32, MemCategory::kWorkspace);
  for (int64_t o = 0; o < n; o += piece) {
    const Shape s{std::min(piece, n - o)};
    const Tensor part = staged.slice(0, s);
    backend.ops().cast(src.view({n}).slice(o, s), part);
    backend.ops().accumulate(dst.view({n}).slice(o, s), part);
  }
}

}  // namespace zero
