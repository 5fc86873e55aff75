// The safetensors format (an 8-byte little-endian header length, a JSON
// header naming each tensor's dtype, shape and byte range, then the data):
// writing a checkpoint's fp32 master weights as safetensors files, shared by
// the exports — ours, one file (below), Hugging Face's model directory
// (hf_weights.h; LoRA adapters merged into their weights) and PEFT's adapter
// directory (peft_export.h).
//
// Our single-file export uses GPT-2's conventional tensor names without a
// prefix ("wte.weight", "h.0.attn.c_attn.weight", ...) and GPT-2's layout:
// the four Conv1D weights of each block (attn.c_attn, attn.c_proj, mlp.c_fc,
// mlp.c_proj) are stored [in, out], transposed from our Linear's [out, in];
// the header's __metadata__ records it ("layout": "gpt2-conv1d"). Reading
// any safetensors file (ours or Hugging Face's) is hf_weights.h's.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/dtype.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/config/hf_config.h"  // is_gpt2_conv1d_weight
#include "runtime/engine/engine.h"

namespace zero {

// Writes the fp32 master weights of checkpoint <dir>/<tag> (tag empty:
// latest) as a safetensors file in `dtype` (fp32 or bf16), one tensor at a
// time (memory: the largest tensor), atomically. Segment checksums are
// verified on the way.
absl::Status consolidate_to_safetensors(const std::string& dir, const std::string& tag, const std::string& out,
                                        DType dtype);

// Sets the engine's weights from a safetensors file or a Hugging Face model
// directory: load_hf_weights (hf_weights.h) with the config of the engine's
// model, which must be a Gpt. A collective.
absl::Status load_safetensors_weights(Engine& engine, const std::string& path);

// --- Shared by the exports. ---

// The checkpoint a consolidation reads: <dir>/<tag>, the tag resolved (empty:
// the newest complete checkpoint), its manifest read and checked.
struct CheckpointSource {
  std::string dir, tag;
  Manifest manifest;
  std::string tag_dir() const { return dir + "/" + tag; }
};
absl::StatusOr<CheckpointSource> open_checkpoint_source(const std::string& dir, const std::string& tag);

// The model checkpoint `src` describes: its manifest's "model" (a Hugging
// Face config.json) with the LoRA adapters its "adapter" (PEFT's
// adapter_config.json) describes, when it has one. Checked against the
// checkpoint's parameters: each of the model's, adapters included, there
// once with its shape, and no other (FAILED_PRECONDITION naming the first
// that is not). Without a "model": FAILED_PRECONDITION saying the export
// needs it (`needed_for`: "config.json", ...) and that --format safetensors
// does not.
absl::StatusOr<GptConfig> checkpoint_model_config(const CheckpointSource& src, const std::string& needed_for);

// A LoRA adapter merged into its base weight on the way out, as PEFT's
// merge_and_unload does it, in fp32: W + scaling * (B @ A), with A
// [rank, cols] and B [rows, rank] the checkpoint parameters lora_a and lora_b
// (W [rows, cols], ours, before any transpose).
struct LoraMerge {
  std::string lora_a, lora_b;
  int64_t rank = 0;
  float scaling = 0.0f;
};

// One tensor of a file being written: the master weights of checkpoint
// parameter `param` (shape [rows, cols] or any), stored under `name`,
// transposed to [cols, rows] when `transposed`, with an adapter merged into
// it first when `merge` is set (2-D parameters only). A part of a fused
// parameter (Hugging Face's k_proj of our qkv_proj: graph/gpt.h's
// fused_parts) is rows [first_row, first_row + shape[0]) of the parameter of
// param_shape.
struct ExportedTensor {
  std::string name;
  std::string param;
  Shape shape;  // the parameter's, or the part's
  bool transposed = false;
  std::optional<LoraMerge> merge = std::nullopt;
  Shape param_shape = {};  // a part's parameter's; empty: shape
  int64_t first_row = 0;
};

// fp32 or bf16; INVALID_ARGUMENT naming the flag otherwise.
absl::Status check_export_dtype(DType dtype);
// The bytes a tensor's data takes in `dtype`.
int64_t exported_bytes(const ExportedTensor& t, DType dtype);

// Writes `tensors` of the checkpoint as the safetensors file `out` in
// `dtype`, one tensor in memory at a time (with a merged adapter's small A
// and B), the header's __metadata__ being `metadata` (an object of
// strings); atomically (out.tmp, fsync, rename).
// `files`: the checkpoint's shards (opened once for several outputs).
absl::Status write_checkpoint_safetensors(const CheckpointSource& src, ShardFiles& files,
                                          const std::vector<ExportedTensor>& tensors, const Json& metadata,
                                          DType dtype, const std::string& out);

}  // namespace zero
