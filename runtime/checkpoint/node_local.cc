// Node-local checkpoint storage; see node_local.h.
#include "runtime/checkpoint/node_local.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/status.h"
#include "core/strings.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/file_io.h"
#include "runtime/checkpoint/manifest.h"

namespace zero {

std::string this_host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown-host";
  return name;
}

std::vector<int> host_leaders(const std::vector<std::string>& hosts) {
  std::vector<int> leader(hosts.size());
  for (size_t r = 0; r < hosts.size(); ++r) {
    leader[r] = static_cast<int>(std::find(hosts.begin(), hosts.end(), hosts[r]) - hosts.begin());
  }
  return leader;
}

absl::StatusOr<std::vector<std::string>> every_ranks_host(Communicator& comm) {
  constexpr int64_t kBlock = 64;  // int32s per rank: 256 bytes, past HOST_NAME_MAX
  const std::string mine = this_host_name().substr(0, kBlock * 4 - 1);
  std::vector<int32_t> table(static_cast<size_t>(comm.world_size() * kBlock), 0);
  std::memcpy(&table[comm.rank() * kBlock], mine.data(), mine.size());
  ZE_RETURN_IF_ERROR(comm.all_gather(table.data(), kBlock, kBlock, DType::kI32));
  std::vector<std::string> hosts;
  for (int r = 0; r < comm.world_size(); ++r) hosts.emplace_back(reinterpret_cast<const char*>(&table[r * kBlock]));
  return hosts;
}

absl::Status broadcast_bytes(Communicator& comm, std::string& bytes, int root) {
  int32_t size[2] = {static_cast<int32_t>(bytes.size() & 0x7fffffff), static_cast<int32_t>(bytes.size() >> 31)};
  ZE_RETURN_IF_ERROR(comm.broadcast(size, 2, DType::kI32, root));
  const size_t n = static_cast<size_t>(size[0]) | (static_cast<size_t>(size[1]) << 31);
  constexpr size_t kPiece = static_cast<size_t>(kShardCopyPieceBytes);
  std::vector<int32_t> piece(std::min(n, kPiece) / 4 + 1);
  if (comm.rank() != root) bytes.assign(n, '\0');
  for (size_t at = 0; at < n; at += kPiece) {
    const size_t len = std::min(kPiece, n - at);
    if (comm.rank() == root) std::memcpy(piece.data(), bytes.data() + at, len);
    ZE_RETURN_IF_ERROR(comm.broadcast(piece.data(), static_cast<int64_t>((len + 3) / 4), DType::kI32, root));
    if (comm.rank() != root) std::memcpy(bytes.data() + at, piece.data(), len);
  }
  return absl::OkStatus();
}

absl::Status broadcast_status(Communicator& comm, const absl::Status& mine, int root) {
  std::string text = comm.rank() == root ? cat(static_cast<int>(mine.code()), " ", mine.message()) : std::string();
  ZE_RETURN_IF_ERROR(broadcast_bytes(comm, text, root));
  const size_t space = text.find(' ');
  return absl::Status(static_cast<absl::StatusCode>(std::atoi(text.substr(0, space).c_str())), text.substr(space + 1));
}

namespace {

// The shard files (indices into m.files) whose segments overlap what this
// rank holds: those load_local will open.
std::set<int> files_needed(Engine& engine, const Manifest& m) {
  ModelState& state = engine.state();
  const std::vector<std::string>& kinds = state.state_store().names();
  std::set<int> out;
  auto add = [&](const std::string& kind, const StateRange& r) {
    auto it = m.tensors.find(Manifest::key(kind, r.param->name()));
    if (it == m.tensors.end()) return;  // load_local says what is wrong
    int64_t lo = -1, hi = -1;
    r.param->for_each_global_run(r.begin, r.end, [&](int64_t, int64_t element, int64_t count) {
      if (lo < 0) lo = element;
      hi = element + count;
    });
    if (lo < 0) return;
    for (const CheckpointSegment& seg : it->second.segments) {
      if (seg.element(seg.count() - 1) < lo || seg.begin >= hi) continue;
      out.insert(seg.file);
    }
  };
  for (ModelState* held : engine.states()) {
    for (const std::string& kind : kinds)
      for (const StateRange& r : held->held_ranges()) add(kind, r);
    if (held->frozen_weights() != nullptr)
      for (const StateRange& r : held->frozen_held_ranges()) add(kinds[0], r);
  }
  return out;
}

std::string size_text(int64_t bytes) {
  return bytes < (1 << 20) ? absl::StrFormat("%.1f KiB", static_cast<double>(bytes) / 1024)
                           : absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1 << 20));
}

