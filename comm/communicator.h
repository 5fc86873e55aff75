// Collectives across data-parallel ranks.
//
// Every collective is issued in program order and runs on the communicator's
// own progress thread (its "communication stream"; each group split() off
// has its own): the *_async calls return a CommHandle at once and the
// compute thread goes on; wait() blocks until that collective (and every
// one issued before it on the same communicator) has finished. The caller
// keeps the buffers alive and untouched until then. The blocking calls are
// async + wait.
//
// All ranks must issue the same collectives in the same order (the engine's
// schedule is a function of the model and config only, never of timing).
//
// The collectives and what their buffers hold (W ranks, counts in elements):
//  * all_reduce: buf, reduced in place over the ranks;
//  * reduce_scatter: send is W parts in rank order, recv this rank's part of
//    the sum;
//  * all_gather: buf holds W blocks (one per rank, strided), filled in place;
//  * broadcast: buf, the root's copy everywhere;
//  * all_to_all: send is W blocks of `count` in rank order, block q going to
//    rank q; recv is W blocks of `count`, block q the one rank q sent here
//    (MPI_Alltoall; expert parallelism's token dispatch);
//  * all_to_all_v: the same with a count and a displacement per peer on each
//    side (MPI_Alltoallv): send_counts[q] elements at send + send_displs[q]
//    go to rank q; recv_counts[q] from rank q land at recv + recv_displs[q].
// send and recv of a collective do not overlap, unless said otherwise.
//
// Implementations: MpiCommunicator (Open MPI; CPU ranks under mpirun),
// NcclCommunicator (GPU ranks; bootstrapped through MPI) and
// LocalCommunicator (one process, no launcher: every collective is the
// identity; an all-to-all copies send into recv).
//
// Timing: set_log attaches a CommLog (comm/comm_log.h) that records each
// collective's message size and latency where it runs; off by default.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/comm_log.h"
#include "core/dtype.h"

namespace zero {

enum class ReduceOp { kSum, kMax };

// Completion of one asynchronous collective.
class CommWork {
 public:
  virtual ~CommWork() = default;
  // Blocks until done; the status names the collective and the peer problem
  // when it failed (or did not finish within the communicator's timeout).
  virtual absl::Status wait() = 0;
  virtual bool done() const = 0;
};
using CommHandle = std::shared_ptr<CommWork>;

// A handle whose operation has already completed, OK or with `status`.
CommHandle completed_work(absl::Status status = absl::OkStatus());

// Seconds the threads of this process have spent blocked in CommWork::wait()
// (every communicator's, from the start): the communication time a step did
// not hide behind compute (wall_clock_breakdown's "comm wait"). Each
// CommWork implementation adds its waits through add_comm_wait_seconds.
double comm_wait_seconds();
void add_comm_wait_seconds(double seconds);

// A timed-out collective cannot be cancelled: the communication thread (or
// the NCCL stream) stays inside it, reading and writing the caller's buffers
// until the frozen peer resumes. A caller that returned the error up the
// stack would unwind and free those buffers under it (a use-after-free when
// data arrives), then hang joining the thread or in MPI_Finalize behind it.
// What a program does when a wait gives up on a collective that is still in
// flight (a timeout, or work queued behind a stuck operation): `handler` is
// called with the wait's error before the wait returns, so a program can end
// there (zero-train prints the error and _Exits) instead of unwinding and
// freeing buffers the collective still writes. Process-wide; nullptr (the
// default): the wait returns its error. Every CommWork that gives up reports
// through comm_gave_up, which calls the handler and returns `error`.
using CommTimeoutHandler = void (*)(const absl::Status& error);
void set_comm_timeout_handler(CommTimeoutHandler handler);
absl::Status comm_gave_up(absl::Status error);

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Ranks on this node and this rank's index among them (threads per rank
  // are divided among them).
  virtual int local_size() const { return 1; }
  virtual std::string_view name() const = 0;

