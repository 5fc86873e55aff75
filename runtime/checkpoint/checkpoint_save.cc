// Atomic sharded checkpoint saves; see checkpoint.h (and node_local.h for
// saves to a disk per host).
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "core/status.h"
#include "core/strings.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/crc32c.h"
#include "runtime/checkpoint/file_io.h"
#include "runtime/checkpoint/node_local.h"
#include "zero/state_buffers.h"

namespace zero {

namespace {

std::string shard_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "rank_%05d.shard", rank);
  return buf;
}

// The segments this rank writes, in file order: for each kind (master, then
// each optimizer state), for each of its ranges, the range's elements as
// segments of the unsplit tensor: one contiguous segment for a whole
// parameter; for a tensor-parallel slice, its runs in the unsplit tensor,
// equal runs at a constant distance merged into one strided segment. The
// frozen parameters' weights follow the master weights, as "master" of
// their own (fp32 of the model-dtype values), with no optimizer state.
struct PlannedSegment {
  std::string kind;
  StateRange range;  // local elements [range.begin, range.end), at range.offset in the state buffers
  int64_t offset;    // byte offset in the file
  int64_t element = 0, run = 0, stride = 0;  // CheckpointSegment's geometry in the unsplit tensor
  bool frozen = false;  // read from frozen_weights(), not state_store()
  int state = 0;        // which of Engine::states() holds it
};

std::vector<PlannedSegment> pieces_of(const std::vector<StateRange>& ranges, bool with_replicated,
                                      const std::vector<Parameter*>& copies) {
  std::vector<PlannedSegment> pieces;  // of one kind, offsets to be set
  for (const StateRange& r : ranges) {
    if (!with_replicated && !r.param->slice()) continue;  // another tensor rank writes the replicas
    if (std::find(copies.begin(), copies.end(), r.param) != copies.end()) continue;  // the first stage writes it
    const size_t first = pieces.size();
    r.param->for_each_global_run(r.begin, r.end, [&](int64_t local, int64_t element, int64_t count) {
      if (pieces.size() > first) {
        PlannedSegment& last = pieces.back();
        const int64_t have = last.range.end - last.range.begin;
        const bool single = last.run == 0;
        if (single && element == last.element + have) {  // continues the run
          last.range.end += count;
          return;
        }
        const int64_t stride = single ? element - last.element : last.stride;
        if (count == (single ? have : last.run) && stride > count &&
            element == last.element + (single ? 1 : have / last.run) * stride) {
          if (single) last.run = have, last.stride = stride;
          last.range.end += count;
          return;
        }
      }
      const StateRange piece{r.param, local, local + count, r.offset + (local - r.begin)};
      pieces.push_back({"", piece, 0, element, 0, 0});
    });
  }
  return pieces;
}

// What this rank writes of each state: `data_rank` its place in the
// state's group (the data group, or the expert-data group).
struct StateShare {
  ModelState* state;
  int data_rank;
};

std::vector<PlannedSegment> plan(const std::vector<StateShare>& shares, const std::vector<std::string>& kinds,
                                 bool with_replicated, const std::vector<Parameter*>& copies) {
  std::vector<std::vector<PlannedSegment>> trained, frozen;
  for (size_t i = 0; i < shares.size(); ++i) {
    const ModelState& state = *shares[i].state;
    trained.push_back(pieces_of(state.written_ranges(shares[i].data_rank), with_replicated, copies));
    frozen.push_back(pieces_of(state.frozen_written_ranges(shares[i].data_rank), with_replicated, copies));
    for (PlannedSegment& s : trained.back()) s.state = static_cast<int>(i);
    for (PlannedSegment& s : frozen.back()) s.state = static_cast<int>(i), s.frozen = true;
  }
  std::vector<PlannedSegment> out;
  int64_t offset = kShardHeaderBytes;
  auto add = [&](const std::string& kind, const std::vector<PlannedSegment>& pieces) {
    for (PlannedSegment s : pieces) {
      s.kind = kind;
      s.offset = offset;
      offset += (s.range.end - s.range.begin) * 4;
      out.push_back(std::move(s));
    }
  };
  for (const std::string& kind : kinds) {
    for (size_t i = 0; i < shares.size(); ++i) {
      add(kind, trained[i]);
      if (kind == kinds.front()) add(kind, frozen[i]);  // "master": the frozen weights too
    }
  }
  return out;
}

