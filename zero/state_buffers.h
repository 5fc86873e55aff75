// Values for model-state buffers, shared by the stage implementations:
// initial values (from init_parameter_values, a pure function of seed,
// parameter name and element index, so every rank computes exactly the
// values of the elements it holds, whatever the sharding), and adding a reduced gradient part of any dtype into a gradient
// partition.
#pragma once

#include <optional>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "graph/module.h"
#include "kernels/backend.h"

namespace zero {

// Elements [begin, end) of p's initial values, then zeros up to `length`
// elements (>= end - begin; a shard's padding). No seed: zeros throughout,
// for a state whose every element a checkpoint overwrites next
// (ModelStateOptions::skip_init). On a dry-run backend nothing
// is computed or held: values() has the length and no memory behind it, and
// its consumers (uploads and store writes on the same dry run) never read it.
class InitialValues {
 public:
  InitialValues(const Backend& backend, const Parameter& p, std::optional<uint64_t> seed, int64_t begin,
                int64_t end, int64_t length);
  absl::Span<const float> values() const { return values_; }

 private:
  std::vector<float> held_;
  absl::Span<const float> values_;
};

// Initial values are made a piece at a time: a host copy of a whole large
// parameter would stay in glibc's heap, resident, for the rest of the run
// (the communicator keeps freed memory: comm/mpi_communicator.h); 108 MiB for
// SmolLM-135M's token embedding.
inline constexpr int64_t kInitialValuesPieceElems = 1 << 20;
// Calls fn(offset, values) for consecutive pieces, at most
// kInitialValuesPieceElems long, of InitialValues(backend, p, seed, begin,
// end, length): offset counts from `begin`; the pieces cover `length`.
absl::Status for_each_initial_piece(const Backend& backend, const Parameter& p, std::optional<uint64_t> seed,
                                    int64_t begin, int64_t end, int64_t length,
                                    absl::FunctionRef<absl::Status(int64_t offset, absl::Span<const float> values)> fn);

// dst += scale * src, for gradient buffers of any float dtype (src is staged
// in fp32 when it is 16-bit, so the addition happens in fp32 and rounds once).
// src is scaled in place when scale != 1.
// 16-bit src is staged through kReducedStagingElems fp32 elements at a time.
inline constexpr int64_t kReducedStagingElems = 1 << 20;
void add_reduced(Backend& backend, const Tensor& dst, const Tensor& src, float scale);

}  // namespace zero
