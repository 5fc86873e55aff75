// The communication log (DeepSpeed's "comms_logger"): every collective a
// communicator with a log attached (Communicator::set_log) runs is recorded
// as (op, message size, group, latency) and aggregated per
// (op, message size, group); summary() prints the table DeepSpeed's
// deepspeed.comm.log_summary() prints.
//
//  * Message size is the whole buffer the op works on, as DeepSpeed reports
//    it: all_reduce count x dtype; all_gather the gathered output (block x
//    ranks, gaps of a strided gather excluded); reduce_scatter the whole
//    input (sum of the parts); all_to_all the whole input (count x ranks),
//    all_to_all_v this rank's (the sum of its send counts, gaps excluded: it
//    differs between ranks); broadcast, send, recv the count moved;
//    send_recv the larger of the two directions (they run at once);
//    all_reduce_scalars the host doubles; barrier 0.
//  * Latency is measured where the op runs, from its start to its end on
//    this rank, not counting time queued behind earlier collectives: on the
//    MPI communicator's progress thread around the MPI call; on the NCCL
//    stream between timing events around the launch. Only collectives that
//    succeed are recorded.
//  * algbw = message size / latency, busbw = algbw x the op's bus factor as
//    nccl-tests defines it (all_reduce 2(n-1)/n; all_gather, reduce_scatter,
//    all_to_all, all_to_all_v (n-1)/n, the last two as DeepSpeed's comms
//    logger; broadcast, send, recv, send_recv 1; barrier 0). GB/s are 1e9
//    bytes/s. A row's bandwidths are over its total time
//    (count x size / total latency), not the mean of per-op bandwidths (which
//    a single very fast op skews; DeepSpeed averages per-op values).
//
// Thread-safe: the communication threads of several communicators record
// into one log while the trainer reads it. The log must outlive every
// collective (and NCCL handle) issued while it is attached.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace zero {

// The operations a communicator records; names are DeepSpeed's where it has one.
enum class CommOp {
  kAllReduce,         // "all_reduce"
  kReduceScatter,     // "reduce_scatter"
  kAllGather,         // "all_gather"
  kAllToAll,          // "all_to_all": equal blocks to and from every rank
  kAllToAllV,         // "all_to_all_v": a count and displacement per rank (MPI_Alltoallv)
  kBroadcast,         // "broadcast"
  kSend,              // "send"
  kRecv,              // "recv"
  kSendRecv,          // "send_recv": a paired send and receive with one peer
  kBarrier,           // "barrier"
  kAllReduceScalars,  // "all_reduce_scalars": host doubles (norms, losses, flags)
};
inline constexpr int kCommOpCount = 11;

std::string_view comm_op_name(CommOp op);
// The op a name means: the names above, plus DeepSpeed's aliases
// all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single (the
// equal-split all_to_all), isend and irecv.
// INVALID_ARGUMENT naming `name` and the valid names otherwise.
absl::StatusOr<CommOp> parse_comm_op(std::string_view name);
// Every name parse_comm_op accepts (the config's choices for prof_ops).
std::vector<std::string> comm_op_names();
// Every name of a prof_ops list; the first unknown one fails as above.
absl::StatusOr<std::vector<CommOp>> parse_comm_ops(const std::vector<std::string>& names);
// nccl-tests' bus bandwidth factor of `op` on `world_size` ranks.
double comm_bus_factor(CommOp op, int world_size);

// One aggregated line of the summary.
struct CommLogRow {
  CommOp op;
  std::string group;          // the communicator's label (set_log); "" when none
  int world_size = 1;         // ranks of the communicator that ran it
  int64_t message_bytes = 0;  // per op, as defined above
  int64_t count = 0;          // ops recorded
  double total_ms = 0;        // summed latency
  double avg_ms() const { return count > 0 ? total_ms / static_cast<double>(count) : 0.0; }
  // message_bytes / avg latency, in 1e9 bytes/s; 0 when no time was measured.
  double algbw_gbps() const;
  double busbw_gbps() const { return algbw_gbps() * comm_bus_factor(op, world_size); }
};

class CommLog {
 public:
  // Gets one line per recorded op, on the thread that recorded it (a
  // communication thread): keep it short and thread-safe.
  using VerboseSink = std::function<void(const std::string& line)>;

  // Records `ops` only (empty: every op, DeepSpeed's prof_all); `verbose`
  // (may be empty) gets one line per recorded op.
  explicit CommLog(std::vector<CommOp> ops = {}, VerboseSink verbose = {});
  // The same from config names (DeepSpeed's prof_ops): fails naming an
  // unknown one.
  static absl::StatusOr<std::unique_ptr<CommLog>> create(const std::vector<std::string>& prof_ops,
                                                          VerboseSink verbose = {});
  CommLog(const CommLog&) = delete;
  CommLog& operator=(const CommLog&) = delete;

  // Whether `op` is recorded (communicators do not time the others).
  bool records(CommOp op) const { return enabled_[static_cast<int>(op)]; }

  // One completed op of `message_bytes` that took `seconds` on a
  // communicator of `world_size` ranks labelled `group`. Ops this log does
  // not record are ignored.
  void record(CommOp op, int64_t message_bytes, int world_size, double seconds, std::string_view group = {});

  // The aggregated rows: by op (enum order), then message size ascending,
  // then group and world size.
  std::vector<CommLogRow> rows() const;
  // The table: a header line, then one line per row (op, group, ranks,
  // message size, count, total ms, avg ms, algbw GB/s, busbw GB/s); a line
  // saying nothing was recorded when empty.
  std::string summary() const;
  void reset();

  // The line the verbose sink gets for one op (exposed for tests).
  static std::string format_op(CommOp op, int64_t message_bytes, int world_size, double seconds,
                               std::string_view group);

 private:
  using Key = std::tuple<int, int64_t, std::string, int>;  // op, bytes, group, world size
  struct Totals {
    int64_t count = 0;
    double total_ms = 0;
  };

  bool enabled_[kCommOpCount];
  VerboseSink verbose_;
  mutable std::mutex mu_;
  std::map<Key, Totals> rows_;
};

}  // namespace zero
