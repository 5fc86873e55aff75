// CUDA backend and its caching allocator; see cuda_backend.h.
#include "kernels/cuda/cuda_backend.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "core/strings.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"

namespace zero {

namespace {

void make_current(int device) {
  int current = -1;
  ZE_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device) ZE_CUDA_CHECK(cudaSetDevice(device));
}

// Device blocks: cudaMalloc aligns to 256 bytes; rounding to 512 lets nearby
// sizes share cached blocks. Pinned host blocks are whole pages anyway. A
// request takes the smallest cached block that fits with at most an eighth
// (and at least one unit) to spare: exact sizes only let a run whose sizes
// change (a mixture of experts' rows per expert, a last partial batch) grow
// the cache until the driver has nothing left, then empty it.
constexpr size_t kDeviceRoundBytes = 512;
constexpr size_t kHostRoundBytes = 4096;
constexpr size_t kDeviceMaxAlignment = 256;
constexpr size_t kHostMaxAlignment = 4096;

class CudaEvent final : public Event {
 public:
  explicit CudaEvent(int device) : device_(device) {
    ZE_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
  }
  ~CudaEvent() override { cudaEventDestroy(event_); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  bool query() const override {
    make_current(device_);
    const cudaError_t err = cudaEventQuery(event_);
    if (err == cudaErrorNotReady) return false;
    ZE_CUDA_CHECK(err);
    return true;
  }
  cudaEvent_t get() const { return event_; }

 private:
  int device_;
  cudaEvent_t event_ = nullptr;
};

const CudaEvent& cuda_event(const EventPtr& event) {
  const auto* e = dynamic_cast<const CudaEvent*>(event.get());
  ZE_CHECK(e != nullptr) << "event does not come from a CUDA backend";
  return *e;
}

}  // namespace

bool cuda_device_available() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky; clear it so later checks do not see it
    return false;
  }
  return count > 0;
}

// ---------------------------------------------------------------- allocator

CudaCachingAllocator::CudaCachingAllocator(Tier tier, int device, cudaStream_t release_stream)
    : tier_(tier), device_(device), release_stream_(release_stream) {
  ZE_CHECK(tier == Tier::kDevice || tier == Tier::kHost) << tier_name(tier);
}

CudaCachingAllocator::~CudaCachingAllocator() {
  release_cached();
  std::lock_guard<std::mutex> lock(mu_);
  for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
  spare_events_.clear();
}

size_t CudaCachingAllocator::rounded_size(size_t bytes) const {
  const size_t unit = tier_ == Tier::kDevice ? kDeviceRoundBytes : kHostRoundBytes;
  if (bytes == 0) bytes = 1;
  return (bytes + unit - 1) / unit * unit;
}

void* CudaCachingAllocator::driver_allocate(size_t size) {
  void* p = nullptr;
  const cudaError_t err =
      tier_ == Tier::kDevice ? cudaMalloc(&p, size) : cudaHostAlloc(&p, size, cudaHostAllocDefault);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // out of memory is not sticky; clear it for later checks
    return nullptr;
  }
  ZE_CUDA_CHECK(err);
  MemoryTracker::global().add_reserved(tier_, static_cast<int64_t>(size));
  ++driver_blocks_;
  block_size_[p] = size;
  return p;
}

void CudaCachingAllocator::driver_free(void* ptr, size_t size) {
  ZE_CUDA_CHECK(tier_ == Tier::kDevice ? cudaFree(ptr) : cudaFreeHost(ptr));
  MemoryTracker::global().add_reserved(tier_, -static_cast<int64_t>(size));
  --driver_blocks_;
  block_size_.erase(ptr);
}

