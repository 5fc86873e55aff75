// Hugging Face model directories: reading one into an engine, and writing a
// checkpoint as one.
//
// A directory holds config.json and the weights as safetensors files: one
// model.safetensors, or shards model-0000k-of-0000n.safetensors named by
// model.safetensors.index.json ({"metadata": {"total_size": N},
// "weight_map": {tensor: file}}). Tensor names and layouts are hf_config.h's.
// Reading also takes a single safetensors file, with Hugging Face's names or
// ours (GPT-2's hub files and our own single-file exports store names
// without the "transformer." prefix; both store GPT-2's Conv1D weights
// [in, out]).
//
// The reader checks every header before any data is read: header length,
// dtypes, shapes, byte ranges inside the file, of shape x dtype bytes and
// not overlapping another tensor's, and an index naming files that exist and
// tensors that are in them; errors name the file and the tensor(s). Every
// file (single, index, shard) must be a regular file: a named pipe is
// refused at once rather than blocking the open. Loading reads only the bytes of the elements a
// rank holds, at most max_read_bytes at a time.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "graph/gpt.h"
#include "runtime/config/json_file.h"
#include "runtime/config/peft_config.h"
#include "runtime/engine/engine.h"

namespace zero {

class FileReader;

// One tensor of a safetensors file, as its header describes it.
struct HfTensor {
  std::string name;     // as stored
  int file = 0;         // index into HfWeights::files()
  std::string dtype;    // the header's: "F32", "BF16", "F16", ... (only the first three load)
  Shape shape;          // as stored
  int64_t offset = 0;   // byte offset of the data in the file
  int64_t bytes = 0;
};

class HfWeights {
 public:
  // `path`: a Hugging Face model directory or one safetensors file.
  static absl::StatusOr<HfWeights> open(const std::string& path);
  HfWeights(HfWeights&&) noexcept;
  HfWeights& operator=(HfWeights&&) noexcept;
  ~HfWeights();

  const std::string& path() const { return path_; }
  const std::vector<std::string>& files() const { return files_; }  // full paths
  const std::map<std::string, HfTensor>& tensors() const { return tensors_; }
  // The header's "__metadata__" of file i (an object; empty when absent).
  const Json& metadata(int file) const { return metadata_.at(static_cast<size_t>(file)); }

  // Elements [first, first + count) of `t` (row-major, as stored) converted
  // to fp32 into out, reading at most max_read_bytes at a time.
  absl::Status read(const HfTensor& t, int64_t first, int64_t count, float* out,
                    int64_t max_read_bytes = 64 << 20) const;

 private:
  HfWeights() = default;
  absl::Status add_file(const std::string& file);
  std::string path_;
  std::vector<std::string> files_;
  std::vector<std::unique_ptr<FileReader>> readers_;
  std::vector<Json> metadata_;
  std::map<std::string, HfTensor> tensors_;
};

inline constexpr int64_t kHfReadChunkBytes = 64 << 20;

// Sets the engine's weights (fp32 master, then the model-dtype parameters)
// from `path` (HfWeights::open's) for a model of `config`. Every tensor of
// the model must be there with its shape; a tensor in the files that is not
// part of the model is refused (except GPT-2's attention-mask buffers
// attn.bias / attn.masked_bias and an lm_head.weight in a tied model). Each
// rank reads only the elements it holds (state.held_ranges(), and the frozen
// parameters' frozen_held_ranges() into their weights), at most
// max_read_bytes at a time (GPT-2's transposed Conv1D weights: the whole
// tensor). A collective (every rank calls it); a failure on any rank fails
// every rank.
// A model with LoRA adapters (config.lora) loads its base weights so: the
// adapters are not in the files and keep their initial values.
absl::Status load_hf_weights(Engine& engine, const GptConfig& config, const std::string& path,
                             int64_t max_read_bytes = kHfReadChunkBytes);

// Sets the engine's LoRA adapters (config.lora's) from the PEFT adapter
// directory `dir`: its kPeftAdapterFile (adapter_model.safetensors), tensors named
// "base_model.model.<Hugging Face module>.lora_A.weight" / "lora_B.weight",
// every adapter of the model there with its shape and nothing else (as
// load_hf_weights checks; the caller has checked adapter_config.json against
// config.lora: runtime/config/peft_config.h). The base weights are left as
// they are. A collective.
absl::Status load_peft_adapter(Engine& engine, const GptConfig& config, const std::string& dir,
                               int64_t max_read_bytes = kHfReadChunkBytes);

// Writes checkpoint <dir>/<tag> (tag empty: the newest complete one) as a
// Hugging Face model directory `out_dir` in `dtype` (fp32 or bf16):
// config.json from the model description the checkpoint's manifest holds
// (SaveOptions::model, with the keys of the config.json it came from:
// hf_config_json's; FAILED_PRECONDITION without one), the tokenizer and
// generation files the checkpoint carries (hf_model_files.h; checked
// against the manifest first) and generation_config.json from config.json's
// token ids where none came; and the master
// weights under Hugging Face's names and layout in one model.safetensors, or
// in shards of at most max_shard_bytes each (a larger tensor alone in its
// shard) with model.safetensors.index.json. One tensor in memory at a time.
// A checkpoint with LoRA adapters (its manifest's "adapter") is written
// merged, as PEFT's merge_and_unload gives it: each adapted weight
// W + scaling * (B @ A) in fp32, the adapters themselves not written (their
// own export: peft_export.h). The checkpoint's parameters must be the
// described model's (checkpoint_model_config, safetensors.h).
// Atomic (write_directory_atomic, file_io.h): refused when out_dir exists
// and is not empty (it is left as it was).
absl::Status consolidate_to_hf(const std::string& dir, const std::string& tag, const std::string& out_dir,
                               DType dtype, int64_t max_shard_bytes);

}  // namespace zero
