// NCCL collectives; see nccl_communicator.h.
#include "comm/nccl_communicator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "core/check.h"
#include "core/status.h"
#include "core/strings.h"

namespace zero {

namespace {

// The one place NCCL and CUDA return codes become Status.
absl::Status nccl_status(ncclResult_t r, const char* call) {
  if (r == ncclSuccess) return absl::OkStatus();
  return absl::UnavailableError(cat(call, " failed: ", ncclGetErrorString(r)));
}
absl::Status cuda_status(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::UnavailableError(cat(call, " failed: ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"));
}
#define ZE_NCCL_CHECK(expr) ZE_CHECK_OK(nccl_status((expr), #expr))
#define ZE_CUDA_CHECK_OK(expr) ZE_CHECK_OK(cuda_status((expr), #expr))

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    case DType::kI32: return ncclInt32;
  }
  return ncclFloat32;
}

char* at(void* p, int64_t elems, DType t) { return static_cast<char*>(p) + elems * static_cast<int64_t>(dtype_size(t)); }


// What a logged collective records once it is complete.
struct EventTiming {
  cudaEvent_t start;  // timing-enabled, recorded on the comm stream just before the launch
  CommLog* log;
  CommOp op;
  int64_t message_bytes;
  int world_size;
  std::string group;
};

