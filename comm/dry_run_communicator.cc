// The dry-run communicator; see dry_run_communicator.h.
#include "comm/dry_run_communicator.h"

#include "core/check.h"

namespace zero {

namespace {

class DryRunCommunicator final : public Communicator {
 public:
  DryRunCommunicator(int rank, int world) : rank_(rank), world_(world) {
    ZE_CHECK(world >= 1 && rank >= 0 && rank < world) << "rank " << rank << " of " << world;
  }
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string_view name() const override { return "dry-run"; }
  CommHandle all_reduce_async(void*, int64_t count, DType dtype, ReduceOp) override {
    count_all_reduce(count, dtype);
    return done();
  }
  CommHandle reduce_scatter_async(const void*, void*, std::vector<int64_t> counts, DType dtype) override {
    ZE_CHECK_EQ(static_cast<int>(counts.size()), world_);
    count_reduce_scatter(counts, dtype);
    return done();
  }
  CommHandle all_gather_async(void*, int64_t block, int64_t stride, DType dtype) override {
    ZE_CHECK_GE(stride, block);
    count_all_gather(block, dtype);
    return done();
  }
  CommHandle broadcast_async(void*, int64_t count, DType dtype, int root) override {
    count_broadcast(count, dtype, root);
    return done();
  }
  CommHandle barrier_async() override { return done(); }
  CommHandle all_to_all_async(const void*, void*, int64_t count, DType dtype) override {
    ZE_CHECK_GE(count, 0);
    count_all_to_all(count, dtype);
    return done();
  }
  CommHandle all_to_all_v_async(const void*, std::vector<int64_t> send_counts, std::vector<int64_t> send_displs,
                                void*, std::vector<int64_t> recv_counts, std::vector<int64_t> recv_displs,
                                DType dtype) override {
    check_all_to_all_v(send_counts, send_displs, recv_counts, recv_displs);
    count_all_to_all_v(send_counts, dtype);
    return done();
  }
  absl::Status all_reduce_doubles(double*, int64_t, ReduceOp) override { return absl::OkStatus(); }
  // A dry run plays one rank and knows no other rank's color, so it cannot
  // form groups (a data-only mesh needs none).
  absl::StatusOr<std::unique_ptr<Communicator>> split(int, int) override {
    return absl::UnimplementedError("a dry-run communicator plays one rank and cannot split into groups");
  }
  CommHandle send_async(const void*, int64_t count, DType dtype, int peer) override {
    if (absl::Status s = check_peer("send to", peer); !s.ok()) return completed_work(s);
    count_send(count, dtype);
    return done();
  }
  CommHandle recv_async(void*, int64_t, DType, int peer) override {
    return completed_work(check_peer("receive from", peer));
  }
  CommHandle send_recv_async(const void*, int64_t send_count, void*, int64_t, DType dtype, int peer) override {
    if (absl::Status s = check_peer("exchange with", peer); !s.ok()) return completed_work(s);
    count_send(send_count, dtype);
    return done();
  }
  // Every transfer completes at once; see the header for the plan it gives.
  bool allows_early_receives() const override { return true; }

 private:
  static CommHandle done() { return completed_work(); }
  int rank_, world_;
};

}  // namespace

std::unique_ptr<Communicator> make_dry_run_communicator(int rank, int world) {
  return std::make_unique<DryRunCommunicator>(rank, world);
}

}  // namespace zero
