// Saving and loading an engine's complete training state, sharded across
// ranks, loadable at any world size and ZeRO stage (see manifest.h for the
// format). Both are collectives: every rank calls them, in the same order.
//
// Save is atomic. Each rank writes its shard into <dir>/.<tag>.partial/
// (temporary name, fsync, rename); once every rank has succeeded, rank 0
// writes the manifest, renames the directory to <dir>/<tag> and only then
// points <dir>/latest at it. A crash or a full disk at any moment leaves the
// previous checkpoint complete and `latest` pointing to it.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/checkpoint/manifest.h"
#include "runtime/engine/engine.h"

namespace zero {

struct SaveOptions {
  std::string dir;
  std::string tag;  // empty: "global_step<N>"
  int keep = 0;     // keep the newest `keep` tags (0: all)
  // The model as a Hugging Face config.json (hf_config_json), stored in the
  // manifest for `zero-ckpt consolidate --format hf`; null: not recorded.
  Json model = nullptr;
};

// Returns the tag written.
absl::StatusOr<std::string> save_checkpoint(Engine& engine, const SaveOptions& options);

// Loads <dir>/<tag> (tag empty: resume_point(dir)'s) into a freshly
// initialised engine with the same model, at any world size and stage.
// Errors name the file and the tensor; after an error the engine's state is
// undefined and the run should stop.
absl::Status load_checkpoint(Engine& engine, const std::string& dir, const std::string& tag = "");

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
absl::StatusOr<Manifest> read_manifest(const std::string& dir, const std::string& tag);
// Complete checkpoints in dir (those with a manifest), oldest first by step.
absl::StatusOr<std::vector<std::string>> list_checkpoints(const std::string& dir);

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