// Writes this rank's shard; returns the CRC of each planned segment.
absl::StatusOr<std::vector<uint32_t>> write_shard(const std::vector<StateShare>& shares,
                                                  const std::vector<PlannedSegment>& segs, const std::string& path,
                                                  int rank, int world, const std::string& tag) {
  const int64_t payload = segs.empty() ? 0 : segs.back().offset + (segs.back().range.end - segs.back().range.begin) * 4 - kShardHeaderBytes;
  const std::string tmp = path + ".tmp";
  ZE_ASSIGN_OR_RETURN(FileWriter w, FileWriter::create(tmp));
  const std::string header = encode_shard_header(rank, world, tag, payload);
  ZE_RETURN_IF_ERROR(w.write(header.data(), header.size()));
  std::vector<uint32_t> crcs;
  constexpr int64_t kChunk = 2 << 20;  // elements staged at a time
  for (const PlannedSegment& s : segs) {
    ModelState& state = *shares.at(s.state).state;
    const std::vector<std::string>& kinds = state.state_store().names();
    const int index = static_cast<int>(std::find(kinds.begin(), kinds.end(), s.kind) - kinds.begin());
    OptimizerStateStore* frozen = state.frozen_weights();
    ZE_CHECK(!s.frozen || (frozen != nullptr && index == 0)) << s.range.param->name();
    OptimizerStateStore& from = s.frozen ? *frozen : state.state_store();
    uint32_t crc = 0;
    for (int64_t e = 0; e < s.range.end - s.range.begin; e += kChunk) {
      const int64_t n = std::min(kChunk, s.range.end - s.range.begin - e);
      ZE_ASSIGN_OR_RETURN(const std::vector<float> host, from.read(index, s.range.offset + e, n));
      crc = crc32c(host.data(), host.size() * 4, crc);
      ZE_RETURN_IF_ERROR(w.write(host.data(), host.size() * 4));
    }
    crcs.push_back(crc);
  }
  ZE_RETURN_IF_ERROR(w.close());
  ZE_RETURN_IF_ERROR(rename_path(tmp, path));
  return crcs;
}

using ParameterList = std::vector<std::pair<std::string, Shape>>;

// Every rank's parameters (name, unsplit shape) for rank 0's manifest: the
// ranks of different pipeline stages hold different ones, and under expert
// parallelism different experts. Sent as the
// characters of "name:d0,d1;..." in an all-reduced table of doubles, each
// rank filling its own slots (exact: characters are small integers).
absl::StatusOr<std::vector<ParameterList>> every_ranks_parameters(Communicator& comm,
                                                                  const std::vector<Parameter*>& mine) {
  std::string text;
  for (const Parameter* p : mine) {
    text += p->name() + ":";
    for (size_t i = 0; i < p->global_shape().size(); ++i) text += cat(i == 0 ? "" : ",", p->global_shape()[i]);
    text += ";";
  }
  const int world = comm.world_size(), rank = comm.rank();
  std::vector<double> lengths(world, 0.0);
  lengths[rank] = static_cast<double>(text.size());
  ZE_RETURN_IF_ERROR(comm.all_reduce_doubles(lengths.data(), world, ReduceOp::kSum));
  std::vector<size_t> first(world + 1, 0);
  for (int r = 0; r < world; ++r) first[r + 1] = first[r] + static_cast<size_t>(lengths[r]);
  std::vector<double> chars(first[world], 0.0);
  for (size_t i = 0; i < text.size(); ++i) chars[first[rank] + i] = static_cast<unsigned char>(text[i]);
  ZE_RETURN_IF_ERROR(comm.all_reduce_doubles(chars.data(), static_cast<int64_t>(chars.size()), ReduceOp::kSum));
  std::vector<ParameterList> out(world);
  for (int r = 0; r < world; ++r) {
    std::string theirs;
    for (size_t i = first[r]; i < first[r + 1]; ++i) theirs += static_cast<char>(chars[i]);
    for (const std::string& entry : std::vector<std::string>(absl::StrSplit(theirs, ';', absl::SkipEmpty()))) {
      const size_t colon = entry.rfind(':');
      Shape shape;
      for (const std::string& d :
           std::vector<std::string>(absl::StrSplit(entry.substr(colon + 1), ',', absl::SkipEmpty()))) {
        int64_t v = 0;
        if (!absl::SimpleAtoi(d, &v)) return absl::InternalError(cat("parameter table of rank ", r, ": ", entry));
        shape.push_back(v);
      }
      out[r].emplace_back(std::string(entry.substr(0, colon)), shape);
    }
  }
  return out;
}

