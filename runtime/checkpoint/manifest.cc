// Checkpoint manifest and shard header; see manifest.h.
#include "runtime/checkpoint/manifest.h"

#include <cstring>

#include "core/status.h"
#include "core/strings.h"
#include "runtime/checkpoint/crc32c.h"

namespace zero {

int64_t Manifest::payload_bytes() const {
  int64_t n = 0;
  for (const CheckpointFile& f : files) n += f.bytes;
  return n;
}

namespace {

// CRC-32C of the manifest's compact JSON without its "crc32c" field: every
// field is covered, so an edited global_step is caught like a flipped bit.
uint32_t manifest_crc(Json j) {
  j.erase("crc32c");
  const std::string text = j.dump();
  return crc32c(text.data(), text.size());
}

}  // namespace

Json Manifest::to_json() const {
  Json j;
  j["format"] = "zeroengine-checkpoint";
  j["version"] = kCheckpointVersion;
  j["tag"] = tag;
  j["world_size"] = world_size;
  j["zero_stage"] = zero_stage;
  j["model_dtype"] = model_dtype;
  j["optimizer"] = {{"type", optimizer}, {"states", optimizer_states}};
  j["progress"] = {{"global_step", progress.global_step},
                   {"skipped_steps", progress.skipped_steps},
                   {"micro_step", progress.micro_step},
                   {"scheduler_last_batch_iteration", progress.scheduler_iteration},
                   {"loss_scaler",
                    {{"scale", progress.loss_scaler.scale},
                     {"iter", progress.loss_scaler.iter},
                     {"last_overflow_iter", progress.loss_scaler.last_overflow_iter},
                     {"hysteresis", progress.loss_scaler.hysteresis}}}};
  Json params = Json::array();
  for (const auto& [name, shape] : parameters) params.push_back({{"name", name}, {"shape", std::vector<int64_t>(shape.begin(), shape.end())}});
  j["parameters"] = params;
  Json files_j = Json::array();
  for (const CheckpointFile& f : files) {
    Json e = {{"name", f.name}, {"rank", f.rank}, {"bytes", f.bytes}};
    if (!f.host.empty()) e["host"] = f.host;
    files_j.push_back(e);
  }
  j["files"] = files_j;
  Json tensors_j = Json::object();
  for (const auto& [name, t] : tensors) {
    Json segs = Json::array();
    for (const CheckpointSegment& s : t.segments) {
      Json seg = {{"file", s.file}, {"begin", s.begin}, {"end", s.end}, {"offset", s.offset}, {"crc32c", s.crc32c}};
      if (s.strided()) {
        seg["run"] = s.run;
        seg["stride"] = s.stride;
      }
      segs.push_back(std::move(seg));
    }
    tensors_j[name] = {{"param", t.param},
                       {"kind", t.kind},
                       {"dtype", "fp32"},
                       {"shape", std::vector<int64_t>(t.shape.begin(), t.shape.end())},
                       {"segments", segs}};
  }
  j["tensors"] = tensors_j;
  if (!model.is_null()) j["model"] = model;
  if (!adapter.is_null()) j["adapter"] = adapter;
  if (!model_files.empty()) {
    Json list = Json::array();
    for (const CheckpointModelFile& f : model_files) {
      list.push_back({{"name", f.name}, {"bytes", f.bytes}, {"crc32c", f.crc32c}});
    }
    j["model_files"] = list;
  }
  if (!frozen.empty()) j["frozen"] = frozen;
  j["crc32c"] = manifest_crc(j);
  return j;
}

absl::StatusOr<Manifest> Manifest::parse(const Json& j, const std::string& path) {
  auto bad = [&](std::string_view what) {
    return absl::DataLossError(cat("checkpoint manifest ", path, ": ", what));
  };
  try {
    if (j.value("format", "") != "zeroengine-checkpoint") return bad("not a ZeroEngine checkpoint manifest");
    const int version = j.at("version").get<int>();
    // Only checksummed versions load: version 1 had no checksum, so a
    // manifest edited to say "version": 1 would let an edited field through.
    if (version < kFirstChecksummedVersion || version > kCheckpointVersion) {
      return bad(cat("format version ", version, ", this build reads versions ", kFirstChecksummedVersion, " to ",
                     kCheckpointVersion, " (each checksummed)"));
    }
    if (!j.contains("crc32c") || !j.at("crc32c").is_number_unsigned()) {
      return bad("no crc32c field: the manifest was edited or damaged after it was written");
    }
    const uint32_t want = j.at("crc32c").get<uint32_t>(), got = manifest_crc(j);
    if (want != got) {
      return bad(cat("checksum mismatch (the file says ", want, ", its contents give ", got,
                     "): the manifest was edited or damaged after it was written; restore it or resume from "
                     "another checkpoint"));
    }
    Manifest m;
    m.tag = j.at("tag").get<std::string>();
    m.world_size = j.at("world_size").get<int>();
    m.zero_stage = j.at("zero_stage").get<int>();
    m.model_dtype = j.at("model_dtype").get<std::string>();
    m.optimizer = j.at("optimizer").at("type").get<std::string>();
    m.optimizer_states = j.at("optimizer").at("states").get<std::vector<std::string>>();
    const Json& p = j.at("progress");
    m.progress.global_step = p.at("global_step").get<int64_t>();
    m.progress.skipped_steps = p.at("skipped_steps").get<int64_t>();
    m.progress.micro_step = p.at("micro_step").get<int64_t>();
    m.progress.scheduler_iteration = p.at("scheduler_last_batch_iteration").get<int64_t>();
    const Json& ls = p.at("loss_scaler");
    m.progress.loss_scaler = {ls.at("scale").get<double>(), ls.at("iter").get<int64_t>(),
                              ls.at("last_overflow_iter").get<int64_t>(), ls.at("hysteresis").get<int64_t>()};
    for (const Json& e : j.at("parameters")) {
      const std::vector<int64_t> s = e.at("shape").get<std::vector<int64_t>>();
      m.parameters.emplace_back(e.at("name").get<std::string>(), Shape(s.begin(), s.end()));
    }
    for (const Json& e : j.at("files")) {
      m.files.push_back({e.at("name").get<std::string>(), e.at("rank").get<int>(), e.at("bytes").get<int64_t>(),
                         e.contains("host") ? e.at("host").get<std::string>() : std::string()});
    }
    for (auto it = j.at("tensors").begin(); it != j.at("tensors").end(); ++it) {
      CheckpointTensor t;
      t.param = it.value().at("param").get<std::string>();
      t.kind = it.value().at("kind").get<std::string>();
      const std::vector<int64_t> s = it.value().at("shape").get<std::vector<int64_t>>();
      t.shape = Shape(s.begin(), s.end());
      // Contiguous segments tile the tensor in order; with strided ones
      // (a tensor-parallel save) the counts add up to the tensor and every
      // element named lies inside it.
      const int64_t numel = shape_numel(t.shape);
      int64_t covered = 0, counted = 0;
      bool any_strided = false;
      for (const Json& e : it.value().at("segments")) any_strided = any_strided || e.contains("run");
      for (const Json& e : it.value().at("segments")) {
        CheckpointSegment seg{e.at("file").get<int>(), e.at("begin").get<int64_t>(), e.at("end").get<int64_t>(),
                              e.at("offset").get<int64_t>(), e.at("crc32c").get<uint32_t>(),
                              e.value("run", int64_t{0}), e.value("stride", int64_t{0})};
        if (seg.file < 0 || seg.file >= static_cast<int>(m.files.size())) {
          return bad(cat("tensor ", it.key(), " names file #", seg.file, " of ", m.files.size()));
        }
        if (seg.end <= seg.begin || seg.begin < 0) {
          return bad(cat("tensor ", it.key(), ": an empty segment at element ", seg.begin));
        }
        if (seg.strided()) {
          if (seg.count() % seg.run != 0 || seg.stride < seg.run || seg.element(seg.count() - 1) >= numel) {
            return bad(cat("tensor ", it.key(), ": a strided segment (", seg.count(), " elements in runs of ",
                           seg.run, " every ", seg.stride, " from ", seg.begin, ") does not fit its ", numel,
                           " elements"));
          }
        } else if (seg.end > numel) {
          return bad(cat("tensor ", it.key(), ": a segment ends at element ", seg.end, " of ", numel));
        }
        if (!any_strided && seg.begin != covered) {
          return bad(cat("tensor ", it.key(), ": segments do not tile it (gap or overlap at element ", covered, ")"));
        }
        covered = seg.end;
        counted += seg.count();
        t.segments.push_back(seg);
      }
      if (counted != numel) {
        return bad(cat("tensor ", it.key(), ": segments cover ", counted, " of ", numel, " elements"));
      }
      m.tensors.emplace(it.key(), std::move(t));
    }
    if (j.contains("model") && !j.at("model").is_null()) {
      if (!j.at("model").is_object()) return bad("\"model\" is not an object (a Hugging Face config.json)");
      m.model = j.at("model");
    }
    if (j.contains("adapter") && !j.at("adapter").is_null()) {
      if (!j.at("adapter").is_object()) return bad("\"adapter\" is not an object (a PEFT adapter_config.json)");
      m.adapter = j.at("adapter");
    }
    if (j.contains("model_files")) {
      for (const Json& e : j.at("model_files")) {
        CheckpointModelFile f{e.at("name").get<std::string>(), e.at("bytes").get<int64_t>(),
                              e.at("crc32c").get<uint32_t>()};
        // A plain name in the tag directory, and none of the checkpoint's own files.
        const bool shard = f.name.rfind("rank_", 0) == 0;
        if (f.name.empty() || f.name.find('/') != std::string::npos || f.name[0] == '.' ||
            f.name == "manifest.json" || shard || f.bytes < 0) {
          return bad(cat("model file \"", f.name, "\" (", f.bytes, " bytes) is not a file name of the tag directory"));
        }
        for (const CheckpointModelFile& g : m.model_files)
          if (g.name == f.name) return bad(cat("model file ", f.name, " is listed twice"));
        m.model_files.push_back(std::move(f));
      }
    }
    if (j.contains("frozen")) {
      for (const Json& e : j.at("frozen")) {
        const std::string name = e.get<std::string>();
        const bool known = std::any_of(m.parameters.begin(), m.parameters.end(),
                                       [&](const auto& entry) { return entry.first == name; });
        if (!known) return bad(cat("\"frozen\" names ", name, ", which is not one of its parameters"));
        if (m.tensors.count(key("master", name)) == 0) {
          return bad(cat("frozen parameter ", name, " has no master tensor (its weights)"));
        }
        m.frozen.push_back(name);
      }
    }
    return m;
  } catch (const Json::exception& e) {
    return bad(cat("malformed (", e.what(), ")"));
  }
}

namespace {

struct RawHeader {
  char magic[8];
  uint32_t version;
  uint32_t rank;
  uint32_t world;
  uint32_t crc;
  int64_t payload_bytes;
  char tag[96];
};
static_assert(sizeof(RawHeader) == kShardHeaderBytes);

}  // namespace

std::string encode_shard_header(int rank, int world, const std::string& tag, int64_t payload_bytes) {
  RawHeader h{};
  std::memcpy(h.magic, kShardMagic, 8);
  h.version = kShardVersion;
  h.rank = static_cast<uint32_t>(rank);
  h.world = static_cast<uint32_t>(world);
  h.payload_bytes = payload_bytes;
  std::strncpy(h.tag, tag.c_str(), sizeof(h.tag) - 1);
  h.crc = crc32c(&h, sizeof(h));
  return std::string(reinterpret_cast<const char*>(&h), sizeof(h));
}

absl::Status check_shard_header(const char* header, const std::string& path, int rank, int world,
                                const std::string& tag, int64_t payload_bytes) {
  RawHeader h;
  std::memcpy(&h, header, sizeof(h));
  auto bad = [&](std::string_view what) { return absl::DataLossError(cat("checkpoint shard ", path, ": ", what)); };
  if (std::memcmp(h.magic, kShardMagic, 8) != 0) return bad("bad magic (not a ZeroEngine checkpoint shard)");
  const uint32_t stored = h.crc;
  h.crc = 0;
  if (crc32c(&h, sizeof(h)) != stored) return bad("header checksum mismatch (corrupted header)");
  if (h.version != static_cast<uint32_t>(kShardVersion)) return bad(cat("format version ", h.version));
  if (static_cast<int>(h.rank) != rank || static_cast<int>(h.world) != world) {
    return bad(cat("written by rank ", h.rank, " of ", h.world, ", but the manifest expects rank ", rank, " of ", world));
  }
  if (std::string(h.tag, strnlen(h.tag, sizeof(h.tag))) != tag) {
    return bad(cat("belongs to checkpoint \"", std::string(h.tag, strnlen(h.tag, sizeof(h.tag))), "\", not \"", tag, "\""));
  }
  if (h.payload_bytes != payload_bytes) {
    return bad(cat("header says ", h.payload_bytes, " payload bytes, the manifest ", payload_bytes));
  }
  return absl::OkStatus();
}

}  // namespace zero
