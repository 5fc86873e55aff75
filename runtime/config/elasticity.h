// DeepSpeed's "elasticity" section: one global batch that stays valid as the
// number of data-parallel ranks changes, decomposed as micro-batch x
// gradient accumulation x data-parallel ranks. The batch and the data-parallel
// sizes it allows are computed from max_train_batch_size and
// micro_batch_sizes the way DeepSpeed's deepspeed/elasticity computes them
// (versions 0.1 and 0.2), so a config behaves as it does there:
//
//  * version 0.1: candidate batches are each micro-batch size and their
//    least common multiple, each scaled by the largest highly composite
//    number that keeps it within max_train_batch_size; the candidate that
//    the most rank counts in [min_gpus, max_gpus] divide wins (ties: the
//    larger batch when prefer_larger_batch, else the smaller). A rank count
//    g is valid when batch / m is a multiple of g for some micro size m.
//    No model parallelism (model_parallel_size must be 1).
//  * version 0.2: the same over nodes (num_gpus_per_node ranks, of which
//    num_gpus_per_node / model_parallel_size are data-parallel); a
//    data-parallel size outside the valid list gets the largest (or
//    smallest) multiple of micro x ranks within max_train_batch_size
//    instead of an error.
//
// For a given data-parallel size the micro-batch is the largest listed size
// dividing batch / ranks, and gradient accumulation is what remains.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace zero {

struct ElasticityConfig {
  bool enabled = false;
  int64_t max_train_batch_size = 2000;
  std::vector<int64_t> micro_batch_sizes = {2, 4, 6};
  int64_t min_gpus = 1;
  int64_t max_gpus = 10000;
  double min_time = 0;  // minutes a scheduler should keep the job; no meaning to the engine
  double version = 0.2;
  bool prefer_larger_batch = true;
  bool ignore_non_elastic_batch_info = false;
  int64_t model_parallel_size = 1;
  int64_t num_gpus_per_node = 1;
  bool operator==(const ElasticityConfig&) const = default;
};

struct ElasticBatch {
  int64_t train_batch_size = 0;  // global
  int64_t micro_batch_size = 0;  // per data-parallel rank
  int64_t gradient_accumulation_steps = 0;
  std::vector<int64_t> valid_sizes;  // the data-parallel sizes the batch allows, ascending
};

// The batch and the valid sizes alone (version 0.1's rule; DeepSpeed's
// compute_elastic_config without a world size).
absl::StatusOr<ElasticBatch> elastic_batch_candidates(const ElasticityConfig& c);

// The batch for `data_parallel` ranks (`world` ranks in all, for version
// 0.2's node arithmetic). An error names the size and the valid ones when
// the size is not allowed (version 0.1), or no micro size divides.
absl::StatusOr<ElasticBatch> elastic_batch_for(const ElasticityConfig& c, int64_t data_parallel, int64_t world);

// "[1, 2, 4, 8]".
std::string describe_sizes(const std::vector<int64_t>& sizes);

}  // namespace zero
