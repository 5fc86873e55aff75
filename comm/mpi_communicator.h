// Collectives over Open MPI for CPU ranks launched by mpirun.
//
// Progress (MPI_THREAD_MULTIPLE; create() fails, naming the level it got,
// when the library cannot give it):
//  * every communicator, the world and each group split() from it, has its
//    own communication thread (comm/comm_thread.h) running its collectives
//    in issue order, so two groups' collectives progress at once (a
//    tensor-parallel all-reduce never waits behind a data-parallel
//    reduce-scatter, and ranks that meet on two groups in different orders
//    do not deadlock);
//  * point-to-point transfers are posted at once, on the caller's thread, as
//    MPI_Isend / MPI_Irecv (tag 0 on the communicator, so they match in issue
//    order between two ranks) and occupy no thread: a receive posted early
//    (as soon as its buffer is free) never blocks sends issued after it to
//    the same peer. Their CommWork::wait() polls MPI_Test (yielding, then
//    sleeping 50 us between polls) with the collectives' timeout, dead-peer
//    and wait-time accounting; done() tests once.
// Why fail rather than fall back to one thread for all when MULTIPLE is
// missing: the pipeline's early receives rely on it, and a fallback would
// turn a start-up error into a hang mid-run. Open MPI 3+ provides it.
//
// Set-up that matters on these machines:
//  * glibc is told, before MPI starts, to keep freed memory (mallopt:
//    no mmap for large blocks, no trimming), so Open MPI's per-call temporary
//    buffers of its reducing collectives are reused instead of being mapped
//    and page-faulted on every call (2-3x on reduce-scatter here);
//  * each rank runs OMP_NUM_THREADS OpenMP threads when the user set it,
//    else the node's cores divided among its ranks (rank_threads() says
//    which, for zero-train's start-up line);
//  * SIGTERM/SIGINT (what mpirun sends the survivors when a rank dies) print
//    which collective or transfer this rank was in before exiting.
// bf16/fp16 sums use user-defined MPI reductions (fp32 arithmetic, rounded
// to nearest even per element). With a CommLog attached, each collective is
// timed on the communication thread around its MPI call (queueing excluded);
// a point-to-point transfer from its posting to the first wait() or done()
// that sees it complete.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "comm/communicator.h"

namespace zero {

class CommThread;
struct MpiCommHandle;  // the MPI_Comm (mpi.h stays out of this header)

// How many OpenMP threads each rank runs, and where the number came from.
struct RankThreads {
  int threads = 1;
  bool from_environment = false;  // OMP_NUM_THREADS chose it
  std::string description;        // "2 OpenMP threads per rank, from OMP_NUM_THREADS=2 ..."
};

// OMP_NUM_THREADS when it is set to a positive number (its first level:
// "4,2" is 4), kept even where it oversubscribes the cores (the description
// says so); else rank_cores (the cores this rank may run on, after mpirun's
// binding) divided among the ranks_on_node ranks of the node, at least one
// each. `omp_num_threads` is the variable's value (nullptr or "": unset; a
// value that is not a positive number is ignored, and the description says so).
// node_cores: the node's online cores, for the oversubscription note.
RankThreads choose_rank_threads(const char* omp_num_threads, int rank_cores, int node_cores, int ranks_on_node);

class MpiCommunicator final : public Communicator {
 public:
  // Initialises MPI; fails with a Status naming the MPI error.
  static absl::StatusOr<std::unique_ptr<MpiCommunicator>> create(double timeout_s);
  ~MpiCommunicator() override;  // finalises MPI

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  int local_size() const override { return local_size_; }
  std::string_view name() const override { return "mpi"; }
  // The OpenMP threads create() gave this rank (omp_set_num_threads), and why.
  const RankThreads& rank_threads() const { return rank_threads_; }

  CommHandle all_reduce_async(void* buf, int64_t count, DType dtype, ReduceOp op) override;
  CommHandle reduce_scatter_async(const void* send, void* recv, std::vector<int64_t> recv_counts,
                                  DType dtype) override;
  CommHandle all_gather_async(void* buf, int64_t block, int64_t stride, DType dtype) override;
  CommHandle broadcast_async(void* buf, int64_t count, DType dtype, int root) override;
  CommHandle barrier_async() override;
  // MPI_Alltoall / MPI_Alltoallv; a count or displacement above INT_MAX
  // fails the call (INVALID_ARGUMENT naming it) before anything is sent.
  CommHandle all_to_all_async(const void* send, void* recv, int64_t count, DType dtype) override;
  CommHandle all_to_all_v_async(const void* send, std::vector<int64_t> send_counts, std::vector<int64_t> send_displs,
                                void* recv, std::vector<int64_t> recv_counts, std::vector<int64_t> recv_displs,
                                DType dtype) override;
  absl::Status all_reduce_doubles(double* values, int64_t count, ReduceOp op) override;
  // MPI_Comm_split (run on this communicator's thread); the group gets a
  // communication thread of its own.
  absl::StatusOr<std::unique_ptr<Communicator>> split(int color, int key) override;
  // MPI_Isend / MPI_Irecv posted before these return (see the top).
  CommHandle send_async(const void* buf, int64_t count, DType dtype, int peer) override;
  CommHandle recv_async(void* buf, int64_t count, DType dtype, int peer) override;
  CommHandle send_recv_async(const void* send, int64_t send_count, void* recv, int64_t recv_count, DType dtype,
                             int peer) override;
  // MPI_Irecv posted at once occupies nothing a later send needs.
  bool allows_early_receives() const override { return true; }

 private:
  MpiCommunicator();
  // fn, timed around its run on the communication thread and recorded in
  // the log when it succeeds, if a log records `op`; else fn as it is.
  template <typename F>
  std::function<absl::Status()> timed(CommOp op, int64_t message_bytes, F fn) const;

  // Posts a point-to-point transfer: `post` issues its MPI_Isend / MPI_Irecv
  // into the requests it is given; the handle polls them.
  template <typename Post>
  CommHandle post_p2p(std::string what, CommOp op, int64_t message_bytes, int requests, Post post);

  std::shared_ptr<CommThread> thread_;   // this communicator's own
  double timeout_s_ = 600;               // for the point-to-point waits (the thread has its own copy)
  int64_t p2p_seq_ = 0;                  // transfers posted, for their names
  int world_rank_ = 0;                   // this process's rank in MPI_COMM_WORLD (errors say "rank R: ...")
  std::unique_ptr<MpiCommHandle> comm_;  // MPI_COMM_WORLD, or a group's (freed with it)
  bool world_comm_ = true;               // the world finalises MPI
  int rank_ = 0, world_ = 1, local_size_ = 1;
  RankThreads rank_threads_;
};

// True when this process was started by an MPI launcher.
bool launched_by_mpi();

}  // namespace zero
