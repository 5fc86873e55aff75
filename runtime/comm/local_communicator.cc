// The single-process communicator (no launcher): a world of one rank, where
// every collective leaves its buffers as they are. And the factory that picks
// MPI when the process was launched by mpirun.
#include <cstdlib>
#include <cstring>

#include "runtime/base/check.h"
#include "runtime/comm/mpi_communicator.h"

namespace zero {

namespace {

class DoneWork final : public CommWork {
 public:
  absl::Status wait() override { return absl::OkStatus(); }
  bool done() const override { return true; }
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

 private:
  static CommHandle done() { return completed_work(); }
};

}  // namespace

CommHandle completed_work() { return std::make_shared<DoneWork>(); }

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
