// The one place a built-in model is built for a device mesh: zero-train,
// zero-estimate's dry run, the benchmarks and the C++ API all call
// build_model, so a model that one of them accepts the others accept too, and
// a model that cannot be split the way the mesh asks is an INVALID_ARGUMENT
// naming the model field (never a failed check inside a constructor).
//
//   mesh = DeviceMesh::create(world, T, P)          (comm/device_mesh.h)
//   model = build_model(spec, *mesh, layout)        this rank's tensor slice of
//                                                   its pipeline stage
//   engine = Engine::create(model, config, backend, *mesh)
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "comm/device_mesh.h"
#include "graph/gpt.h"
#include "graph/pipeline_partition.h"

namespace zero {

// How the model is laid over the mesh beyond its shape: Megatron's sequence
// parallelism between the tensor-parallel layers, and how the blocks are cut
// into the mesh's pipeline stages (DeepSpeed's partition_method).
struct ModelLayout {
  bool sequence_parallel = false;
  PartitionMethod partition = PartitionMethod::kParameters;
  // pipeline.num_layers_per_virtual_stage: > 0, Megatron's interleaved
  // stages of that many blocks (graph/pipeline_partition.h), `partition`
  // unused; 0, one chunk per stage.
  int64_t layers_per_virtual_stage = 0;
  // tensor_parallel.tp_overlap_comm: every column-parallel layer without
  // sequence parallelism overlaps its input gradient's all-reduce with its
  // weight gradient (ColumnParallelLinear::set_overlap_comm; same results).
  bool tp_overlap_comm = false;
};

// The split rules for the mesh's tensor size (check_gpt_split) and its
// pipeline size (gpt_pipeline_stage), then this rank's part of the model: its
// stage's blocks, split over its tensor group.
absl::StatusOr<std::unique_ptr<Gpt>> build_model(const GptConfig& spec, DeviceMesh& mesh,
                                                 const ModelLayout& layout = {});

}  // namespace zero
