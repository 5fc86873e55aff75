// How a model's layers are divided among P pipeline stages (DeepSpeed's
// PipelineModule partition_method): contiguous runs of layers, every stage
// at least one.
//
//   uniform     as equal a count of layers as can be (the first
//               n mod P stages one more; DeepSpeed's partition_uniform).
//   parameters  the split whose largest stage holds the fewest parameters
//               (DeepSpeed's partition_balanced over per-layer parameter
//               counts), counting what the first and last stages hold beside
//               their layers (a GPT's embeddings; its final norm and the tied
//               copy of the token table), so those stages get fewer layers;
//               among equals, the one with the most even stages (least sum
//               of squares).
//
// Interleaved stages (Megatron's num_layers_per_virtual_pipeline_stage, our
// pipeline.num_layers_per_virtual_stage = L): n layers make n / L virtual
// stages of L layers each, v = n / (P L) per stage; stage s holds virtual
// stages s, P + s, ..., (v - 1) P + s, as v chunks of L layers.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/parallel_layers.h"

namespace zero {

enum class PartitionMethod { kUniform, kParameters };

std::string_view partition_method_name(PartitionMethod m);

// The layers of each of `stages` stages, in order. layer_params[i]: layer
// i's parameters; first_extra / last_extra: the first and last stages'
// parameters outside the layers (both on one stage when stages is 1).
// INVALID_ARGUMENT naming both numbers when there are fewer layers than stages.
absl::StatusOr<std::vector<SplitRange>> partition_layers(const std::vector<int64_t>& layer_params, int stages,
                                                         PartitionMethod method, int64_t first_extra = 0,
                                                         int64_t last_extra = 0);

// The layers of each of stage `stage`'s chunks (of `stages`) at
// layers_per_virtual_stage layers per virtual stage, in chunk order.
// INVALID_ARGUMENT naming pipeline.num_layers_per_virtual_stage when it is
// below 1 or stages x it does not divide the layers.
absl::StatusOr<std::vector<SplitRange>> partition_virtual_stages(int64_t layers, int stages, int stage,
                                                                 int64_t layers_per_virtual_stage);

}  // namespace zero
