// PEFT adapter directories from checkpoints; see peft_export.h.
#include "runtime/checkpoint/peft_export.h"

#include <vector>

#include "core/status.h"
#include "core/strings.h"
#include "graph/lora.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/file_io.h"
#include "runtime/checkpoint/hf_model_files.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/config/hf_config.h"
#include "runtime/config/peft_config.h"

namespace zero {

absl::Status consolidate_to_peft(const std::string& dir, const std::string& tag, const std::string& out_dir,
                                 DType dtype) {
  ZE_RETURN_IF_ERROR(check_export_dtype(dtype));
  ZE_ASSIGN_OR_RETURN(const CheckpointSource src, open_checkpoint_source(dir, tag));
  const Manifest& m = src.manifest;
  if (m.adapter.is_null()) {
    return absl::FailedPreconditionError(cat(
        "checkpoint ", src.tag_dir(), " has no LoRA adapters (its manifest has no \"adapter\": the run was "
        "trained without model.lora); --format peft writes adapters only. Export the whole model with --format hf "
        "or --format safetensors"));
  }
  ZE_ASSIGN_OR_RETURN(const GptConfig config,
                      checkpoint_model_config(src, "a PEFT export needs it for the adapters' names"));
  // Checked before anything is written.
  ZE_ASSIGN_OR_RETURN(const std::vector<ModelFile> model_files, read_model_files(src.dir, src.tag, m));

  std::vector<ExportedTensor> tensors;
  for (const auto& [name, shape] : m.parameters) {
    if (!is_lora_parameter(name)) continue;
    tensors.push_back({cat(kPeftTensorPrefix, hf_tensor_name(config, name)), name, shape, /*transposed=*/false});
  }
  if (tensors.empty()) {
    return absl::FailedPreconditionError(cat("checkpoint ", src.tag_dir(), ": its \"adapter\" (target_modules ",
                                             m.adapter.value("target_modules", Json()).dump(),
                                             ") adapts no layer of the model; there is no adapter to export"));
  }

  return write_directory_atomic(out_dir, "a PEFT adapter directory", [&](const std::string& partial) -> absl::Status {
    ShardFiles files(m, src.tag_dir());
    const Json metadata = {{"format", "pt"}};
    ZE_RETURN_IF_ERROR(
        write_checkpoint_safetensors(src, files, tensors, metadata, dtype, cat(partial, "/", kPeftAdapterFile)));
    ZE_RETURN_IF_ERROR(write_file_atomic(cat(partial, "/", kPeftConfigFile), m.adapter.dump(2) + "\n"));
    for (const ModelFile& f : model_files) {
      if (f.name == kGenerationConfigFile) continue;  // the base model's
      ZE_RETURN_IF_ERROR(write_file_atomic(cat(partial, "/", f.name), f.contents));
    }
    return absl::OkStatus();
  });
}

}  // namespace zero
