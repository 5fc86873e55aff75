// A communicator for tests that fails on purpose: it forwards to a real one
// and makes the n-th call of a chosen collective fail with a given status
// (as a broken peer or a timed-out NCCL call would), so a test can check that
// the error reaches the caller as itself. Test builds only; the product never
// wraps its communicator.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"

namespace zero::testing {

enum class Collective { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kAllToAll, kAllToAllV };

class FaultyCommunicator final : public Communicator {
 public:
  // The `nth` call (0-based) of `which` returns a handle whose wait() gives
  // `error`; every other call goes to `inner`.
  FaultyCommunicator(std::unique_ptr<Communicator> inner, Collective which, int nth, absl::Status error)
      : inner_(std::move(inner)), which_(which), nth_(nth), error_(std::move(error)) {}

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  std::string_view name() const override { return "faulty"; }
  int calls(Collective c) const { return calls_[static_cast<int>(c)]; }

  CommHandle all_reduce_async(void* buf, int64_t count, DType dtype, ReduceOp op) override {
    if (fails(Collective::kAllReduce)) return failed();
    return inner_->all_reduce_async(buf, count, dtype, op);
  }
  CommHandle reduce_scatter_async(const void* send, void* recv, std::vector<int64_t> counts, DType dtype) override {
    if (fails(Collective::kReduceScatter)) return failed();
    return inner_->reduce_scatter_async(send, recv, std::move(counts), dtype);
  }
  CommHandle all_gather_async(void* buf, int64_t block, int64_t stride, DType dtype) override {
    if (fails(Collective::kAllGather)) return failed();
    return inner_->all_gather_async(buf, block, stride, dtype);
  }
  CommHandle broadcast_async(void* buf, int64_t count, DType dtype, int root) override {
    if (fails(Collective::kBroadcast)) return failed();
    return inner_->broadcast_async(buf, count, dtype, root);
  }
  CommHandle barrier_async() override { return inner_->barrier_async(); }
  CommHandle all_to_all_async(const void* send, void* recv, int64_t count, DType dtype) override {
    if (fails(Collective::kAllToAll)) return failed();
    return inner_->all_to_all_async(send, recv, count, dtype);
  }
  CommHandle all_to_all_v_async(const void* send, std::vector<int64_t> send_counts, std::vector<int64_t> send_displs,
                                void* recv, std::vector<int64_t> recv_counts, std::vector<int64_t> recv_displs,
                                DType dtype) override {
    if (fails(Collective::kAllToAllV)) return failed();
    return inner_->all_to_all_v_async(send, std::move(send_counts), std::move(send_displs), recv,
                                      std::move(recv_counts), std::move(recv_displs), dtype);
  }
  absl::Status all_reduce_doubles(double* values, int64_t count, ReduceOp op) override {
    return inner_->all_reduce_doubles(values, count, op);
  }
  absl::StatusOr<std::unique_ptr<Communicator>> split(int color, int key) override {
    return inner_->split(color, key);
  }
  CommHandle send_async(const void* buf, int64_t count, DType dtype, int peer) override {
    return inner_->send_async(buf, count, dtype, peer);
  }
  CommHandle recv_async(void* buf, int64_t count, DType dtype, int peer) override {
    return inner_->recv_async(buf, count, dtype, peer);
  }
  CommHandle send_recv_async(const void* send, int64_t send_count, void* recv, int64_t recv_count, DType dtype,
                             int peer) override {
    return inner_->send_recv_async(send, send_count, recv, recv_count, dtype, peer);
  }

 private:
  bool fails(Collective c) { return calls_[static_cast<int>(c)]++ == nth_ && c == which_; }
  CommHandle failed() { return completed_work(error_); }

  std::unique_ptr<Communicator> inner_;
  Collective which_;
  int nth_;
  absl::Status error_;
  int calls_[6] = {};
};

}  // namespace zero::testing
