// Loading a sharded checkpoint at any world size and stage; see checkpoint.h.
// With node-local storage the copying of the shards a host lacks comes first
// (node_local.cc).
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <set>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/status.h"
#include "core/strings.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/crc32c.h"
#include "runtime/checkpoint/file_io.h"
#include "runtime/checkpoint/node_local.h"
#include "zero/state_buffers.h"

namespace zero {

absl::StatusOr<Manifest> read_manifest(const std::string& dir, const std::string& tag) {
  const std::string path = dir + "/" + tag + "/manifest.json";
  ZE_ASSIGN_OR_RETURN(std::string text, read_file(path));
  ZE_ASSIGN_OR_RETURN(Json j, parse_json_text(text, path));
  return Manifest::parse(j, path);
}

absl::StatusOr<std::string> latest_tag(const std::string& dir) {
  absl::StatusOr<std::string> text = read_file(dir + "/latest");
  if (!text.ok()) {
    return absl::NotFoundError(cat("no checkpoint in ", dir, " (no \"latest\" file: ", text.status().message(), ")"));
  }
  std::string tag = *text;
  while (!tag.empty() && (tag.back() == '\n' || tag.back() == ' ' || tag.back() == '\r')) tag.pop_back();
  if (!std::filesystem::exists(dir + "/" + tag + "/manifest.json")) {
    return absl::NotFoundError(cat(dir, "/latest names \"", tag, "\", which has no manifest.json"));
  }
  return tag;
}

namespace {

// The tag directories of `dir` that hold a manifest: those that read
// (complete, oldest first by step) and those that do not, with why.
struct CheckpointScan {
  std::vector<std::string> complete;
  std::string damaged;  // "tag (reason); ..." in name order
};

absl::StatusOr<CheckpointScan> scan_checkpoints(const std::string& dir) {
  ZE_ASSIGN_OR_RETURN(std::vector<std::string> names, list_directory(dir));
  std::sort(names.begin(), names.end());
  std::vector<std::pair<int64_t, std::string>> found;
  CheckpointScan scan;
  for (const std::string& n : names) {
    if (n.empty() || n[0] == '.' || !std::filesystem::exists(dir + "/" + n + "/manifest.json")) continue;
    absl::StatusOr<Manifest> m = read_manifest(dir, n);
    if (m.ok()) {
      found.emplace_back(m->progress.global_step, n);
    } else {
      scan.damaged += cat(scan.damaged.empty() ? "" : "; ", n, " (", m.status().message(), ")");
    }
  }
  std::sort(found.begin(), found.end());
  for (auto& [step, n] : found) scan.complete.push_back(n);
  return scan;
}

}  // namespace

absl::StatusOr<ResumePoint> resume_point(const std::string& dir) {
  ZE_ASSIGN_OR_RETURN(CheckpointScan scan, scan_checkpoints(dir));
  const std::vector<std::string>& complete = scan.complete;
  const absl::StatusOr<std::string> latest = latest_tag(dir);
  if (complete.empty()) {
    // Tag directories whose manifests none reads, and no latest: a damaged
    // directory, not an empty one ("auto" must not start fresh and then
    // collide with their names at the first save).
    if (!latest.ok() && !scan.damaged.empty()) {
      return absl::DataLossError(cat(dir, " holds checkpoints but none is readable and there is no latest file: ",
                                     scan.damaged, ". Restore one, or move them away to start fresh"));
    }
    if (!latest.ok()) return latest.status();
    return absl::DataLossError(cat(dir, "/latest names \"", *latest, "\", whose manifest cannot be read: ",
                                   read_manifest(dir, *latest).status().message()));
  }
  const std::string& newest = complete.back();
  if (latest.ok() && *latest == newest) return ResumePoint{newest, ""};
  if (latest.ok() && std::find(complete.begin(), complete.end(), *latest) == complete.end()) {
    return ResumePoint{newest, cat(dir, "/latest names ", *latest, ", whose manifest cannot be read (",
                                   read_manifest(dir, *latest).status().message(),
                                   "); resuming from the newest complete checkpoint, ", newest)};
  }
  if (latest.ok()) {
    return ResumePoint{newest, cat(dir, "/latest names ", *latest, ", but ", newest,
                                   " is newer and complete (a save was interrupted before it updated latest); "
                                   "resuming from ", newest)};
  }
  return ResumePoint{newest, cat(latest.status().message(), "; resuming from the newest complete checkpoint, ",
                                 newest)};
}

absl::StatusOr<std::vector<std::string>> list_checkpoints(const std::string& dir) {
  ZE_ASSIGN_OR_RETURN(CheckpointScan scan, scan_checkpoints(dir));
  return std::move(scan.complete);
}

absl::StatusOr<std::optional<ResumeTarget>> find_resume_target(const std::string& resume, const std::string& save_dir) {
  if (resume.empty()) return std::nullopt;
  const bool automatic = resume == "auto";
  const std::string dir = automatic ? save_dir : resume;
  if (automatic && !std::filesystem::exists(dir)) return std::nullopt;
  absl::StatusOr<ResumePoint> point = resume_point(dir);
  if (automatic && absl::IsNotFound(point.status())) return std::nullopt;
  if (!point.ok()) return point.status();
  return ResumeTarget{dir, *std::move(point)};
}

absl::StatusOr<std::optional<ResumeTarget>> agree_resume_target(Communicator& comm, const std::string& resume,
                                                                const std::string& save_dir) {
  absl::StatusOr<std::optional<ResumeTarget>> mine = std::nullopt;
  if (comm.rank() == 0) mine = find_resume_target(resume, save_dir);
  ZE_RETURN_IF_ERROR(broadcast_status(comm, mine.status(), 0));
  // "has dir\ntag\nnote" (dir and tag hold no newline: they are paths).
  std::string text;
  if (comm.rank() == 0 && mine->has_value()) {
    text = cat("1", (*mine)->dir, "\n", (*mine)->point.tag, "\n", (*mine)->point.note);
  }
  ZE_RETURN_IF_ERROR(broadcast_bytes(comm, text, 0));
  if (text.empty()) return std::optional<ResumeTarget>();
  const size_t a = text.find('\n'), b = text.find('\n', a + 1);
  return std::optional<ResumeTarget>(
      ResumeTarget{text.substr(1, a - 1), ResumePoint{text.substr(a + 1, b - a - 1), text.substr(b + 1)}});
}

absl::StatusOr<std::optional<CheckpointModel>> resumed_checkpoint_model(const RunSection& run) {
  const absl::StatusOr<std::optional<ResumeTarget>> target = find_resume_target(run.resume, run.save_dir);
  if (!target.ok() || !target->has_value()) return std::nullopt;
  const absl::StatusOr<Manifest> m = read_manifest((*target)->dir, (*target)->point.tag);
  if (!m.ok()) return std::nullopt;
  return CheckpointModel{(*target)->name(), m->model};
}

absl::StatusOr<std::vector<ModelFile>> read_model_files(const std::string& dir, const std::string& tag,
                                                        const Manifest& m) {
  std::vector<ModelFile> out;
  for (const CheckpointModelFile& f : m.model_files) {
    const std::string path = dir + "/" + tag + "/" + f.name;
    ZE_ASSIGN_OR_RETURN(std::string contents, read_file(path));
    const uint32_t crc = crc32c(contents.data(), contents.size());
    if (static_cast<int64_t>(contents.size()) != f.bytes || crc != f.crc32c) {
      return absl::DataLossError(absl::StrFormat(
          "checkpoint %s/%s: model file %s has %d bytes of CRC-32C %08x, its manifest says %d bytes of %08x (the "
          "file was changed or damaged after the save)",
          dir, tag, f.name, contents.size(), crc, f.bytes, f.crc32c));
    }
    out.push_back({f.name, std::move(contents)});
  }
  return out;
}

absl::Status read_segment(const FileReader& file, const CheckpointSegment& seg, const std::string& tensor,
                          const std::function<absl::Status(const float*, int64_t, int64_t)>& sink,
                          size_t chunk_bytes) {
  const int64_t count = seg.end - seg.begin;
  if (seg.offset + count * 4 > file.size()) {
    return absl::DataLossError(cat("checkpoint shard ", file.path(), ": tensor ", tensor, " elements [", seg.begin,
                                   ", ", seg.end, ") should end at byte ", seg.offset + count * 4, " but the file has ",
                                   file.size(), " bytes (truncated)"));
  }
  const int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>(chunk_bytes / 4));
  std::vector<float> buf(static_cast<size_t>(std::min(chunk, count)));
  uint32_t crc = 0;
  for (int64_t e = 0; e < count; e += chunk) {
    const int64_t n = std::min(chunk, count - e);
    ZE_RETURN_IF_ERROR(file.read_at(seg.offset + e * 4, buf.data(), static_cast<size_t>(n) * 4));
    crc = crc32c(buf.data(), static_cast<size_t>(n) * 4, crc);
    absl::Status s;
    seg.for_each_run(e, n, [&](int64_t k, int64_t element, int64_t count) {
      if (s.ok()) s = sink(buf.data() + (k - e), element, count);
    });
    ZE_RETURN_IF_ERROR(s);
  }
  if (crc != seg.crc32c) {
    return absl::DataLossError(absl::StrFormat(
        "checkpoint shard %s: tensor %s elements [%d, %d) fail their checksum (CRC-32C %08x, expected %08x): the file "
        "is corrupted",
        file.path(), tensor, seg.begin, seg.end, crc, seg.crc32c));
  }
  return absl::OkStatus();
}