void CudaCachingAllocator::collect_pending_locked(bool wait) {
  size_t done = 0;
  for (; done < pending_.size(); ++done) {
    PendingBlock& b = pending_[done];
    if (wait) {
      ZE_CUDA_CHECK(cudaEventSynchronize(b.released));
    } else {
      const cudaError_t err = cudaEventQuery(b.released);
      if (err == cudaErrorNotReady) break;  // events on one stream complete in order
      ZE_CUDA_CHECK(err);
    }
    free_blocks_[b.size].push_back(b.ptr);
    spare_events_.push_back(b.released);
  }
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(done));
}

size_t CudaCachingAllocator::max_fit(size_t size) const {
  return size + std::max(size / 8, tier_ == Tier::kDevice ? kDeviceRoundBytes : kHostRoundBytes);
}

void* CudaCachingAllocator::take_cached_locked(size_t size) {
  for (auto it = free_blocks_.lower_bound(size); it != free_blocks_.end() && it->first <= max_fit(size); ++it) {
    if (it->second.empty()) continue;
    void* p = it->second.back();
    it->second.pop_back();
    cached_bytes_ -= it->first;
    if (it->second.empty()) free_blocks_.erase(it);
    return p;  // stays reserved: it was never returned to the driver
  }
  return nullptr;
}

void CudaCachingAllocator::free_cached_locked() {
  for (auto& [size, blocks] : free_blocks_) {
    for (void* p : blocks) {
      driver_free(p, size);
      cached_bytes_ -= size;
    }
  }
  free_blocks_.clear();
}

void* CudaCachingAllocator::allocate(size_t bytes, size_t alignment) {
  const size_t max_alignment = tier_ == Tier::kDevice ? kDeviceMaxAlignment : kHostMaxAlignment;
  ZE_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0 && alignment <= max_alignment)
      << "alignment " << alignment << " on " << tier_name(tier_);
  const size_t size = rounded_size(bytes);
  make_current(device_);
  std::lock_guard<std::mutex> lock(mu_);
  collect_pending_locked(/*wait=*/false);
  if (void* p = take_cached_locked(size)) return p;
  if (void* p = driver_allocate(size)) return p;
  // Out of memory: wait for every released block, try the cache again, then
  // give all cached blocks back to the driver and retry once.
  collect_pending_locked(/*wait=*/true);
  if (void* p = take_cached_locked(size)) return p;
  free_cached_locked();
  return driver_allocate(size);
}

void CudaCachingAllocator::deallocate(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  make_current(device_);
  std::lock_guard<std::mutex> lock(mu_);
  // The block's own size, which a best fit may have made larger than asked.
  const auto known = block_size_.find(ptr);
  ZE_CHECK(known != block_size_.end() && known->second >= rounded_size(bytes))
      << "deallocate of " << bytes << " bytes at " << ptr << ": not a block of this allocator";
  const size_t size = known->second;
  cudaEvent_t released = nullptr;
  if (!spare_events_.empty()) {
    released = spare_events_.back();
    spare_events_.pop_back();
  } else {
    ZE_CUDA_CHECK(cudaEventCreateWithFlags(&released, cudaEventDisableTiming));
  }
  ZE_CUDA_CHECK(cudaEventRecord(released, release_stream_));
  pending_.push_back({ptr, size, released});
  cached_bytes_ += size;
}

void CudaCachingAllocator::release_cached() {
  make_current(device_);
  std::lock_guard<std::mutex> lock(mu_);
  collect_pending_locked(/*wait=*/true);
  free_cached_locked();
}

size_t CudaCachingAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_bytes_;
}

size_t CudaCachingAllocator::driver_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return driver_blocks_;
}