class EventWork final : public CommWork {
 public:
  // `event` is recorded after the launch; with `timing` it is timing-enabled.
  // `aborted` is the communicator's: set by the first wait that aborts it
  // (the communicator then does not destroy it again).
  EventWork(cudaEvent_t e, ncclComm_t comm, std::shared_ptr<std::atomic<bool>> aborted, std::string what,
            double timeout_s, std::unique_ptr<EventTiming> timing = nullptr)
      : event_(e),
        comm_(comm),
        aborted_(std::move(aborted)),
        what_(std::move(what)),
        timeout_s_(timeout_s),
        timing_(std::move(timing)) {}
  ~EventWork() override {
    if (timing_ != nullptr) {
      // A handle dropped without a wait still counts, when its work is done.
      if (cudaEventQuery(event_) == cudaSuccess) record_once();
      cudaEventDestroy(timing_->start);
    }
    cudaEventDestroy(event_);
  }
  bool done() const override {
    if (cudaEventQuery(event_) != cudaSuccess) return false;
    record_once();
    return true;
  }
  absl::Status wait() override {
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      const cudaError_t q = cudaEventQuery(event_);
      if (q == cudaSuccess) {
        record_once();
        add_comm_wait_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        return absl::OkStatus();
      }
      if (q != cudaErrorNotReady) return cuda_status(q, what_.c_str());
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess) {
        abort_once();
        return comm_gave_up(nccl_status(async, what_.c_str()));
      }
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s_) {
        abort_once();
        return comm_gave_up(absl::DeadlineExceededError(cat(what_, " did not finish within ", timeout_s_,
                                                            " s: a peer rank is not responding")));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

 private:
  void abort_once() const {
    if (!aborted_->exchange(true)) ncclCommAbort(comm_);
  }
  // Records the start-to-finish time on the comm stream, the first time
  // the work is seen complete (waits and done() may race: once only).
  void record_once() const {
    if (timing_ == nullptr || recorded_.exchange(true)) return;
    float ms = 0;
    if (cudaEventElapsedTime(&ms, timing_->start, event_) != cudaSuccess) return;
    timing_->log->record(timing_->op, timing_->message_bytes, timing_->world_size, static_cast<double>(ms) / 1e3,
                         timing_->group);
  }

  cudaEvent_t event_;
  ncclComm_t comm_;
  std::shared_ptr<std::atomic<bool>> aborted_;
  std::string what_;
  double timeout_s_;
  std::unique_ptr<EventTiming> timing_;
  mutable std::atomic<bool> recorded_{false};
};

}  // namespace

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create(std::unique_ptr<Communicator> bootstrap,
                                                                           int device, cudaStream_t compute_stream,
                                                                           double timeout_s) {
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator());
  c->bootstrap_ = std::move(bootstrap);
  c->device_ = device;
  c->compute_ = compute_stream;
  c->timeout_s_ = timeout_s;
  ncclUniqueId id;
  if (c->bootstrap_->rank() == 0) ZE_RETURN_IF_ERROR(nccl_status(ncclGetUniqueId(&id), "ncclGetUniqueId"));
  static_assert(sizeof(ncclUniqueId) % 4 == 0);
  ZE_RETURN_IF_ERROR(c->bootstrap_->broadcast(&id, sizeof(id) / 4, DType::kI32, 0));
  ZE_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device), "cudaSetDevice"));
  ZE_RETURN_IF_ERROR(cuda_status(cudaStreamCreateWithFlags(&c->stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
  ZE_RETURN_IF_ERROR(nccl_status(ncclCommInitRank(&c->comm_, c->bootstrap_->world_size(), id, c->bootstrap_->rank()),
                                 "ncclCommInitRank"));
  return c;
}

NcclCommunicator::~NcclCommunicator() {
  // A wait that gave up has aborted it already (ncclCommAbort frees it).
  if (comm_ != nullptr && !aborted_->load()) ncclCommDestroy(comm_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

template <typename Launch>
CommHandle NcclCommunicator::run(const char* what, CommOp op, int64_t message_bytes, Launch launch) {
  ZE_CUDA_CHECK_OK(cudaSetDevice(device_));
  cudaEvent_t ready, finished;
  ZE_CUDA_CHECK_OK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  ZE_CUDA_CHECK_OK(cudaEventRecord(ready, compute_));
  ZE_CUDA_CHECK_OK(cudaStreamWaitEvent(stream_, ready, 0));
  ZE_CUDA_CHECK_OK(cudaEventDestroy(ready));
  std::unique_ptr<EventTiming> timing;
  if (CommLog* log = log_for(op)) {
    // After the wait on the compute stream: the time starts when the comm
    // stream reaches the collective, not when it was queued.
    timing.reset(new EventTiming{nullptr, log, op, message_bytes, world_size(), log_group()});
    ZE_CUDA_CHECK_OK(cudaEventCreateWithFlags(&timing->start, cudaEventDefault));
    ZE_CUDA_CHECK_OK(cudaEventRecord(timing->start, stream_));
  }
  launch();
  ZE_CUDA_CHECK_OK(cudaEventCreateWithFlags(&finished, timing != nullptr ? cudaEventDefault : cudaEventDisableTiming));
  ZE_CUDA_CHECK_OK(cudaEventRecord(finished, stream_));
  return std::make_shared<EventWork>(finished, comm_, aborted_, what, timeout_s_, std::move(timing));
}

CommHandle NcclCommunicator::all_reduce_async(void* buf, int64_t count, DType dtype, ReduceOp op) {
  count_all_reduce(count, dtype);
  return run("ncclAllReduce", CommOp::kAllReduce, message_bytes(count, dtype), [&] {
    ZE_NCCL_CHECK(ncclAllReduce(buf, buf, static_cast<size_t>(count), nccl_type(dtype),
                                op == ReduceOp::kSum ? ncclSum : ncclMax, comm_, stream_));
  });
}

CommHandle NcclCommunicator::reduce_scatter_async(const void* send, void* recv, std::vector<int64_t> counts,
                                                  DType dtype) {
  count_reduce_scatter(counts, dtype);
  const bool even = std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts[0]; });
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  return run("reduce_scatter", CommOp::kReduceScatter, message_bytes(total, dtype), [&] {
    if (even) {
      ZE_NCCL_CHECK(ncclReduceScatter(send, recv, static_cast<size_t>(counts[0]), nccl_type(dtype), ncclSum, comm_,
                                      stream_));
      return;
    }
    // Uneven parts: one reduce per owner, grouped into a single launch.
    ZE_NCCL_CHECK(ncclGroupStart());
    int64_t offset = 0;
    for (int r = 0; r < world_size(); ++r) {
      if (counts[r] > 0) {
        ZE_NCCL_CHECK(ncclReduce(at(const_cast<void*>(send), offset, dtype), r == rank() ? recv : nullptr,
                                 static_cast<size_t>(counts[r]), nccl_type(dtype), ncclSum, r, comm_, stream_));
      }
      offset += counts[r];
    }
    ZE_NCCL_CHECK(ncclGroupEnd());
  });
}

CommHandle NcclCommunicator::all_gather_async(void* buf, int64_t block, int64_t stride, DType dtype) {
  count_all_gather(block, dtype);
  return run("all_gather", CommOp::kAllGather, message_bytes(block * world_size(), dtype), [&] {
    if (stride == block) {
      ZE_NCCL_CHECK(ncclAllGather(at(buf, rank() * block, dtype), buf, static_cast<size_t>(block), nccl_type(dtype),
                                  comm_, stream_));
      return;
    }
    // Strided blocks: every rank broadcasts its block in place, grouped.
    ZE_NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < world_size(); ++r) {
      char* p = at(buf, r * stride, dtype);
      ZE_NCCL_CHECK(ncclBroadcast(p, p, static_cast<size_t>(block), nccl_type(dtype), r, comm_, stream_));
    }
    ZE_NCCL_CHECK(ncclGroupEnd());
  });
}

CommHandle NcclCommunicator::all_to_all_async(const void* send, void* recv, int64_t count, DType dtype) {
  ZE_CHECK_GE(count, 0);
  count_all_to_all(count, dtype);
  return run("all_to_all", CommOp::kAllToAll, message_bytes(count * world_size(), dtype), [&] {
    if (count == 0) return;
    // PyTorch's all_to_all on NCCL: a send and a receive with every rank
    // (this one included), grouped into a single launch.
    ZE_NCCL_CHECK(ncclGroupStart());
    for (int q = 0; q < world_size(); ++q) {
      ZE_NCCL_CHECK(ncclSend(at(const_cast<void*>(send), q * count, dtype), static_cast<size_t>(count),
                             nccl_type(dtype), q, comm_, stream_));
      ZE_NCCL_CHECK(ncclRecv(at(recv, q * count, dtype), static_cast<size_t>(count), nccl_type(dtype), q, comm_,
                             stream_));
    }
    ZE_NCCL_CHECK(ncclGroupEnd());
  });
}

CommHandle NcclCommunicator::all_to_all_v_async(const void* send, std::vector<int64_t> send_counts,
                                                std::vector<int64_t> send_displs, void* recv,
                                                std::vector<int64_t> recv_counts, std::vector<int64_t> recv_displs,
                                                DType dtype) {
  check_all_to_all_v(send_counts, send_displs, recv_counts, recv_displs);
  count_all_to_all_v(send_counts, dtype);
  int64_t total = 0;
  for (int64_t c : send_counts) total += c;
  return run("all_to_all_v", CommOp::kAllToAllV, message_bytes(total, dtype), [&] {
    // As PyTorch's uneven all_to_all_single: only the non-empty parts.
    ZE_NCCL_CHECK(ncclGroupStart());
    for (int q = 0; q < world_size(); ++q) {
      if (send_counts[q] > 0) {
        ZE_NCCL_CHECK(ncclSend(at(const_cast<void*>(send), send_displs[q], dtype),
                               static_cast<size_t>(send_counts[q]), nccl_type(dtype), q, comm_, stream_));
      }
      if (recv_counts[q] > 0) {
        ZE_NCCL_CHECK(ncclRecv(at(recv, recv_displs[q], dtype), static_cast<size_t>(recv_counts[q]),
                               nccl_type(dtype), q, comm_, stream_));
      }
    }
    ZE_NCCL_CHECK(ncclGroupEnd());
  });
}

CommHandle NcclCommunicator::broadcast_async(void* buf, int64_t count, DType dtype, int root) {
  count_broadcast(count, dtype, root);
  return run("ncclBroadcast", CommOp::kBroadcast, message_bytes(count, dtype), [&] {
    ZE_NCCL_CHECK(ncclBroadcast(buf, buf, static_cast<size_t>(count), nccl_type(dtype), root, comm_, stream_));
  });
}

CommHandle NcclCommunicator::barrier_async() {
  // A device-side barrier: everyone's stream passes a tiny all-reduce.
  return bootstrap_->barrier_async();
}

absl::StatusOr<std::unique_ptr<Communicator>> NcclCommunicator::split(int color, int key) {
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator());
  ZE_ASSIGN_OR_RETURN(c->bootstrap_, bootstrap_->split(color, key));
  c->device_ = device_;
  c->compute_ = compute_;
  c->timeout_s_ = timeout_s_;
  ZE_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device_), "cudaSetDevice"));
  ZE_RETURN_IF_ERROR(cuda_status(cudaStreamCreateWithFlags(&c->stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
  ZE_RETURN_IF_ERROR(nccl_status(ncclCommSplit(comm_, color, key, &c->comm_, nullptr), "ncclCommSplit"));
  c->inherit_log(*this);
  return std::unique_ptr<Communicator>(std::move(c));
}

CommHandle NcclCommunicator::send_async(const void* buf, int64_t count, DType dtype, int peer) {
  if (absl::Status s = check_peer("send to", peer); !s.ok()) return completed_work(s);
  count_send(count, dtype);
  return run("ncclSend", CommOp::kSend, message_bytes(count, dtype), [&] {
    ZE_NCCL_CHECK(ncclSend(buf, static_cast<size_t>(count), nccl_type(dtype), peer, comm_, stream_));
  });
}

CommHandle NcclCommunicator::recv_async(void* buf, int64_t count, DType dtype, int peer) {
  if (absl::Status s = check_peer("receive from", peer); !s.ok()) return completed_work(s);
  return run("ncclRecv", CommOp::kRecv, message_bytes(count, dtype), [&] {
    ZE_NCCL_CHECK(ncclRecv(buf, static_cast<size_t>(count), nccl_type(dtype), peer, comm_, stream_));
  });
}

CommHandle NcclCommunicator::send_recv_async(const void* send, int64_t send_count, void* recv, int64_t recv_count,
                                             DType dtype, int peer) {
  if (absl::Status s = check_peer("exchange with", peer); !s.ok()) return completed_work(s);
  count_send(send_count, dtype);
  return run("ncclSend/ncclRecv", CommOp::kSendRecv, message_bytes(std::max(send_count, recv_count), dtype), [&] {
    ZE_NCCL_CHECK(ncclGroupStart());
    ZE_NCCL_CHECK(ncclSend(send, static_cast<size_t>(send_count), nccl_type(dtype), peer, comm_, stream_));
    ZE_NCCL_CHECK(ncclRecv(recv, static_cast<size_t>(recv_count), nccl_type(dtype), peer, comm_, stream_));
    ZE_NCCL_CHECK(ncclGroupEnd());
  });
}

}  // namespace zero