// Checks a copied shard (at `path`, file `index` of m) as the loader would:
// its header, its size, and every segment's CRC-32C.
absl::Status check_copied_shard(const Manifest& m, int index, const std::string& path) {
  const CheckpointFile& f = m.files.at(index);
  ZE_ASSIGN_OR_RETURN(FileReader r, FileReader::open(path));
  if (r.size() != kShardHeaderBytes + f.bytes) {
    return absl::DataLossError(cat("checkpoint shard ", path, " arrived with ", r.size(), " bytes, the manifest says ",
                                   kShardHeaderBytes + f.bytes));
  }
  char header[kShardHeaderBytes];
  ZE_RETURN_IF_ERROR(r.read_at(0, header, sizeof(header)));
  ZE_RETURN_IF_ERROR(check_shard_header(header, path, f.rank, m.world_size, m.tag, f.bytes));
  for (const auto& [key, t] : m.tensors) {
    for (const CheckpointSegment& seg : t.segments) {
      if (seg.file != index) continue;
      ZE_RETURN_IF_ERROR(read_segment(r, seg, key, [](const float*, int64_t, int64_t) { return absl::OkStatus(); }));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status gather_node_local(Engine& engine, const std::string& dir, const std::string& tag, std::ostream& log) {
  Communicator& comm = engine.mesh().world();
  const int rank = comm.rank(), world = comm.world_size();
  ZE_ASSIGN_OR_RETURN(const std::vector<std::string> hosts, every_ranks_host(comm));
  const std::vector<int> leader = host_leaders(hosts);
  const std::string tag_dir = dir + "/" + tag;
  const std::string where = cat(tag_dir, " on host ", hosts[0]);

  // Rank 0's manifest (and its model files) are the checkpoint.
  std::string manifest_text;
  absl::Status read0;
  if (rank == 0) {
    absl::StatusOr<std::string> text = read_file(tag_dir + "/manifest.json");
    read0 = text.status();
    if (read0.ok()) manifest_text = *text;
  }
  ZE_RETURN_IF_ERROR(broadcast_status(comm, read0, 0));
  ZE_RETURN_IF_ERROR(broadcast_bytes(comm, manifest_text, 0));
  ZE_ASSIGN_OR_RETURN(Json j, parse_json_text(manifest_text, where + "/manifest.json"));
  ZE_ASSIGN_OR_RETURN(const Manifest m, Manifest::parse(j, where + "/manifest.json"));
  const int files = static_cast<int>(m.files.size());

  // What each rank needs, what its host has, and whether its host has the
  // manifest (the same one: a different checkpoint under the same tag is an
  // error, not something to mix shards with).
  absl::Status same;
  const bool has_manifest = std::filesystem::exists(tag_dir + "/manifest.json");
  if (has_manifest && rank != 0) {
    absl::StatusOr<std::string> text = read_file(tag_dir + "/manifest.json");
    same = text.status();
    if (same.ok() && *text != manifest_text) {
      same = absl::FailedPreconditionError(cat(
          "checkpoint ", tag_dir, " on host ", hosts[rank], " is not the one on host ", hosts[0],
          " (rank 0): their manifests differ. Move one of them away, or resume from another tag"));
    }
  }
  ZE_ASSIGN_OR_RETURN(double differ, comm.all_reduce_max(same.ok() ? 0.0 : 1.0));
  if (!same.ok()) return same;
  if (differ > 0) return absl::AbortedError(cat("loading checkpoint ", tag_dir, ": another host holds a different one"));
  const std::set<int> needed = files_needed(engine, m);
  // Per rank: files need flags, files have flags, then "lacks the manifest".
  const int64_t row = 2 * files + 1;
  std::vector<double> table(static_cast<size_t>(world * row), 0.0);
  double* mine = &table[static_cast<size_t>(rank * row)];
  for (int f = 0; f < files; ++f) {
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(tag_dir + "/" + m.files[f].name, ec);
    mine[f] = needed.count(f) > 0 ? 1.0 : 0.0;
    mine[files + f] = !ec && static_cast<int64_t>(size) == kShardHeaderBytes + m.files[f].bytes ? 1.0 : 0.0;
  }
  mine[2 * files] = has_manifest ? 0.0 : 1.0;
  ZE_RETURN_IF_ERROR(comm.all_reduce_doubles(table.data(), static_cast<int64_t>(table.size()), ReduceOp::kSum));
  auto at = [&](int r, int64_t col) { return table[static_cast<size_t>(r * row + col)] > 0; };

  // The copies: (file, from rank, to the first rank of a host that lacks it).
  struct Copy {
    int file, from, to;
  };
  std::vector<Copy> copies;
  std::map<std::string, std::vector<int>> missing;  // writer's host (or "rank N") -> files
  bool any_lacks_manifest = false;
  for (int h = 0; h < world; ++h) {
    if (leader[h] != h) continue;  // hosts by their first rank
    for (int r = h; r < world; ++r) any_lacks_manifest |= leader[r] == h && at(r, 2 * files);
    for (int f = 0; f < files; ++f) {
      bool need = false, have = false;
      for (int r = h; r < world; ++r) {
        if (leader[r] != h) continue;
        need |= at(r, f);
        have |= at(r, files + f);
      }
      if (!need || have) continue;
      int from = -1;
      for (int r = 0; r < world && from < 0; ++r)
        if (at(r, files + f)) from = r;
      if (from >= 0) {
        copies.push_back({f, from, h});
      } else {
        const CheckpointFile& cf = m.files[f];
        std::vector<int>& list = missing[cf.host.empty() ? cat("rank ", cf.rank) : cf.host];
        if (std::find(list.begin(), list.end(), f) == list.end()) list.push_back(f);
      }
    }
  }
  if (!missing.empty()) {
    std::string what, whose;
    for (const auto& [host, list] : missing) {
      for (int f : list) what += cat(what.empty() ? "" : ", ", m.files[f].name);
      what += cat(" (written by ", m.files[list.front()].host.empty() ? "" : "host ", host, ")");
      whose += cat(whose.empty() ? "" : " and ", host);
    }
    std::string live;
    for (int r = 0; r < world; ++r)
      if (leader[r] == r) live += cat(live.empty() ? "" : ", ", hosts[r]);
    return absl::FailedPreconditionError(cat(
        "checkpoint ", dir, "/", tag, " (node-local storage): no host of this run (", live, ") has ", what,
        ", which this run's ranks need. Bring ", whose, " back into the run, or copy the files into ", dir, "/", tag,
        "/ on a host of this run, then resume again"));
  }

  // One line per source host, on rank 0.
  if (rank == 0) {
    std::map<std::string, std::vector<const Copy*>> by_source;
    for (const Copy& c : copies) by_source[hosts[c.from]].push_back(&c);
    for (const auto& [host, list] : by_source) {
      std::vector<std::string> names, to;
      int64_t bytes = 0;
      int from = world;
      for (const Copy* c : list) {
        if (std::find(names.begin(), names.end(), m.files[c->file].name) == names.end())
          names.push_back(m.files[c->file].name);
        if (std::find(to.begin(), to.end(), hosts[c->to]) == to.end()) to.push_back(hosts[c->to]);
        bytes += kShardHeaderBytes + m.files[c->file].bytes;
        from = std::min(from, c->from);
      }
      std::sort(names.begin(), names.end());
      log << "resume: " << tag << " needs " << absl::StrJoin(names, ", ") << " from host " << host << " (rank " << from
          << "): " << size_text(bytes) << " copied to host" << (to.size() > 1 ? "s " : " ") << absl::StrJoin(to, ", ")
          << "\n";
    }
    log.flush();
  }

  // The copies, in the same order on every rank: each involves two ranks,
  // both blocking on it, so the earliest unfinished one always progresses.
  // A rank that cannot read or write keeps the exchange going (zeros,
  // discarded bytes) and reports afterwards.
  absl::Status local;
  if (leader[rank] == rank && !has_manifest) local = make_directories(tag_dir);
  const int64_t piece = kShardCopyPieceBytes;
  std::vector<int32_t> buf;
  for (const Copy& c : copies) {
    if (rank != c.from && rank != c.to) continue;
    const CheckpointFile& f = m.files[c.file];
    const std::string path = tag_dir + "/" + f.name;
    const int64_t total = kShardHeaderBytes + f.bytes;
    buf.assign(static_cast<size_t>(std::min(piece, total) / 4 + 1), 0);
    if (rank == c.from) {
      absl::StatusOr<FileReader> r = FileReader::open(path);
      absl::Status read = r.status();
      for (int64_t off = 0; off < total; off += piece) {
        const int64_t n = std::min(piece, total - off);
        if (read.ok()) read = r->read_at(off, buf.data(), static_cast<size_t>(n));
        if (!read.ok()) std::fill(buf.begin(), buf.end(), 0);
        ZE_RETURN_IF_ERROR(comm.send_async(buf.data(), (n + 3) / 4, DType::kI32, c.to)->wait());
      }
      if (local.ok() && !read.ok()) local = annotate(read, cat("sending ", path, " to rank ", c.to));
    } else {
      const std::string tmp = path + ".tmp";
      absl::StatusOr<FileWriter> w = FileWriter::create(tmp);
      absl::Status wrote = w.status();
      for (int64_t off = 0; off < total; off += piece) {
        const int64_t n = std::min(piece, total - off);
        ZE_RETURN_IF_ERROR(comm.recv_async(buf.data(), (n + 3) / 4, DType::kI32, c.from)->wait());
        if (wrote.ok()) wrote = w->write(buf.data(), static_cast<size_t>(n));
      }
      if (wrote.ok()) wrote = w->close();
      if (wrote.ok()) wrote = annotate(check_copied_shard(m, c.file, tmp),
                                       cat("copied from host ", hosts[c.from], " (rank ", c.from, ")"));
      if (wrote.ok()) wrote = rename_path(tmp, path);
      if (!wrote.ok()) (void)remove_tree(tmp);
      if (local.ok()) local = wrote;
    }
  }
  // A host without the tag gets rank 0's model files and manifest, the
  // manifest last: the directory is a checkpoint once its shards are in.
  std::string model_files;
  if (any_lacks_manifest) {
    absl::Status read_files;
    std::vector<ModelFile> mf;
    if (rank == 0) {
      absl::StatusOr<std::vector<ModelFile>> got = read_model_files(dir, tag, m);
      read_files = got.status();
      if (got.ok()) mf = *std::move(got);
      for (const ModelFile& f : mf) model_files += cat(f.name.size(), "\n", f.name, f.contents.size(), "\n", f.contents);
    }
    ZE_RETURN_IF_ERROR(broadcast_status(comm, read_files, 0));
    ZE_RETURN_IF_ERROR(broadcast_bytes(comm, model_files, 0));
    if (!has_manifest && leader[rank] == rank && local.ok()) {
      // Rank 0's files, each "<name length>\n<name><length>\n<bytes>".
      size_t p = 0;
      while (local.ok() && p < model_files.size()) {
        const size_t nl = model_files.find('\n', p);
        const size_t name_len = std::stoul(model_files.substr(p, nl - p));
        const std::string name = model_files.substr(nl + 1, name_len);
        const size_t nl2 = model_files.find('\n', nl + 1 + name_len);
        const size_t len = std::stoul(model_files.substr(nl + 1 + name_len, nl2 - nl - 1 - name_len));
        local = write_file_atomic(tag_dir + "/" + name, model_files.substr(nl2 + 1, len));
        p = nl2 + 1 + len;
      }
      if (local.ok()) local = write_file_atomic(tag_dir + "/manifest.json", manifest_text);
    }
  }
  ZE_ASSIGN_OR_RETURN(double failed, comm.all_reduce_max(local.ok() ? 0.0 : 1.0));
  if (!local.ok()) return annotate(local, cat("copying checkpoint ", tag_dir, " onto host ", hosts[rank]));
  if (failed > 0) return absl::AbortedError(cat("loading checkpoint ", tag_dir, ": another rank failed to copy a shard"));
  return absl::OkStatus();
}

}  // namespace zero
