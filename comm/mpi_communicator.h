// Collectives over Open MPI for CPU ranks launched by mpirun. Every MPI call
// is made on the communicator's thread (MPI_THREAD_FUNNELED), in issue order.
//
// Set-up that matters on these machines:
//  * glibc is told, before MPI starts, to keep freed memory (mallopt:
//    no mmap for large blocks, no trimming), so Open MPI's per-call temporary
//    buffers of its reducing collectives are reused instead of being mapped
//    and page-faulted on every call (2-3x on reduce-scatter here);
//  * OpenMP threads are divided among the ranks of a node;
//  * SIGTERM/SIGINT (what mpirun sends the survivors when a rank dies) print
//    which collective this rank was in before exiting.
// bf16/fp16 sums use user-defined MPI reductions (fp32 arithmetic, rounded
// to nearest even per element). With a CommLog attached, each collective is
// timed on the communication thread around its MPI call (queueing excluded).
#pragma once

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "comm/communicator.h"

namespace zero {

class CommThread;
struct MpiCommHandle;  // the MPI_Comm (mpi.h stays out of this header)

class MpiCommunicator final : public Communicator {
 public:
  // Initialises MPI; fails with a Status naming the MPI error.
  static absl::StatusOr<std::unique_ptr<MpiCommunicator>> create(double timeout_s);
  ~MpiCommunicator() override;  // finalises MPI

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  int local_size() const override { return local_size_; }
  std::string_view name() const override { return "mpi"; }

  CommHandle all_reduce_async(void* buf, int64_t count, DType dtype, ReduceOp op) override;
  CommHandle reduce_scatter_async(const void* send, void* recv, std::vector<int64_t> recv_counts,
                                  DType dtype) override;
  CommHandle all_gather_async(void* buf, int64_t block, int64_t stride, DType dtype) override;
  CommHandle broadcast_async(void* buf, int64_t count, DType dtype, int root) override;
  CommHandle barrier_async() override;
  absl::Status all_reduce_doubles(double* values, int64_t count, ReduceOp op) override;
  // MPI_Comm_split; the group shares this communicator's thread.
  absl::StatusOr<std::unique_ptr<Communicator>> split(int color, int key) override;
  CommHandle send_async(const void* buf, int64_t count, DType dtype, int peer) override;
  CommHandle recv_async(void* buf, int64_t count, DType dtype, int peer) override;
  CommHandle send_recv_async(const void* send, int64_t send_count, void* recv, int64_t recv_count, DType dtype,
                             int peer) override;

 private:
  MpiCommunicator();
  // fn, timed around its run on the communication thread and recorded in
  // the log when it succeeds, if a log records `op`; else fn as it is.
  template <typename F>
  std::function<absl::Status()> timed(CommOp op, int64_t message_bytes, F fn) const;

  std::shared_ptr<CommThread> thread_;   // shared with the groups split from it
  std::unique_ptr<MpiCommHandle> comm_;  // MPI_COMM_WORLD, or a group's (freed with it)
  bool world_comm_ = true;               // the world finalises MPI
  int rank_ = 0, world_ = 1, local_size_ = 1;
};

// True when this process was started by an MPI launcher.
bool launched_by_mpi();

}  // namespace zero
