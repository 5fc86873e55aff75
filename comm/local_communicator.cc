// The single-process communicator (no launcher): a world of one rank, where
// every collective leaves its buffers as they are (those with a separate
// receive buffer, reduce-scatter and all-to-all, copy into it). With a CommLog attached it
// records each collective with its measured (tiny) time, as DeepSpeed does on
// one GPU, so a single-rank run's summary still lists what the engine issued,
// how often and how large: busbw is 0 there (no other rank: the factor
// (n-1)/n is 0), and algbw is a memory rate, not a network one. And what every
// communicator shares: completed handles, the peer check of send/receive, and
// the factory that picks MPI when the process was launched by mpirun, and
// the process-wide count of seconds spent waiting for communication.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <utility>

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
  CommHandle all_reduce_async(void*, int64_t count, DType dtype, ReduceOp) override {
    return run(CommOp::kAllReduce, message_bytes(count, dtype), [] {});
  }
  CommHandle reduce_scatter_async(const void* send, void* recv, std::vector<int64_t> counts, DType dtype) override {
    ZE_CHECK_EQ(counts.size(), 1u);
    return run(CommOp::kReduceScatter, message_bytes(counts[0], dtype), [&] {
      if (send != recv && counts[0] > 0) std::memmove(recv, send, static_cast<size_t>(counts[0]) * dtype_size(dtype));
    });
  }
  CommHandle all_gather_async(void*, int64_t block, int64_t, DType dtype) override {
    return run(CommOp::kAllGather, message_bytes(block, dtype), [] {});
  }
  CommHandle broadcast_async(void*, int64_t count, DType dtype, int) override {
    return run(CommOp::kBroadcast, message_bytes(count, dtype), [] {});
  }
  CommHandle barrier_async() override { return run(CommOp::kBarrier, 0, [] {}); }
  CommHandle all_to_all_async(const void* send, void* recv, int64_t count, DType dtype) override {
    ZE_CHECK_GE(count, 0);
    return run(CommOp::kAllToAll, message_bytes(count, dtype), [&] { copy(send, recv, count, dtype); });
  }
  CommHandle all_to_all_v_async(const void* send, std::vector<int64_t> send_counts, std::vector<int64_t> send_displs,
                                void* recv, std::vector<int64_t> recv_counts, std::vector<int64_t> recv_displs,
                                DType dtype) override {
    check_all_to_all_v(send_counts, send_displs, recv_counts, recv_displs);
    ZE_CHECK_EQ(send_counts[0], recv_counts[0]) << "all_to_all_v on one rank: it sends itself what it receives";
    const int64_t es = static_cast<int64_t>(dtype_size(dtype));
    return run(CommOp::kAllToAllV, message_bytes(send_counts[0], dtype), [&] {
      copy(static_cast<const char*>(send) + send_displs[0] * es, static_cast<char*>(recv) + recv_displs[0] * es,
           send_counts[0], dtype);
    });
  }
  absl::Status all_reduce_doubles(double*, int64_t count, ReduceOp) override {
    return run(CommOp::kAllReduceScalars, count * static_cast<int64_t>(sizeof(double)), [] {})->wait();
  }
  absl::StatusOr<std::unique_ptr<Communicator>> split(int, int) override {
    std::unique_ptr<Communicator> c = make_local_communicator();
    c->set_log(log());
    return c;
  }
  CommHandle send_async(const void*, int64_t, DType, int peer) override {
    return completed_work(check_peer("send to", peer));
  }
  CommHandle recv_async(void*, int64_t, DType, int peer) override {
    return completed_work(check_peer("receive from", peer));
  }
  CommHandle send_recv_async(const void*, int64_t, void*, int64_t, DType, int peer) override {
    return completed_work(check_peer("exchange with", peer));
  }
  // Every transfer completes (refused: there is no peer) at once.
  bool allows_early_receives() const override { return true; }

 private:
  static CommHandle done() { return completed_work(); }
  static void copy(const void* from, void* to, int64_t count, DType dtype) {
    if (from != to && count > 0) std::memmove(to, from, static_cast<size_t>(count) * dtype_size(dtype));
  }
  // Runs fn, timed and recorded when a log records `op`.
  template <typename F>
  CommHandle run(CommOp op, int64_t message_bytes, F fn) {
    CommLog* log = log_for(op);
    if (log == nullptr) {
      fn();
      return done();
    }
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    log->record(op, message_bytes, 1, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                log_group());
    return done();
  }
};

}  // namespace

absl::Status Communicator::check_peer(std::string_view what, int peer) const {
  if (peer >= 0 && peer < world_size() && peer != rank()) return absl::OkStatus();
  return absl::InvalidArgumentError(cat(what, " rank ", peer, ": not a peer of rank ", rank(), " in a group of ",
                                        world_size(), world_size() == 1 ? " (launch more ranks with mpirun)" : ""));
}

void Communicator::check_all_to_all_v(const std::vector<int64_t>& send_counts, const std::vector<int64_t>& send_displs,
                                      const std::vector<int64_t>& recv_counts,
                                      const std::vector<int64_t>& recv_displs) const {
  const std::pair<const char*, const std::vector<int64_t>*> lists[] = {
      {"send_counts", &send_counts}, {"send_displs", &send_displs},
      {"recv_counts", &recv_counts}, {"recv_displs", &recv_displs}};
  for (const auto& [what, list] : lists) {
    ZE_CHECK_EQ(static_cast<int>(list->size()), world_size()) << "all_to_all_v " << what << ": one per rank";
    for (int64_t v : *list) ZE_CHECK_GE(v, 0) << "all_to_all_v " << what;
  }
}

CommHandle completed_work(absl::Status status) { return std::make_shared<DoneWork>(std::move(status)); }

namespace {
std::atomic<int64_t> g_comm_wait_ns{0};
std::atomic<CommTimeoutHandler> g_timeout_handler{nullptr};
}  // namespace

void set_comm_timeout_handler(CommTimeoutHandler handler) { g_timeout_handler.store(handler); }

absl::Status comm_gave_up(absl::Status error) {
  if (const CommTimeoutHandler handler = g_timeout_handler.load()) handler(error);
  return error;
}

double comm_wait_seconds() { return static_cast<double>(g_comm_wait_ns.load(std::memory_order_relaxed)) * 1e-9; }

void add_comm_wait_seconds(double seconds) {
  g_comm_wait_ns.fetch_add(static_cast<int64_t>(seconds * 1e9), std::memory_order_relaxed);
}

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