  // In place: buf (count elements of dtype) becomes the reduction over ranks.
  virtual CommHandle all_reduce_async(void* buf, int64_t count, DType dtype, ReduceOp op) = 0;
  // send holds the whole buffer (sum of recv_counts elements, rank-major:
  // rank r's part is recv_counts[r] elements after rank r-1's); each rank
  // receives the sum over ranks of its own part into recv. Counts may differ
  // (zero too) per rank. In place when recv is this rank's own part of send
  // (send + the counts of the ranks before it, NCCL's in-place form): no
  // receive buffer, and send's other parts are left undefined. Every rank
  // passes the same form.
  virtual CommHandle reduce_scatter_async(const void* send, void* recv, std::vector<int64_t> recv_counts,
                                          DType dtype) = 0;
  // In place: rank r's block of `block` elements sits at buf + r * stride
  // elements; afterwards every rank has every rank's block there.
  virtual CommHandle all_gather_async(void* buf, int64_t block, int64_t stride, DType dtype) = 0;
  virtual CommHandle broadcast_async(void* buf, int64_t count, DType dtype, int root) = 0;
  virtual CommHandle barrier_async() = 0;
  // send: W blocks of `count` elements, rank q's at send + q * count; recv
  // (W * count elements, not overlapping send): rank q's block for this rank
  // at recv + q * count. Every rank passes the same count. This rank's own
  // block is copied.
  virtual CommHandle all_to_all_async(const void* send, void* recv, int64_t count, DType dtype) = 0;
  // MPI_Alltoallv: W counts and W displacements (elements, >= 0) per side.
  // send_counts[q] elements from send + send_displs[q] go to rank q;
  // recv_counts[q] elements from rank q land at recv + recv_displs[q]. A
  // count may be 0 (nothing exchanged with that rank) and the parts may
  // leave gaps (untouched), but the receive parts must not overlap. Rank q's
  // recv_counts[p] must equal rank p's send_counts[q].
  virtual CommHandle all_to_all_v_async(const void* send, std::vector<int64_t> send_counts,
                                        std::vector<int64_t> send_displs, void* recv,
                                        std::vector<int64_t> recv_counts, std::vector<int64_t> recv_displs,
                                        DType dtype) = 0;

  // ---- groups and point to point (the device mesh: comm/device_mesh.h)

  // A communicator over the ranks that pass the same `color`, ranked by `key`
  // (ties by rank here): MPI_Comm_split's contract. Every rank of this
  // communicator calls it, in the same order as its collectives. The result
  // has its own progress thread (or stream): its collectives are ordered
  // among themselves, not with this one's, so two groups' work progresses
  // at once; it must be destroyed before this one.
  virtual absl::StatusOr<std::unique_ptr<Communicator>> split(int color, int key) = 0;
  // `count` elements to / from rank `peer` of this communicator (pipeline
  // activations). A send completes when its buffer may be reused; sends and
  // receives between two ranks match in issue order, and a pair of ranks must
  // not both send first without the receive posted (as blocking MPI). On MPI
  // both are posted at once, outside the collectives' order, so a receive
  // may be posted early, before sends to the same peer (see the
  // implementation's header for NCCL).
  virtual CommHandle send_async(const void* buf, int64_t count, DType dtype, int peer) = 0;
  virtual CommHandle recv_async(void* buf, int64_t count, DType dtype, int peer) = 0;
  // Whether a receive may be posted early: before sends issued after it to
  // the same peer, and before the peer has sent, without holding those sends
  // up (each transfer posted at once, none waiting behind another). The
  // pipeline then posts its receives one compute ahead
  // (runtime/engine/pipeline_schedule.h); where false (the default, NCCL's
  // in-order stream) it keeps the receives where blocking transfers cannot
  // deadlock.
  virtual bool allows_early_receives() const { return false; }
  // Both at once with one peer (MPI_Sendrecv; NCCL's grouped send and
  // receive): what a pipeline stage does when it hands its output to a
  // neighbour and needs that neighbour's reply next (Megatron's
  // send_forward_recv_backward). Two ranks that each issue it towards the
  // other never deadlock, whatever the message sizes.
  virtual CommHandle send_recv_async(const void* send, int64_t send_count, void* recv, int64_t recv_count,
                                     DType dtype, int peer) = 0;

  absl::Status all_reduce(void* buf, int64_t count, DType dtype, ReduceOp op) {
    return all_reduce_async(buf, count, dtype, op)->wait();
  }
  absl::Status reduce_scatter(const void* send, void* recv, std::vector<int64_t> recv_counts, DType dtype) {
    return reduce_scatter_async(send, recv, std::move(recv_counts), dtype)->wait();
  }
  absl::Status all_gather(void* buf, int64_t block, int64_t stride, DType dtype) {
    return all_gather_async(buf, block, stride, dtype)->wait();
  }
  absl::Status broadcast(void* buf, int64_t count, DType dtype, int root) {
    return broadcast_async(buf, count, dtype, root)->wait();
  }
  absl::Status barrier() { return barrier_async()->wait(); }
  absl::Status all_to_all(const void* send, void* recv, int64_t count, DType dtype) {
    return all_to_all_async(send, recv, count, dtype)->wait();
  }
  absl::Status all_to_all_v(const void* send, std::vector<int64_t> send_counts, std::vector<int64_t> send_displs,
                            void* recv, std::vector<int64_t> recv_counts, std::vector<int64_t> recv_displs,
                            DType dtype) {
    return all_to_all_v_async(send, std::move(send_counts), std::move(send_displs), recv, std::move(recv_counts),
                              std::move(recv_displs), dtype)
        ->wait();
  }

