// Checkpoints on node-local storage (DeepSpeed's
// checkpoint.use_node_local_storage): the checkpoint directory is the same
// path on every host but a different disk on each. A save writes each rank's
// shard to its own host's directory, and the first rank of each host writes
// the manifest (naming, per shard, the host that wrote it), the model files
// and `latest` there. A resume agrees on rank 0's tag, gives a host that lacks
// the tag rank 0's manifest and model files, and copies every shard a rank
// needs that its host lacks from a rank whose host has it, over the
// communicator, in 16 MiB pieces, checked against the manifest's CRC-32Cs.
//
// A host is what gethostname() says (MPI_Get_processor_name's answer under
// Open MPI); the ranks that share it share the directory. The helpers here
// are collectives of the communicator passed in.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/communicator.h"

namespace zero {

// This process's host name.
std::string this_host_name();
// Every rank's host name, by rank.
absl::StatusOr<std::vector<std::string>> every_ranks_host(Communicator& comm);
// The lowest rank on each rank's host (its host's first rank, which writes
// the host's manifest), by rank.
std::vector<int> host_leaders(const std::vector<std::string>& hosts);
// root's `bytes` on every rank.
absl::Status broadcast_bytes(Communicator& comm, std::string& bytes, int root);
// A status rank `root` holds, on every rank (code and message).
absl::Status broadcast_status(Communicator& comm, const absl::Status& mine, int root);

// Makes <dir>/<tag> on every host hold rank 0's manifest and model files
// and every shard the engine's ranks need, copying them from hosts that have
// them; rank 0 writes one line per source host to `log`. A collective of the
// engine's world: every rank returns the same error, before any state
// changes, when a shard is on no host of the run (naming the shards and the
// host that wrote them).
class Engine;
absl::Status gather_node_local(Engine& engine, const std::string& dir, const std::string& tag, std::ostream& log);

// The bytes a piece of a shard copy carries.
inline constexpr int64_t kShardCopyPieceBytes = int64_t{16} << 20;

}  // namespace zero
