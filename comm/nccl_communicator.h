// Collectives over NCCL for GPU ranks, bootstrapped through MPI: rank 0
// creates the ncclUniqueId and the MPI communicator broadcasts it; every
// rank then joins with ncclCommInitRank on its CUDA device.
//
// Streams: collectives run on the communicator's own CUDA stream. Each one
// first makes that stream wait for an event recorded on the compute stream
// (so it reads what the compute stream wrote before the call), and its
// CommWork is an event recorded after it: wait() synchronises on that event
// only (no device-wide sync) and fails, after aborting the NCCL
// communicator, when the collective has not finished within the timeout or
// NCCL reports an asynchronous error (a peer died).
//
// With a CommLog attached, each collective is also bracketed by timing
// events on the comm stream (the start one after the wait on the compute
// stream, so queueing is not counted) and recorded once, with
// cudaEventElapsedTime, when its CommWork is first seen complete (wait(),
// done(), or its destruction), on that caller's thread.
//
// Uneven reduce-scatter parts are a grouped ncclReduce per owner; strided
// all-gather is a grouped ncclBroadcast per block; all-to-all (even or
// not) is a grouped ncclSend and ncclRecv per rank. Host scalars (norms,
// losses, flags) go through the MPI communicator.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <memory>

#include "comm/communicator.h"

namespace zero {

class NcclCommunicator final : public Communicator {
 public:
  // bootstrap: the MPI communicator of the same ranks (kept for host scalars).
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> create(std::unique_ptr<Communicator> bootstrap,
                                                                  int device, cudaStream_t compute_stream,
                                                                  double timeout_s);
  ~NcclCommunicator() override;

  int rank() const override { return bootstrap_->rank(); }
  int world_size() const override { return bootstrap_->world_size(); }
  int local_size() const override { return bootstrap_->local_size(); }
  std::string_view name() const override { return "nccl"; }

  CommHandle all_reduce_async(void* buf, int64_t count, DType dtype, ReduceOp op) override;
  CommHandle reduce_scatter_async(const void* send, void* recv, std::vector<int64_t> recv_counts,
                                  DType dtype) override;
  CommHandle all_gather_async(void* buf, int64_t block, int64_t stride, DType dtype) override;
  CommHandle broadcast_async(void* buf, int64_t count, DType dtype, int root) override;
  CommHandle barrier_async() override;
  // A grouped ncclSend / ncclRecv per rank, as PyTorch's all_to_all.
  CommHandle all_to_all_async(const void* send, void* recv, int64_t count, DType dtype) override;
  CommHandle all_to_all_v_async(const void* send, std::vector<int64_t> send_counts, std::vector<int64_t> send_displs,
                                void* recv, std::vector<int64_t> recv_counts, std::vector<int64_t> recv_displs,
                                DType dtype) override;
  // Also the bootstrap's, which runs the barrier and the host scalars.
  void set_log(CommLog* log, std::string group = {}) override {
    bootstrap_->set_log(log, group);
    Communicator::set_log(log, std::move(group));
  }
  absl::Status all_reduce_doubles(double* values, int64_t count, ReduceOp op) override {
    return bootstrap_->all_reduce_doubles(values, count, op);
  }
  // ncclCommSplit beside a split of the bootstrap (same color and key), so
  // the group's host scalars go through its own MPI group.
  absl::StatusOr<std::unique_ptr<Communicator>> split(int color, int key) override;
  // ncclSend / ncclRecv on the communicator's stream, in issue order with
  // its collectives. Unlike MpiCommunicator's, a receive is not
  // early-receive safe: an ncclRecv waits on the stream until its data
  // arrives, and sends issued after it to the same peer wait behind it, so
  // two ranks that each post a receive before sending to the other deadlock
  // (use send_recv_async, which groups both). Each group split() from it has
  // a stream and an NCCL communicator of its own, so groups do not
  // serialise on each other.
  CommHandle send_async(const void* buf, int64_t count, DType dtype, int peer) override;
  CommHandle recv_async(void* buf, int64_t count, DType dtype, int peer) override;
  CommHandle send_recv_async(const void* send, int64_t send_count, void* recv, int64_t recv_count, DType dtype,
                             int peer) override;
  // No: see send_async above.
  bool allows_early_receives() const override { return false; }

 private:
  NcclCommunicator() = default;
  // Orders the comm stream after the compute stream, runs `launch`, and
  // returns the completion event as a CommHandle (timed when a log records
  // `op`, whose message is `message_bytes`).
  template <typename Launch>
  CommHandle run(const char* what, CommOp op, int64_t message_bytes, Launch launch);

  std::unique_ptr<Communicator> bootstrap_;
  ncclComm_t comm_ = nullptr;
  // Set by the first wait that aborts comm_ (a timeout or NCCL's async error).
  std::shared_ptr<std::atomic<bool>> aborted_ = std::make_shared<std::atomic<bool>>(false);
  cudaStream_t stream_ = nullptr;
  cudaStream_t compute_ = nullptr;
  int device_ = 0;
  double timeout_s_ = 600;
};

}  // namespace zero
