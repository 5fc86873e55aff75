// Deterministic sampling of training windows. Sample g of the run (g counts
// samples over the whole run, across ranks) is a window of seq_len + 1 tokens
// whose position is a hash of (seed, g): inputs are its first seq_len tokens,
// targets the last seq_len. Nothing depends on thread timing or on how many
// ranks share the work, so resuming at a step, or running N ranks at micro
// batch b instead of one rank at N*b, sees exactly the same samples.
//
// DeepSpeed's global-batch order: at optimizer step s, micro-step j of G,
// data-parallel rank r of W (comm/device_mesh.h), micro-batch row i
// of b:  g = ((s*G + j)*W + r)*b + i.
#pragma once

#include <memory>

#include "runtime/data/token_source.h"
#include "runtime/engine/engine.h"

namespace zero {

class DataLoader {
 public:
  // Fails when no sequence of the source holds seq_len + 1 tokens.
  static absl::StatusOr<std::unique_ptr<DataLoader>> create(std::unique_ptr<TokenSource> source,
                                                            int64_t seq_len, uint64_t seed);

  // Fills inputs and targets (int32 [count, seq_len] each) with samples
  // [first_sample, first_sample + count); fails when the source cannot be
  // read (a file changed under the run), naming it.
  absl::Status fill(int64_t first_sample, int64_t count, int32_t* inputs, int32_t* targets) const;

  // The micro-batch of (step, micro_step, rank) as host tensors owned by the
  // loader (valid until the next call).
  absl::StatusOr<Batch> micro_batch(int64_t step, int64_t micro_step, int rank, int world, int64_t micro_batch_size,
                                    int64_t accumulation_steps);

  const TokenSource& source() const { return *source_; }
  int64_t seq_len() const { return seq_len_; }

 private:
  DataLoader(std::unique_ptr<TokenSource> source, int64_t seq_len, uint64_t seed);

  std::unique_ptr<TokenSource> source_;
  int64_t seq_len_;
  uint64_t seed_;
  std::vector<int64_t> window_starts_;  // cumulative windows per sequence
  std::vector<int32_t> inputs_, targets_;
};

}  // namespace zero
