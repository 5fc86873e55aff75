// The single-process communicator (no launcher): a world of one rank, where
// every collective leaves its buffers as they are. And what every
// communicator shares: completed handles, the peer check of send/receive, and
// the factory that picks MPI when the process was launched by mpirun.
#include <cstdlib>
#include <cstring>

#include "comm/mpi_communicator.h"
#include "core/check.h"
#include "core/strings.h"

namespace zero {

namespace {

class DoneWork final : public CommWork {
 public:
  explicit DoneWork(absl::Status s) : s_(std::move(s)) {}
  absl::Status wait() override { return s_; }
  bool done() const override { return true; }

 private:
  absl::Status s_;
};

class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string_view name() const override { return "local"; }
  CommHandle all_reduce_async(void*, int64_t, DType, ReduceOp) override { return done(); }
  CommHandle reduce_scatter_async(const void* send, void* recv, std::vector<int64_t> counts, DType dtype) override {
    ZE_CHECK_EQ(counts.size(), 1u);
    if (send != recv && counts[0] > 0) std::memmove(recv, send, static_cast<size_t>(counts[0]) * dtype_size(dtype));
    return done();
  }
  CommHandle all_gather_async(void*, int64_t, int64_t, DType) override { return done(); }
  CommHandle broadcast_async(void*, int64_t, DType, int) override { return done(); }
  CommHandle barrier_async() override { return done(); }
  absl::Status all_reduce_doubles(double*, int64_t, ReduceOp) override { return absl::OkStatus(); }
  absl::StatusOr<std::unique_ptr<Communicator>> split(int, int) override { return make_local_communicator(); }
  CommHandle send_async(const void*, int64_t, DType, int peer) override {
    return completed_work(check_peer("send to", peer));
  }
  CommHandle recv_async(void*, int64_t, DType, int peer) override {
    return completed_work(check_peer("receive from", peer));
  }
  CommHandle send_recv_async(const void*, int64_t, void*, int64_t, DType, int peer) override {
    return completed_work(check_peer("exchange with", peer));
  }

 private:
  static CommHandle done() { return completed_work(); }
};

}  // namespace

absl::Status Communicator::check_peer(std::string_view what, int peer) const {
  if (peer >= 0 && peer < world_size() && peer != rank()) return absl::OkStatus();
  return absl::InvalidArgumentError(cat(what, " rank ", peer, ": not a peer of rank ", rank(), " in a group of ",
                                        world_size(), world_size() == 1 ? " (launch more ranks with mpirun)" : ""));
}

CommHandle completed_work(absl::Status status) { return std::make_shared<DoneWork>(std::move(status)); }

std::unique_ptr<Communicator> make_local_communicator() { return std::make_unique<LocalCommunicator>(); }

absl::StatusOr<std::unique_ptr<Communicator>> create_communicator() {
  if (!launched_by_mpi()) return make_local_communicator();
  double timeout_s = 600.0;
  if (const char* t = std::getenv("ZE_COMM_TIMEOUT_S")) timeout_s = std::atof(t);
  absl::StatusOr<std::unique_ptr<MpiCommunicator>> mpi = MpiCommunicator::create(timeout_s);
  if (!mpi.ok()) return mpi.status();
  return std::unique_ptr<Communicator>(std::move(mpi).value());
}

}  // namespace zero