namespace {

// The live model against the checkpoint's: same parameters, names and
// shapes. `part`: this rank holds part of the model (a pipeline stage, or
// its share of the experts); the checkpoint's other tensors are the other
// ranks'.
absl::Status check_model(const Manifest& m, Module& model, const std::string& where, bool part) {
  std::vector<Parameter*> params = model.parameters();
  std::map<std::string, Shape> saved(m.parameters.begin(), m.parameters.end());
  for (Parameter* p : params) {
    auto it = saved.find(p->name());
    if (it == saved.end()) {
      return absl::FailedPreconditionError(cat("checkpoint ", where, " is from another model: it has no tensor ",
                                               p->name(), " (the model has ", params.size(), " parameters, the checkpoint ",
                                               m.parameters.size(), ")"));
    }
    if (it->second != p->global_shape()) {
      return absl::FailedPreconditionError(cat("checkpoint ", where, " is from another model: tensor ", p->name(),
                                               " has shape ", shape_string(it->second), " there and ",
                                               shape_string(p->global_shape()), " in the model"));
    }
  }
  if (saved.size() != params.size() && !part) {
    for (const auto& [name, shape] : m.parameters) {
      const bool known = std::any_of(params.begin(), params.end(), [&](Parameter* p) { return p->name() == name; });
      if (!known) {
        return absl::FailedPreconditionError(
            cat("checkpoint ", where, " is from another model: its tensor ", name, " is not in the model"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

ShardFiles::ShardFiles(const Manifest& m, std::string tag_dir) : m_(m), dir_(std::move(tag_dir)) {}
ShardFiles::~ShardFiles() = default;

absl::StatusOr<const FileReader*> ShardFiles::get(int index) {
  auto it = open_.find(index);
  if (it != open_.end()) return it->second.get();
  const CheckpointFile& f = m_.files.at(index);
  const std::string path = dir_ + "/" + f.name;
  absl::StatusOr<FileReader> r = FileReader::open(path);
  if (!r.ok() && absl::IsNotFound(r.status())) {
    return absl::NotFoundError(cat("checkpoint ", dir_, ": shard of rank ", f.rank, " is missing (", r.status().message(), ")",
                                   f.host.empty() ? std::string()
                                                  : cat("; it was saved on host ", f.host,
                                                        "'s own disk (checkpoint.use_node_local_storage): copy it here "
                                                        "from there, or resume with that host in the run")));
  }
  if (!r.ok()) return annotate(r.status(), cat("checkpoint ", dir_, ": shard of rank ", f.rank));
  if (r->size() != kShardHeaderBytes + f.bytes) {
    return absl::DataLossError(cat("checkpoint shard ", path, " has ", r->size(), " bytes, the manifest says ",
                                   kShardHeaderBytes + f.bytes, " (truncated or overwritten)"));
  }
  char header[kShardHeaderBytes];
  ZE_RETURN_IF_ERROR(r->read_at(0, header, sizeof(header)));
  ZE_RETURN_IF_ERROR(check_shard_header(header, path, f.rank, m_.world_size, m_.tag, f.bytes));
  auto owned = std::make_unique<FileReader>(std::move(r).value());
  const FileReader* raw = owned.get();
  open_.emplace(index, std::move(owned));
  return raw;
}

namespace {

absl::Status load_local(Engine& engine, const Manifest& m, const std::string& tag_dir) {
  ModelState& state = engine.state();
  ZE_RETURN_IF_ERROR(
      check_model(m, engine.model(), tag_dir, engine.mesh().shape().pipeline > 1 || engine.expert_state() != nullptr));
  OptimizerStateStore& store = state.state_store();
  const std::vector<std::string>& kinds = store.names();  // "master", then the optimizer's
  const std::vector<std::string> live_states(kinds.begin() + 1, kinds.end());
  if (live_states != m.optimizer_states) {
    return absl::FailedPreconditionError(cat("checkpoint ", tag_dir, " holds ", m.optimizer, " state (",
                                             m.optimizer_states.size(), " tensors per parameter); the configured ",
                                             state.optimizer_name(), " needs ", live_states.size()));
  }
  ShardFiles files(m, tag_dir);
  // A range this rank holds, as runs of the unsplit tensor (one run unless
  // the parameter is a tensor-parallel slice), sorted by where they sit in it.
  struct Run {
    int64_t local, element, count;
  };
  std::vector<Run> runs;
  // Range r of `kind` (array `index` of `into`) from the checkpoint's segments.
  auto load_range = [&](int index, const std::string& kind, const StateRange& r,
                        OptimizerStateStore& into) -> absl::Status {
    const std::string key = Manifest::key(kind, r.param->name());
    auto it = m.tensors.find(key);
    if (it == m.tensors.end()) {
      const bool was_frozen = std::find(m.frozen.begin(), m.frozen.end(), r.param->name()) != m.frozen.end();
      if (was_frozen) {
        return absl::FailedPreconditionError(cat(
            "checkpoint ", tag_dir, " has no ", kind, " state for ", r.param->name(), ": it was frozen in the run "
            "that saved it, and this run trains it. Freeze it here too to resume, or start from the checkpoint's "
            "weights alone (zero-ckpt consolidate, then --init-from) to train it with a fresh optimizer"));
      }
      return absl::DataLossError(cat("checkpoint ", tag_dir, " has no tensor ", key));
    }
    runs.clear();
    r.param->for_each_global_run(r.begin, r.end, [&](int64_t local, int64_t element, int64_t count) {
      runs.push_back({local, element, count});
    });
    if (runs.empty()) return absl::OkStatus();
    const int64_t lo = runs.front().element, hi = runs.back().element + runs.back().count;
    int64_t filled = 0;
    for (const CheckpointSegment& seg : it->second.segments) {
      if (seg.element(seg.count() - 1) < lo || seg.begin >= hi) continue;
      ZE_ASSIGN_OR_RETURN(const FileReader* f, files.get(seg.file));
      // The whole segment is read (to verify its checksum); the parts this
      // rank holds are copied into its buffer.
      ZE_RETURN_IF_ERROR(read_segment(*f, seg, key, [&](const float* data, int64_t first, int64_t n) {
        auto run = std::upper_bound(runs.begin(), runs.end(), first,
                                    [](int64_t e, const Run& x) { return e < x.element; });
        if (run != runs.begin()) --run;
        for (; run != runs.end() && run->element < first + n; ++run) {
          const int64_t a = std::max(first, run->element), b = std::min(first + n, run->element + run->count);
          if (a >= b) continue;
          filled += b - a;
          ZE_RETURN_IF_ERROR(into.write(index, r.offset + (run->local - r.begin) + (a - run->element),
                                        absl::MakeConstSpan(data + (a - first), b - a)));
        }
        return absl::OkStatus();
      }));
    }
    if (filled != r.end - r.begin) {
      return absl::DataLossError(cat("checkpoint ", tag_dir, ": tensor ", key, " holds ", filled, " of the ",
                                     r.end - r.begin, " elements this rank needs (overlapping or missing segments)"));
    }
    return absl::OkStatus();
  };
  // Each state its own ranges (under expert parallelism the experts' by
  // their global names, whichever ranks wrote them).
  for (ModelState* held : engine.states()) {
    OptimizerStateStore& into = held->state_store();
    for (int index = 0; index < static_cast<int>(kinds.size()); ++index) {
      for (const StateRange& r : held->held_ranges()) ZE_RETURN_IF_ERROR(load_range(index, kinds[index], r, into));
    }
    // A frozen parameter's weights from its "master" (a trained one's master
    // weights too: freezing what an earlier run trained), cast to the model
    // dtype; its optimizer state, if the checkpoint has any, stays unread.
    if (OptimizerStateStore* frozen = held->frozen_weights()) {
      for (const StateRange& r : held->frozen_held_ranges()) ZE_RETURN_IF_ERROR(load_range(0, kinds[0], r, *frozen));
    }
    ZE_RETURN_IF_ERROR(into.flush());
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status load_checkpoint(Engine& engine, const std::string& dir, const std::string& tag_in,
                             const LoadOptions& options) {
  Communicator& comm = engine.mesh().world();
  absl::StatusOr<std::string> tag = tag_in;
  if (tag_in.empty() && options.node_local) {
    // Rank 0's resume point: another host may hold fewer checkpoints. dir is
    // `resume` (its resume_point; NOT_FOUND when it holds none), and
    // save_dir too should it be literally "auto".
    ZE_ASSIGN_OR_RETURN(const std::optional<ResumeTarget> target, agree_resume_target(comm, dir, dir));
    if (!target) return absl::NotFoundError(cat("no checkpoint in ", dir));
    tag = target->point.tag;
  } else if (tag_in.empty()) {
    absl::StatusOr<ResumePoint> point = resume_point(dir);
    tag = point.ok() ? absl::StatusOr<std::string>(point->tag) : point.status();
  }
  if (options.node_local) {
    ZE_RETURN_IF_ERROR(gather_node_local(engine, dir, *tag, options.log != nullptr ? *options.log : std::cout));
  }
  absl::Status local = tag.status();
  absl::StatusOr<Manifest> m = absl::UnknownError("not read");
  if (local.ok()) {
    m = read_manifest(dir, *tag);
    local = m.status();
  }
  if (local.ok()) local = load_local(engine, *m, dir + "/" + *tag);
  // Every rank must agree before the collectives of refresh_parameters().
  ZE_ASSIGN_OR_RETURN(double failed, comm.all_reduce_max(local.ok() ? 0.0 : 1.0));
  if (!local.ok()) return local;
  if (failed > 0) return absl::AbortedError(cat("loading checkpoint ", dir, ": another rank failed to read its part"));
  engine.restore(m->progress);
  for (ModelState* state : engine.states()) ZE_RETURN_IF_ERROR(state->refresh_parameters());
  return absl::OkStatus();
}

}  // namespace zero