  // Reductions of host doubles (norms, losses, overflow flags), blocking.
  virtual absl::Status all_reduce_doubles(double* values, int64_t count, ReduceOp op) = 0;
  absl::StatusOr<double> all_reduce_sum(double v) {
    absl::Status s = all_reduce_doubles(&v, 1, ReduceOp::kSum);
    if (!s.ok()) return s;
    return v;
  }
  absl::StatusOr<double> all_reduce_max(double v) {
    absl::Status s = all_reduce_doubles(&v, 1, ReduceOp::kMax);
    if (!s.ok()) return s;
    return v;
  }

  // Bytes this rank has sent into collectives so far (by the algorithm's
  // ideal volume: all-reduce 2(W-1)/W x size, reduce-scatter and all-gather
  // (W-1)/W x size; all-to-all the blocks sent to other ranks, (W-1)/W x
  // size; all-to-all-v the send counts of the other ranks), for the
  // bandwidth and volume reports.
  int64_t bytes_communicated() const { return bytes_; }

  // Records this communicator's collectives into `log` from now on (nullptr:
  // stop; the default), labelled `group` ("data", "tensor", "pipeline"; ""
  // for none). Groups split() from it afterwards get the same log, unlabelled,
  // until set otherwise. Collectives already issued are recorded (or not) as
  // they were issued. The log must outlive the collectives issued into it.
  // Call it between collectives, from the thread that issues them.
  virtual void set_log(CommLog* log, std::string group = {}) {
    log_ = log;
    log_group_ = std::move(group);
  }
  CommLog* log() const { return log_; }
  const std::string& log_group() const { return log_group_; }

 protected:
  // The log to record `op` into, or nullptr (no log, or it does not record
  // `op`): an implementation times an op only when this is set.
  CommLog* log_for(CommOp op) const { return log_ != nullptr && log_->records(op) ? log_ : nullptr; }
  // What split() gives a new group: the parent's log, no label.
  void inherit_log(const Communicator& parent) { set_log(parent.log_); }

  // count elements of `t` in bytes: the message sizes the CommLog records.
  static int64_t message_bytes(int64_t count, DType t) { return count * static_cast<int64_t>(dtype_size(t)); }
  // Each implementation counts what it is asked to move, by the formulas above.
  void count_all_reduce(int64_t count, DType dtype) {
    bytes_ += 2 * (world_size() - 1) * count * static_cast<int64_t>(dtype_size(dtype)) / world_size();
  }
  void count_reduce_scatter(const std::vector<int64_t>& recv_counts, DType dtype) {
    int64_t total = 0;
    for (int64_t c : recv_counts) total += c;
    bytes_ += (world_size() - 1) * total * static_cast<int64_t>(dtype_size(dtype)) / world_size();
  }
  void count_all_gather(int64_t block, DType dtype) {
    bytes_ += (world_size() - 1) * block * static_cast<int64_t>(dtype_size(dtype));
  }
  void count_broadcast(int64_t count, DType dtype, int root) {
    bytes_ += rank() == root ? count * static_cast<int64_t>(dtype_size(dtype)) : 0;
  }
  void count_send(int64_t count, DType dtype) { bytes_ += count * static_cast<int64_t>(dtype_size(dtype)); }
  void count_all_to_all(int64_t count, DType dtype) {
    bytes_ += (world_size() - 1) * count * static_cast<int64_t>(dtype_size(dtype));
  }
  void count_all_to_all_v(const std::vector<int64_t>& send_counts, DType dtype) {
    int64_t others = 0;
    for (int q = 0; q < static_cast<int>(send_counts.size()); ++q) others += q == rank() ? 0 : send_counts[q];
    bytes_ += others * static_cast<int64_t>(dtype_size(dtype));
  }
  // An all_to_all_v's four lists: W entries each, none negative; CHECK-fails
  // naming the list otherwise (a caller's bug, as reduce_scatter's counts).
  void check_all_to_all_v(const std::vector<int64_t>& send_counts, const std::vector<int64_t>& send_displs,
                          const std::vector<int64_t>& recv_counts, const std::vector<int64_t>& recv_displs) const;
  // A send or receive's peer must be another rank of this communicator:
  // INVALID_ARGUMENT naming both otherwise.
  absl::Status check_peer(std::string_view what, int peer) const;

 private:
  int64_t bytes_ = 0;
  CommLog* log_ = nullptr;
  std::string log_group_;
};

// MPI when launched by mpirun (or srun), else the single-process communicator.
absl::StatusOr<std::unique_ptr<Communicator>> create_communicator();

// One process: all collectives are the identity (world size 1).
std::unique_ptr<Communicator> make_local_communicator();

}  // namespace zero
