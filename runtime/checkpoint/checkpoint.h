// Saving and loading an engine's complete training state, sharded across
// ranks, loadable at any world size and ZeRO stage (see manifest.h for the
// format). Both are collectives: every rank calls them, in the same order.
//
// Save is atomic. Each rank writes its shard into <dir>/.<tag>.partial/
// (temporary name, fsync, rename); once every rank has succeeded, rank 0
// writes the manifest, renames the directory to <dir>/<tag> and only then
// points <dir>/latest at it. A crash or a full disk at any moment leaves the
// previous checkpoint complete and `latest` pointing to it.
//
// With node-local storage (SaveOptions::node_local, LoadOptions::node_local:
// checkpoint.use_node_local_storage; node_local.h) <dir> is a different disk
// on each host: the first rank of each host does rank 0's part there, on the
// same rules, and a load copies the shards a host lacks from the others.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/checkpoint/manifest.h"
#include "runtime/config/run_config.h"
#include "runtime/engine/engine.h"

namespace zero {

// One of the model's own files (a tokenizer's, a chat template,
// generation_config.json: hf_model_files.h), whole.
struct ModelFile {
  std::string name;      // a plain file name ("tokenizer.json")
  std::string contents;  // its bytes
};

struct SaveOptions {
  std::string dir;
  std::string tag;  // empty: "global_step<N>"
  int keep = 0;     // keep the newest `keep` tags (0: all)
  // The model as a Hugging Face config.json (hf_config_json), stored in the
  // manifest for `zero-ckpt consolidate --format hf` and for a resumed run;
  // null: not recorded.
  Json model = nullptr;
  // The model's LoRA adapters as PEFT's adapter_config.json, stored in the
  // manifest for `zero-ckpt consolidate --format peft` (and the merged hf
  // export); null: the model has none.
  Json adapter = nullptr;
  // Written by rank 0 into the tag directory and listed in the manifest
  // (size, CRC-32C), so the checkpoint carries them when their source is
  // gone; the Hugging Face export copies them out.
  std::vector<ModelFile> model_files = {};
  // checkpoint.use_node_local_storage: <dir> is each host's own disk. Each
  // host's first rank writes the manifest, rank 0's model and model files
  // and `latest` into its host's <dir>; the manifest names each shard's host.
  bool node_local = false;
};

// Returns the tag written.
absl::StatusOr<std::string> save_checkpoint(Engine& engine, const SaveOptions& options);

// Loads <dir>/<tag> (tag empty: resume_point(dir)'s) into a freshly
// initialised engine with the same model, at any world size and stage.
// Errors name the file and the tensor; after an error the engine's state is
// undefined and the run should stop.
struct LoadOptions {
  // checkpoint.use_node_local_storage: <dir> is each host's own disk. The
  // ranks load rank 0's tag (tag empty: rank 0's resume_point); a host
  // without it gets rank 0's manifest and model files; every shard a rank
  // needs that its host lacks is copied from a host that has it (rank 0
  // prints one line per source host to `log`). A shard no host of the run
  // has is an error naming it and its host, before any state changes.
  bool node_local = false;
  std::ostream* log = nullptr;  // rank 0's copy report; nullptr: stdout
};
absl::Status load_checkpoint(Engine& engine, const std::string& dir, const std::string& tag = "",
                             const LoadOptions& options = {});

// The tag <dir>/latest names (checked to have a manifest).
absl::StatusOr<std::string> latest_tag(const std::string& dir);
// The checkpoint to resume from: the newest complete one (a tag directory
// with a valid manifest; newest by global step). That is what `latest`
// names, unless `latest` is missing, empty or stale (a save killed after
// publishing its directory but before rewriting `latest`), or names a tag
// that is gone: then the newest complete checkpoint, and `note` says why it
// is not `latest`'s. NOT_FOUND when dir holds no checkpoint; DATA_LOSS,
// naming each, when it holds only damaged ones.
struct ResumePoint {
  std::string tag;
  std::string note;  // empty when `latest` named it
};
absl::StatusOr<ResumePoint> resume_point(const std::string& dir);

// The checkpoint a run resumes: `resume` is a checkpoint directory (its
// resume_point; NOT_FOUND when it holds none) or "auto": `save_dir`'s
// resume_point, nullopt when save_dir is absent or holds none (a fresh
// start, never past a damaged checkpoint: DATA_LOSS then). Empty `resume`:
// nullopt.
struct ResumeTarget {
  std::string dir;
  ResumePoint point;
  std::string name() const { return dir + "/" + point.tag; }
};
absl::StatusOr<std::optional<ResumeTarget>> find_resume_target(const std::string& resume, const std::string& save_dir);
// find_resume_target as rank 0 of `comm` sees it, on every rank (a
// collective): with node-local storage a host may lack the checkpoint, and
// every rank must resume the same one (or none).
absl::StatusOr<std::optional<ResumeTarget>> agree_resume_target(Communicator& comm, const std::string& resume,
                                                                const std::string& save_dir);

// ConfigOptions::resumed_model (runtime/config/run_config.h): the model the
// checkpoint find_resume_target finds describes; nullopt where it finds
// none, or one that does not read (restoring says why).
absl::StatusOr<std::optional<CheckpointModel>> resumed_checkpoint_model(const RunSection& run);
absl::StatusOr<Manifest> read_manifest(const std::string& dir, const std::string& tag);
// Complete checkpoints in dir (those with a manifest), oldest first by step.
absl::StatusOr<std::vector<std::string>> list_checkpoints(const std::string& dir);
// The model files checkpoint <dir>/<tag> (manifest `m`) holds, read whole
// and checked against the manifest's size and CRC-32C (DATA_LOSS naming the
// file otherwise).
absl::StatusOr<std::vector<ModelFile>> read_model_files(const std::string& dir, const std::string& tag,
                                                        const Manifest& m);

// Reads and checks one whole segment (CRC-32C), streaming through `chunk`
// bytes of host memory at a time; calls sink(data, first_element, count) for
// each piece of a chunk that is contiguous in the tensor (a strided
// segment's runs). Shared by the loader and the consolidation tool.
class FileReader;
absl::Status read_segment(const FileReader& file, const CheckpointSegment& seg, const std::string& tensor,
                          const std::function<absl::Status(const float*, int64_t, int64_t)>& sink,
                          size_t chunk_bytes = 8u << 20);

// The shard files of one checkpoint tag, opened on first use and checked
// then: present, as long as the manifest says, and a header naming this tag,
// its rank and world size. Shared by the loader, `zero-ckpt inspect` and
// consolidation, so none of them reads a shard the others would refuse.
class ShardFiles {
 public:
  ShardFiles(const Manifest& m, std::string tag_dir);
  ~ShardFiles();
  absl::StatusOr<const FileReader*> get(int index);

 private:
  const Manifest& m_;
  std::string dir_;
  std::map<int, std::unique_ptr<FileReader>> open_;
};

}  // namespace zero