// ---------------------------------------------------------------- backend

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::create(int device) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return cuda::cuda_status(err, "cudaGetDeviceCount");
  }
  if (count == 0) {
    return absl::FailedPreconditionError(
        "no CUDA device is visible (cudaGetDeviceCount reports 0); check nvidia-smi and "
        "CUDA_VISIBLE_DEVICES");
  }
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(
        cat("CUDA device ", device, " does not exist: ", count, " device(s) visible (0..",
            count - 1, ")"));
  }
  ZE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  ZE_CUDA_RETURN_IF_ERROR(cudaFree(nullptr));  // creates the context now, so failures surface here

  std::unique_ptr<CudaBackend> backend(new CudaBackend(device));
  cudaDeviceProp prop{};
  ZE_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device));
  backend->description_ =
      absl::StrFormat("%s (%s, %.1f GiB, sm_%d%d)", backend->name_, prop.name,
                      static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024 * 1024), prop.major, prop.minor);
  cudaStream_t compute = nullptr;
  ZE_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  backend->streams_.push_back(compute);
  backend->device_memory_ = std::make_unique<CudaCachingAllocator>(Tier::kDevice, device, compute);
  backend->pinned_memory_ = std::make_unique<CudaCachingAllocator>(Tier::kHost, device, compute);
  absl::StatusOr<std::unique_ptr<cuda::CudaOps>> ops =
      cuda::CudaOps::create(*backend, device, compute);
  if (!ops.ok()) return ops.status();
  backend->ops_ = *std::move(ops);
  return backend;
}

CudaBackend::CudaBackend(int device) : device_(device), name_(cat("cuda:", device)), description_(name_) {}

CudaBackend::~CudaBackend() {
  enter();
  {
    std::lock_guard<std::mutex> lock(streams_mu_);
    for (cudaStream_t s : streams_) ZE_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  ops_.reset();            // frees its workspaces into the allocators
  device_memory_.reset();  // waits for released blocks, returns the cache
  pinned_memory_.reset();
  std::lock_guard<std::mutex> lock(streams_mu_);
  for (cudaStream_t s : streams_) ZE_CUDA_CHECK(cudaStreamDestroy(s));
  streams_.clear();
}

void CudaBackend::enter() const { make_current(device_); }

std::optional<int64_t> CudaBackend::device_memory_in_use() {
  enter();
  size_t free_bytes = 0, total_bytes = 0;
  ZE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return static_cast<int64_t>(total_bytes - free_bytes);
}

Ops& CudaBackend::ops() { return *ops_; }

RawAllocator* CudaBackend::raw_allocator(Tier tier) {
  switch (tier) {
    case Tier::kDevice: return device_memory_.get();
    case Tier::kHost: return pinned_memory_.get();
    case Tier::kNvme: return nullptr;
  }
  return nullptr;
}

cudaStream_t CudaBackend::cuda_stream(StreamId id) const {
  std::lock_guard<std::mutex> lock(streams_mu_);
  ZE_CHECK(id >= 0 && id < static_cast<StreamId>(streams_.size())) << "stream " << id;
  return streams_[static_cast<size_t>(id)];
}

StreamId CudaBackend::create_stream() {
  enter();
  cudaStream_t s = nullptr;
  ZE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::lock_guard<std::mutex> lock(streams_mu_);
  streams_.push_back(s);
  return static_cast<StreamId>(streams_.size() - 1);
}

EventPtr CudaBackend::record_event(StreamId stream) {
  enter();
  auto event = std::make_shared<CudaEvent>(device_);
  ZE_CUDA_CHECK(cudaEventRecord(event->get(), cuda_stream(stream)));
  return event;
}

void CudaBackend::wait_event(StreamId stream, const EventPtr& event) {
  enter();
  ZE_CUDA_CHECK(cudaStreamWaitEvent(cuda_stream(stream), cuda_event(event).get(), 0));
}

void CudaBackend::synchronize(const EventPtr& event) {
  enter();
  ZE_CUDA_CHECK(cudaEventSynchronize(cuda_event(event).get()));
}

void CudaBackend::synchronize_stream(StreamId stream) {
  enter();
  ZE_CUDA_CHECK(cudaStreamSynchronize(cuda_stream(stream)));
}

void CudaBackend::copy_async(void* dst, const void* src, size_t bytes, StreamId stream) {
  if (bytes == 0) return;
  enter();
  ZE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cuda_stream(stream)));
}

std::unique_ptr<Backend> CudaBackend::make_host_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace zero
