// The CUDA backend: one device, its memory through caching allocators, CUDA
// streams and events one to one with the Backend model, ops from kernels/cuda
// (cuBLAS + our kernels).
//
// Memory. Device tier: cudaMalloc; host tier: pinned memory (cudaHostAlloc),
// so host <-> device copies are truly asynchronous. Both go through a
// CudaCachingAllocator: freed blocks are kept, keyed by their size, and
// count as reserved (MemoryTracker), as the host allocator does; a request
// takes the smallest cached block that fits with at most an eighth to spare. A freed block
// is not handed out again until the compute stream has passed the point where
// it was freed (an event recorded at deallocation). That is what makes it safe
// to drop a tensor right after launching the ops that read it, as engine code
// written against the synchronous CPU backend does, and then to reuse its
// memory on any stream. Work on other streams is covered by the Backend
// ownership rule: a buffer is freed only after the events of its copies have
// completed. release_cached() returns cached blocks to the driver.
//
// Streams. Stream 0 (the compute stream, where ops run) and every stream from
// create_stream() are non-blocking CUDA streams, i.e. they do not synchronise
// with the legacy default stream. cuda_stream() exposes the handle for
// libraries that take one (NCCL).
//
// Any host thread may call any method; each makes the device current first.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <map>
#include <unordered_map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace zero {

namespace cuda {
class CudaOps;
}

// True when the CUDA runtime sees at least one device (false, not an error,
// without a driver or a GPU).
bool cuda_device_available();

// Size-keyed caching allocator over cudaMalloc (Tier::kDevice) or pinned
// cudaHostAlloc (Tier::kHost); see the top of this file for the reuse rule.
class CudaCachingAllocator final : public RawAllocator {
 public:
  // `release_stream`: the stream whose progress gates the reuse of freed blocks.
  CudaCachingAllocator(Tier tier, int device, cudaStream_t release_stream);
  ~CudaCachingAllocator() override;
  CudaCachingAllocator(const CudaCachingAllocator&) = delete;
  CudaCachingAllocator& operator=(const CudaCachingAllocator&) = delete;

  Tier tier() const override { return tier_; }
  // nullptr when the driver has no memory left even after the cache is emptied.
  void* allocate(size_t bytes, size_t alignment) override;
  void deallocate(void* ptr, size_t bytes) override;
  void release_cached() override;

  // Bytes held in the cache (freed, waiting or ready for reuse).
  size_t cached_bytes() const;
  // Blocks currently obtained from the driver (cudaMalloc / cudaHostAlloc
  // calls not yet freed), in use or cached. The driver maps device memory in
  // whole pages, so this bounds how far cudaMemGetInfo may exceed the
  // tracked reserved bytes.
  size_t driver_blocks() const;

 private:
  struct PendingBlock {
    void* ptr;
    size_t size;
    cudaEvent_t released;  // recorded on the release stream at deallocation
  };

  size_t rounded_size(size_t bytes) const;
  void* driver_allocate(size_t size);
  void driver_free(void* ptr, size_t size);
  // Moves pending blocks whose event has completed to the free lists; with
  // `wait`, waits for all of them.
  void collect_pending_locked(bool wait);
  // The smallest cached block of at least `size` bytes and at most
  // max_fit(size): best fit, so blocks freed at one size serve a slightly
  // smaller one (a mixture of experts' rows change every step).
  void* take_cached_locked(size_t size);
  size_t max_fit(size_t size) const;
  void free_cached_locked();

  const Tier tier_;
  const int device_;
  const cudaStream_t release_stream_;
  mutable std::mutex mu_;
  std::vector<PendingBlock> pending_;                  // in release order
  std::map<size_t, std::vector<void*>> free_blocks_;  // block size -> blocks
  std::unordered_map<void*, size_t> block_size_;      // every driver block, in use or cached
  std::vector<cudaEvent_t> spare_events_;
  size_t cached_bytes_ = 0;
  size_t driver_blocks_ = 0;
};

class CudaBackend final : public Backend {
 public:
  // Fails with FAILED_PRECONDITION (no driver, no device) or INVALID_ARGUMENT
  // (no such device), naming the CUDA error.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> create(int device = 0);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string_view name() const override { return name_; }
  std::string description() const override { return description_; }
  Tier compute_tier() const override { return Tier::kDevice; }
  // cudaMemGetInfo's total - free on this device (the driver's figure).
  std::optional<int64_t> device_memory_in_use() override;
  // The device-tier allocator's live cudaMalloc blocks (see
  // CudaCachingAllocator::driver_blocks).
  size_t device_driver_blocks() const { return device_memory_->driver_blocks(); }
  // Host-side state beside the GPU (ZeRO-Offload, cpu_checkpointing) lives
  // on a CPU backend.
  std::unique_ptr<Backend> make_host_backend() override;
  Ops& ops() override;
  cuda::CudaOps& cuda_ops() { return *ops_; }
  int device() const { return device_; }
  cudaStream_t cuda_stream(StreamId id) const;

  StreamId create_stream() override;
  EventPtr record_event(StreamId stream) override;
  void wait_event(StreamId stream, const EventPtr& event) override;
  void synchronize(const EventPtr& event) override;
  void synchronize_stream(StreamId stream) override;
  // cudaMemcpyAsync with cudaMemcpyDefault: any pair of device, pinned or
  // pageable host pointers (pageable host memory makes the copy synchronous
  // with respect to the host, as CUDA documents).
  void copy_async(void* dst, const void* src, size_t bytes, StreamId stream) override;

 protected:
  RawAllocator* raw_allocator(Tier tier) override;

 private:
  explicit CudaBackend(int device);
  void enter() const;

  const int device_;
  const std::string name_;
  std::string description_;
  mutable std::mutex streams_mu_;
  std::vector<cudaStream_t> streams_;  // index = StreamId; [0] = compute stream
  std::unique_ptr<CudaCachingAllocator> device_memory_;
  std::unique_ptr<CudaCachingAllocator> pinned_memory_;
  std::unique_ptr<cuda::CudaOps> ops_;
};

}  // namespace zero
