// Building a built-in model for a mesh; see build_model.h.
#include "graph/build_model.h"

#include "core/status.h"
#include "core/strings.h"
#include "graph/moe.h"
#include "graph/parallel_layers.h"

namespace zero {

absl::StatusOr<std::unique_ptr<Gpt>> build_model(const GptConfig& spec, DeviceMesh& mesh, const ModelLayout& layout) {
  ZE_RETURN_IF_ERROR(check_gpt_split(spec, mesh.shape().tensor, layout.sequence_parallel));
  ZE_RETURN_IF_ERROR(check_moe_pipeline(spec.moe, mesh.shape().pipeline));
  ZE_RETURN_IF_ERROR(check_expert_parallel(spec.moe, mesh.shape().expert));
  ZE_ASSIGN_OR_RETURN(const PipelineStage stage, gpt_pipeline_stage(spec, mesh.coordinates().pipeline,
                                                                    mesh.shape().pipeline, layout.partition,
                                                                    layout.layers_per_virtual_stage));
  auto model = std::make_unique<Gpt>(spec, &mesh.tensor(), layout.sequence_parallel, stage, &mesh.expert());
  if (layout.tp_overlap_comm) {
    for (Module* m : model->modules()) {
      if (auto* column = dynamic_cast<ColumnParallelLinear*>(m)) column->set_overlap_comm(true);
    }
  }
  return model;
}

}  // namespace zero
