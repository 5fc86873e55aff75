// The checkpoint format.
//
//   <dir>/latest                      the tag of the newest complete checkpoint
//   <dir>/<tag>/manifest.json         everything below, written last by rank 0
//   <dir>/<tag>/rank_00000.shard ...  one file per rank that saved
//   <dir>/<tag>/tokenizer.json ...    the model's files (below), when it has any
//   <dir>/.<tag>.partial/             a save in progress (ignored, removed)
//
// A shard file is a 128-byte header (magic "ZEROSHRD", version, rank, world,
// payload bytes, tag, CRC-32C of the header) followed by raw little-endian
// fp32 segments. The manifest names every logical tensor — "master/<param>"
// (fp32 master weights) and "<state>/<param>" for each optimizer state — with
// its shape and the segments that hold it: which file, which element range of
// the tensor, the byte offset in the file, and the segment's CRC-32C. Loading
// at any world size or stage is reading, for each range a rank now owns, the
// segments that overlap it. Tensors are always the unsplit ones, whatever the
// tensor-parallel size of the run that saved them: a rank of a tensor group
// writes its slice's elements as segments of the unsplit tensor — contiguous,
// or strided (a row-parallel weight's columns: `run` elements every `stride`)
// — so a checkpoint loads at any tensor, data-parallel or ZeRO layout, and
// consolidates to the same file. Beside them a checkpoint may hold the model's
// own files (a Hugging Face directory's tokenizer files, chat template,
// generation_config.json: hf_model_files.h), each listed with its size and
// CRC-32C, copied whole. The model-dtype parameters are not stored: they
// are cast(master) by construction (the engine's invariant), and are rebuilt
// on load. A frozen parameter (requires_grad false) has no master and no
// optimizer state: its "master/<param>" holds its model-dtype weights (as
// fp32, exactly), and the manifest lists it under "frozen".
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "runtime/config/json_file.h"
#include "runtime/engine/engine.h"

namespace zero {

// Version 2 checksums the manifest itself ("crc32c": CRC-32C of the compact
// JSON without that field); version 3 adds strided segments (tensor-parallel
// slices). Versions 2 and 3 load; version 1 (no checksum) is refused.
inline constexpr int kCheckpointVersion = 3;
inline constexpr int kFirstChecksummedVersion = 2;
inline constexpr int kShardVersion = 1;  // the shard header's own version
inline constexpr char kShardMagic[8] = {'Z', 'E', 'R', 'O', 'S', 'H', 'R', 'D'};
inline constexpr int64_t kShardHeaderBytes = 128;

// end - begin elements of the tensor, stored one after another from byte
// `offset` of the file. Contiguous (run 0): elements [begin, end). Strided:
// the k-th element is element begin + (k / run) * stride + k % run.
struct CheckpointSegment {
  int file = 0;                // index into Manifest::files
  int64_t begin = 0, end = 0;  // first element; end - begin elements
  int64_t offset = 0;          // byte offset in the file
  uint32_t crc32c = 0;
  int64_t run = 0, stride = 0;

  int64_t count() const { return end - begin; }
  bool strided() const { return run > 0 && run < count(); }
  // The tensor element of the segment's k-th value.
  int64_t element(int64_t k) const { return strided() ? begin + k / run * stride + k % run : begin + k; }
  // Values [k, k + n) as runs contiguous in the tensor: fn(k0, element(k0), count).
  template <typename Fn>
  void for_each_run(int64_t k, int64_t n, Fn&& fn) const {
    for (const int64_t stop = k + n; k < stop;) {
      const int64_t piece = strided() ? std::min(stop, (k / run + 1) * run) : stop;
      fn(k, element(k), piece - k);
      k = piece;
    }
  }
};

struct CheckpointTensor {
  std::string param;  // parameter name
  std::string kind;   // "master" or an optimizer state ("exp_avg", ...)
  Shape shape;
  std::vector<CheckpointSegment> segments;  // sorted by begin; together every element once
};

struct CheckpointFile {
  std::string name;  // relative to the tag directory
  int rank = 0;
  int64_t bytes = 0;
  // The host that wrote it, with checkpoint.use_node_local_storage (each
  // host's shards on its own disk); empty otherwise and in older manifests.
  // Optional in the JSON, so neither the version nor older loaders change.
  std::string host;
};

// One of the model's files (hf_model_files.h) in the tag directory.
struct CheckpointModelFile {
  std::string name;  // a plain file name in the tag directory
  int64_t bytes = 0;
  uint32_t crc32c = 0;
};

struct Manifest {
  std::string tag;
  int world_size = 1;
  int zero_stage = 0;
  std::string model_dtype;
  std::string optimizer;                    // "AdamW", "Adam", "SGD", "Lion"
  std::vector<std::string> optimizer_states;
  EngineProgress progress;
  std::vector<std::pair<std::string, Shape>> parameters;  // the model, in order
  std::vector<CheckpointFile> files;
  std::map<std::string, CheckpointTensor> tensors;        // "<kind>/<param>"
  // The model as a Hugging Face config.json (runtime/config/hf_config.h),
  // when the saver recorded it; null otherwise (and in older checkpoints).
  // Inside the manifest's checksum like every other field.
  Json model;
  // The model's LoRA adapters as PEFT's adapter_config.json
  // (runtime/config/peft_config.h), when it has them; null otherwise.
  Json adapter;
  // The model's files saved beside the shards (none in older checkpoints).
  std::vector<CheckpointModelFile> model_files;
  // Parameters the run kept frozen (in `parameters` order): "master/<name>"
  // only, no optimizer state. Absent from the JSON when empty.
  std::vector<std::string> frozen;

  static std::string key(const std::string& kind, const std::string& param) { return kind + "/" + param; }
  int64_t payload_bytes() const;
  // With its "crc32c" field last.
  Json to_json() const;
  // Validates every field; errors name the manifest path and the field.
  static absl::StatusOr<Manifest> parse(const Json& j, const std::string& path);
};

// The 128-byte shard header for (rank, world, tag, payload bytes).
std::string encode_shard_header(int rank, int world, const std::string& tag, int64_t payload_bytes);
// Checks a header read from `path` against what the manifest says.
absl::Status check_shard_header(const char* header, const std::string& path, int rank, int world,
                                const std::string& tag, int64_t payload_bytes);

}  // namespace zero