// Rank 0's model description (SaveOptions' model, adapter and model files)
// as bytes, for the other hosts' manifests: with node-local storage every
// host's manifest must be the same, whatever files its ranks could read.
std::string encode_model_description(const SaveOptions& o) {
  Json j = {{"model", o.model}, {"adapter", o.adapter}, {"files", Json::array()}};
  std::string blob;
  for (const ModelFile& f : o.model_files) {
    j["files"].push_back({{"name", f.name}, {"offset", blob.size()}, {"bytes", f.contents.size()}});
    blob += f.contents;
  }
  const std::string text = j.dump();
  return cat(text.size(), "\n", text, blob);
}

absl::Status decode_model_description(const std::string& bytes, SaveOptions& o) {
  const size_t nl = bytes.find('\n');
  size_t n = 0;
  if (nl == std::string::npos || !absl::SimpleAtoi(bytes.substr(0, nl), &n) || nl + 1 + n > bytes.size()) {
    return absl::InternalError("rank 0's model description arrived damaged");
  }
  ZE_ASSIGN_OR_RETURN(Json j, parse_json_text(bytes.substr(nl + 1, n), "rank 0's model description"));
  const size_t base = nl + 1 + n;
  o.model = j.at("model");
  o.adapter = j.at("adapter");
  o.model_files.clear();
  for (const Json& f : j.at("files")) {
    o.model_files.push_back({f.at("name").get<std::string>(),
                             bytes.substr(base + f.at("offset").get<size_t>(), f.at("bytes").get<size_t>())});
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> save_checkpoint(Engine& engine, const SaveOptions& options) {
  // Every rank of the world writes a shard (world rank = file); the data
  // group's layout says which elements of its tensor slice each writes.
  Communicator& comm = engine.mesh().world();
  ModelState& state = engine.state();
  const int rank = comm.rank(), world = comm.world_size();
  const EngineProgress progress = engine.progress();
  const std::string tag = options.tag.empty() ? cat("global_step", progress.global_step) : options.tag;
  const std::string final_dir = options.dir + "/" + tag;
  const std::string partial = options.dir + "/." + tag + ".partial";
  // Who does the directory work: rank 0, or with node-local storage the
  // first rank of each host, on its host's disk.
  std::vector<std::string> hosts;
  if (options.node_local) {
    ZE_ASSIGN_OR_RETURN(hosts, every_ranks_host(comm));
  }
  const bool leader = options.node_local ? host_leaders(hosts)[rank] == rank : rank == 0;

  // Every rank learns whether every rank got this far; a failure anywhere
  // aborts the save everywhere (nobody waits on a rank that gave up).
  auto agree = [&](absl::Status mine, std::string_view what) -> absl::Status {
    ZE_ASSIGN_OR_RETURN(double failed, comm.all_reduce_max(mine.ok() ? 0.0 : 1.0));
    if (!mine.ok()) return mine;
    if (failed > 0) return absl::AbortedError(cat("checkpoint ", tag, ": another rank failed ", what));
    return absl::OkStatus();
  };

  if (options.node_local) {
    // Node-local storage on a directory the hosts share would have their
    // first ranks undo each other's work. Each host's first rank leaves a
    // mark carrying this save's nonce (rank 0's) in <dir>; one that sees
    // another host's mark with that nonce is on shared storage. Marks of
    // interrupted saves carry other nonces and are ignored.
    std::string nonce = rank == 0 ? cat(absl::ToUnixNanos(absl::Now()), ".", getpid()) : std::string();
    ZE_RETURN_IF_ERROR(broadcast_bytes(comm, nonce, 0));
    const std::string prefix = "." + tag + ".host.";
    absl::Status marked;
    if (leader) {
      marked = make_directories(options.dir);
      if (marked.ok()) marked = write_file_atomic(options.dir + "/" + prefix + hosts[rank], nonce);
    }
    ZE_RETURN_IF_ERROR(agree(marked, "to mark its checkpoint directory"));
    absl::Status alone;
    if (leader) {
      absl::StatusOr<std::vector<std::string>> names = list_directory(options.dir);
      alone = names.status();
      for (const std::string& n : names.ok() ? *names : std::vector<std::string>{}) {
        if (!alone.ok() || n.rfind(prefix, 0) != 0 || n == prefix + hosts[rank]) continue;
        absl::StatusOr<std::string> theirs = read_file(options.dir + "/" + n);
        if (theirs.ok() && *theirs == nonce) {
          alone = absl::FailedPreconditionError(cat(
              "checkpoint.use_node_local_storage is set, but hosts ", hosts[rank], " and ", n.substr(prefix.size()),
              " both see ", options.dir, ": it is one shared directory, not a disk per host. Unset the key (every "
              "rank then saves into the shared directory), or point run.save_dir at a node-local disk"));
        }
      }
    }
    const absl::Status checked = agree(alone, "to check that its checkpoint directory is its host's own");
    if (leader) (void)remove_tree(options.dir + "/" + prefix + hosts[rank]);
    ZE_RETURN_IF_ERROR(checked);
  }

  // 1. rank 0 (each host's first rank) prepares the partial directory.
  absl::Status prepared;
  if (leader) {
    // A .partial of an interrupted save is removed. An existing <tag> is
    // replaced only when it is a leftover of an interrupted save: complete,
    // and newer than the checkpoint `latest` names (published, `latest` not
    // yet rewritten; it stays until this save's copy is complete). Any other
    // existing tag — the one `latest` names, or another run's — is never
    // overwritten.
    prepared = make_directories(options.dir);
    if (prepared.ok() && std::filesystem::exists(final_dir)) {
      const absl::StatusOr<std::string> latest = latest_tag(options.dir);
      const absl::StatusOr<Manifest> theirs = read_manifest(options.dir, tag);
      const absl::StatusOr<Manifest> latests =
          latest.ok() ? read_manifest(options.dir, *latest) : absl::StatusOr<Manifest>(latest.status());
      const bool leftover = theirs.ok() && latests.ok() && *latest != tag &&
                            theirs->progress.global_step > latests->progress.global_step;
      if (!leftover) {
        prepared = absl::AlreadyExistsError(cat(
            "checkpoint ", final_dir, " already exists",
            latest.ok() && *latest == tag ? cat(" and is the one ", options.dir, "/latest names") : std::string(),
            "; not overwriting it (continue that run with --resume auto, or save elsewhere)"));
      }
    }
    if (prepared.ok()) prepared = remove_tree(partial);
    if (prepared.ok()) prepared = make_directories(partial);
  }
  ZE_RETURN_IF_ERROR(agree(prepared, "to prepare the checkpoint directory"));

  // 2. every rank writes its shard.
  const std::vector<std::string> kinds = state.state_store().names();  // "master", then the optimizer's
  // A pipeline's later stages hold copies of a tied table; the first stage writes it.
  const bool later_stage = engine.mesh().coordinates().pipeline > 0;
  // Under expert parallelism the experts' state is written by each
  // expert-data group's ranks, each group its own experts under their global
  // names: together every parameter once, as without.
  std::vector<StateShare> shares{{&state, engine.mesh().coordinates().data}};
  if (ModelState* experts = engine.expert_state()) shares.push_back({experts, engine.mesh().expert_data().rank()});
  const std::vector<PlannedSegment> mine =
      plan(shares, kinds, engine.mesh().coordinates().tensor == 0,
           later_stage ? model_of(engine.model()).parameters_tied_across_stages() : std::vector<Parameter*>{});
  absl::StatusOr<std::vector<uint32_t>> crcs =
      write_shard(shares, mine, partial + "/" + shard_name(rank), rank, world, tag);
  absl::Status written = agree(crcs.status(), "to write its shard");
  if (!written.ok()) {
    if (leader) (void)remove_tree(partial);  // the previous checkpoint stays as it was
    return written;
  }

  // 3. rank 0 learns every rank's segments (each rank fills its own slots of
  // an all-reduced table: kind, parameter, element, count, run, stride, byte
  // offset, CRC, frozen; all exact in a double).
  constexpr int kFields = 9;
  std::vector<double> counts(world, 0.0);
  counts[rank] = static_cast<double>(mine.size());
  ZE_RETURN_IF_ERROR(comm.all_reduce_doubles(counts.data(), world, ReduceOp::kSum));
  std::vector<size_t> first(world + 1, 0);
  for (int r = 0; r < world; ++r) first[r + 1] = first[r] + static_cast<size_t>(counts[r]);
  const std::vector<Parameter*> params = engine.model().parameters();
  // Parameters by their index in the writing rank's list: each rank's own
  // list, or with pipeline stages every rank's, exchanged.
  std::vector<ParameterList> lists;
  if (engine.mesh().shape().pipeline > 1 || engine.mesh().shape().expert > 1) {
    ZE_ASSIGN_OR_RETURN(lists, every_ranks_parameters(comm, params));
  } else {
    ParameterList own;
    for (const Parameter* p : params) own.emplace_back(p->name(), p->global_shape());
    lists.assign(world, own);
  }
  std::vector<double> table(first[world] * kFields, 0.0);
  for (size_t i = 0; i < mine.size(); ++i) {
    const PlannedSegment& p = mine[i];
    double* row = &table[(first[rank] + i) * kFields];
    row[0] = static_cast<double>(std::find(kinds.begin(), kinds.end(), p.kind) - kinds.begin());
    row[1] = static_cast<double>(std::find(params.begin(), params.end(), p.range.param) - params.begin());
    row[2] = static_cast<double>(p.element);
    row[3] = static_cast<double>(p.range.end - p.range.begin);
    row[4] = static_cast<double>(p.run);
    row[5] = static_cast<double>(p.stride);
    row[6] = static_cast<double>(p.offset);
    row[7] = static_cast<double>((*crcs)[i]);
    row[8] = p.frozen ? 1.0 : 0.0;
  }
  ZE_RETURN_IF_ERROR(comm.all_reduce_doubles(table.data(), static_cast<int64_t>(table.size()), ReduceOp::kSum));

  // Every host's manifest says the same: rank 0's model description.
  SaveOptions received;
  const SaveOptions& described = options.node_local && rank != 0 ? received : options;
  if (options.node_local) {
    std::string description = rank == 0 ? encode_model_description(options) : std::string();
    ZE_RETURN_IF_ERROR(broadcast_bytes(comm, description, 0));
    if (rank != 0) ZE_RETURN_IF_ERROR(decode_model_description(description, received));
  }

  // 4. rank 0 (each host's first rank) writes the manifest, publishes the
  // directory, then `latest`.
  absl::Status published;
  if (leader) {
    Manifest m;
    m.tag = tag;
    m.world_size = world;
    m.zero_stage = stage_number(state.stage());
    m.model_dtype = std::string(dtype_name(engine.config().param_dtype));
    m.optimizer = std::string(state.optimizer_name());
    m.optimizer_states.assign(kinds.begin() + 1, kinds.end());
    m.progress = progress;
    m.model = described.model;
    m.adapter = described.adapter;
    // The whole model's parameters: every rank's, each once, in rank order
    // (with pipeline stages: the first stage's, then the next's new ones).
    for (const ParameterList& list : lists)
      for (const auto& entry : list)
        if (std::find(m.parameters.begin(), m.parameters.end(), entry) == m.parameters.end())
          m.parameters.push_back(entry);
    std::set<std::string> frozen;
    for (int r = 0; r < world; ++r) {
      int64_t end = kShardHeaderBytes;
      for (size_t i = first[r]; i < first[r + 1]; ++i) {
        const double* row = &table[i * kFields];
        const auto v = [&](int f) { return static_cast<int64_t>(row[f]); };
        const auto& [name, shape] = lists[r].at(static_cast<size_t>(v(1)));
        const std::string& kind = kinds.at(static_cast<size_t>(v(0)));
        CheckpointTensor& t = m.tensors[Manifest::key(kind, name)];
        t.param = name;
        t.kind = kind;
        t.shape = shape;
        t.segments.push_back({r, v(2), v(2) + v(3), v(6), static_cast<uint32_t>(v(7)), v(4), v(5)});
        end = v(6) + v(3) * 4;
        if (v(8) != 0) frozen.insert(name);
      }
      m.files.push_back({shard_name(r), r, end - kShardHeaderBytes, options.node_local ? hosts[r] : std::string()});
    }
    for (const auto& [name, shape] : m.parameters)
      if (frozen.count(name) > 0) m.frozen.push_back(name);
    for (auto& [name, t] : m.tensors) {
      std::sort(t.segments.begin(), t.segments.end(),
                [](const CheckpointSegment& a, const CheckpointSegment& b) { return a.begin < b.begin; });
    }
    // The model's files, before the manifest that lists them.
    for (const ModelFile& f : described.model_files) {
      if (!published.ok()) break;
      if (f.name.empty() || f.name.find('/') != std::string::npos || f.name[0] == '.' || f.name == "manifest.json" ||
          f.name.rfind("rank_", 0) == 0) {
        published = absl::InvalidArgumentError(cat("checkpoint ", tag, ": model file \"", f.name,
                                                    "\" is not a plain file name beside the shards"));
        break;
      }
      published = write_file_atomic(partial + "/" + f.name, f.contents);
      m.model_files.push_back(
          {f.name, static_cast<int64_t>(f.contents.size()), crc32c(f.contents.data(), f.contents.size())});
    }
    if (published.ok()) published = write_file_atomic(partial + "/manifest.json", m.to_json().dump(1));
    if (published.ok()) published = fsync_directory(partial);
    if (!published.ok()) (void)remove_tree(partial);
  }
  // With a disk per host, no host publishes before every host's manifest is
  // down: one host's full disk must not leave the others' `latest` naming a
  // checkpoint whose shards on that host never got their name.
  if (options.node_local) ZE_RETURN_IF_ERROR(agree(published, "to write the manifest"));
  if (leader && published.ok()) {
    if (std::filesystem::exists(final_dir)) published = remove_tree(final_dir);
    if (published.ok()) published = rename_path(partial, final_dir);
    if (published.ok()) published = fsync_directory(options.dir);
    if (published.ok()) published = write_file_atomic(options.dir + "/latest", tag + "\n");
    if (!published.ok()) (void)remove_tree(partial);
    if (published.ok() && options.keep > 0) {
      absl::StatusOr<std::vector<std::string>> tags = list_checkpoints(options.dir);
      if (tags.ok()) {
        for (size_t i = 0; i + options.keep < tags->size(); ++i) (void)remove_tree(options.dir + "/" + (*tags)[i]);
      }
    }
  }
  ZE_RETURN_IF_ERROR(agree(published, "to publish the checkpoint"));
  return tag;
}

}  // namespace zero
