// Building a built-in model for a mesh; see build_model.h.
#include "graph/build_model.h"

#include "core/status.h"

namespace zero {

absl::StatusOr<std::unique_ptr<Gpt>> build_model(const GptConfig& spec, DeviceMesh& mesh, const ModelLayout& layout) {
  ZE_RETURN_IF_ERROR(check_gpt_split(spec, mesh.shape().tensor, layout.sequence_parallel));
  ZE_ASSIGN_OR_RETURN(const PipelineStage stage, gpt_pipeline_stage(spec, mesh.coordinates().pipeline,
                                                                    mesh.shape().pipeline, layout.partition));
  return std::make_unique<Gpt>(spec, &mesh.tensor(), layout.sequence_parallel, stage);
}

}  // namespace zero
