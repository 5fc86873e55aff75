// Deterministic sampling of training rows. A SampleSet is what can be
// drawn: N rows of seq_len inputs and seq_len targets (a target < 0 is no
// loss there). Two kinds share the sampling and batching below:
//  * windows of a token source (pretraining, TokenWindows): a window of
//    seq_len + 1 tokens inside one sequence; inputs are its first seq_len
//    tokens, targets the last seq_len;
//  * SFT rows (runtime/data/sft_dataset.h): one example, or several packed,
//    right-padded, with the prompt's targets masked.
//
// Sample g of the run (g counts samples over the whole run, across ranks) is
// a row chosen by (seed, g) alone, in one of two orders:
//  * kHashed: row splitmix64(seed ^ splitmix64(g)) mod N, uniform with
//    replacement (windows: N is every start position, up to billions);
//  * kEpochs: epoch g / N visits every row once, in a permutation of the N
//    rows seeded by (seed, epoch) (SFT: each example once per epoch).
// Nothing depends on thread timing or on how many ranks share the work, so
// resuming at a step, or running N ranks at micro batch b instead of one
// rank at N*b, sees exactly the same samples.
//
// DeepSpeed's global-batch order: at optimizer step s, micro-step j of G,
// data-parallel rank r of W (comm/device_mesh.h), micro-batch row i
// of b:  g = ((s*G + j)*W + r)*b + i.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/data/token_source.h"
#include "runtime/engine/engine.h"

namespace zero {

class SampleSet {
 public:
  virtual ~SampleSet() = default;
  // Rows that can be drawn (>= 1).
  virtual int64_t size() const = 0;
  virtual int64_t seq_len() const = 0;
  // Row `index` (0 <= index < size()) as seq_len inputs and seq_len targets;
  // fails when its data cannot be read (a file changed under the run), naming it.
  virtual absl::Status fill(int64_t index, int32_t* inputs, int32_t* targets) const = 0;
  // For the start-up lines: "3 llm.c shards (32-bit tokens), 1.2M tokens".
  virtual std::string describe() const = 0;
};

// The windows of seq_len + 1 tokens of `source`, each inside one sequence.
// Fails when no sequence holds seq_len + 1 tokens.
absl::StatusOr<std::unique_ptr<SampleSet>> make_token_windows(std::unique_ptr<TokenSource> source, int64_t seq_len);

enum class SampleOrder {
  kHashed,  // uniform with replacement
  kEpochs,  // a seeded permutation per epoch
};

class DataLoader {
 public:
  // Windows of `source`, kHashed (make_token_windows' errors).
  static absl::StatusOr<std::unique_ptr<DataLoader>> create(std::unique_ptr<TokenSource> source,
                                                            int64_t seq_len, uint64_t seed);
  static std::unique_ptr<DataLoader> create(std::unique_ptr<SampleSet> samples, uint64_t seed, SampleOrder order);

  // The row sample g draws (see above).
  int64_t row_of_sample(int64_t g) const;

  // Fills inputs and targets (int32 [count, seq_len] each) with samples
  // [first_sample, first_sample + count); fails when the data cannot be
  // read (a file changed under the run), naming it. Not thread-safe (kEpochs
  // keeps the current epoch's permutation).
  absl::Status fill(int64_t first_sample, int64_t count, int32_t* inputs, int32_t* targets) const;

  // The micro-batch of (step, micro_step, rank) as host tensors owned by the
  // loader (valid until the next call).
  absl::StatusOr<Batch> micro_batch(int64_t step, int64_t micro_step, int rank, int world, int64_t micro_batch_size,
                                    int64_t accumulation_steps);

  const SampleSet& samples() const { return *samples_; }
  int64_t seq_len() const { return samples_->seq_len(); }
  SampleOrder order() const { return order_; }

 private:
  DataLoader(std::unique_ptr<SampleSet> samples, uint64_t seed, SampleOrder order)
      : samples_(std::move(samples)), seed_(seed), order_(order) {}

  std::unique_ptr<SampleSet> samples_;
  uint64_t seed_;
  SampleOrder order_;
  // kEpochs: the permutation of epoch permutation_epoch_ (-1: none yet).
  mutable int64_t permutation_epoch_ = -1;
  mutable std::vector<int64_t> permutation_;
  std::vector<int32_t> inputs_, targets_;
};

}  // namespace zero
