// A communicator for tests that forwards every call to another one, for a
// test to override only what it watches or changes (an order probe, a
// communicator that refuses early receives). Groups split from it are the
// inner communicator's own unless the test overrides split(). Test builds
// only; the product never wraps its communicator.
#pragma once

#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "comm/communicator.h"

namespace zero::testing {

class ForwardingCommunicator : public Communicator {
 public:
  explicit ForwardingCommunicator(Communicator& inner) : inner_(inner) {}
  explicit ForwardingCommunicator(std::unique_ptr<Communicator> owned) : owned_(std::move(owned)), inner_(*owned_) {}

  int rank() const override { return inner_.rank(); }
  int world_size() const override { return inner_.world_size(); }
  int local_size() const override { return inner_.local_size(); }
  std::string_view name() const override { return inner_.name(); }
  bool allows_early_receives() const override { return inner_.allows_early_receives(); }
  CommHandle all_reduce_async(void* buf, int64_t count, DType dtype, ReduceOp op) override {
    return inner_.all_reduce_async(buf, count, dtype, op);
  }
  CommHandle reduce_scatter_async(const void* send, void* recv, std::vector<int64_t> counts, DType dtype) override {
    return inner_.reduce_scatter_async(send, recv, std::move(counts), dtype);
  }
  CommHandle all_gather_async(void* buf, int64_t block, int64_t stride, DType dtype) override {
    return inner_.all_gather_async(buf, block, stride, dtype);
  }
  CommHandle broadcast_async(void* buf, int64_t count, DType dtype, int root) override {
    return inner_.broadcast_async(buf, count, dtype, root);
  }
  CommHandle barrier_async() override { return inner_.barrier_async(); }
  CommHandle all_to_all_async(const void* send, void* recv, int64_t count, DType dtype) override {
    return inner_.all_to_all_async(send, recv, count, dtype);
  }
  CommHandle all_to_all_v_async(const void* send, std::vector<int64_t> send_counts, std::vector<int64_t> send_displs,
                                void* recv, std::vector<int64_t> recv_counts, std::vector<int64_t> recv_displs,
                                DType dtype) override {
    return inner_.all_to_all_v_async(send, std::move(send_counts), std::move(send_displs), recv,
                                     std::move(recv_counts), std::move(recv_displs), dtype);
  }
  absl::Status all_reduce_doubles(double* values, int64_t count, ReduceOp op) override {
    return inner_.all_reduce_doubles(values, count, op);
  }
  absl::StatusOr<std::unique_ptr<Communicator>> split(int color, int key) override { return inner_.split(color, key); }
  CommHandle send_async(const void* buf, int64_t count, DType dtype, int peer) override {
    return inner_.send_async(buf, count, dtype, peer);
  }
  CommHandle recv_async(void* buf, int64_t count, DType dtype, int peer) override {
    return inner_.recv_async(buf, count, dtype, peer);
  }
  CommHandle send_recv_async(const void* send, int64_t send_count, void* recv, int64_t recv_count, DType dtype,
                             int peer) override {
    return inner_.send_recv_async(send, send_count, recv, recv_count, dtype, peer);
  }

 protected:
  Communicator& inner() { return inner_; }

 private:
  std::unique_ptr<Communicator> owned_;  // a group's, when the test wraps one it split
  Communicator& inner_;
};

}  // namespace zero::testing
