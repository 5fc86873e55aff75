// The backend interface: how memory is allocated, how work is ordered on
// streams, how bytes are copied, and (through ops()) how ops run. The engine
// decides what moves where and when; a backend only decides how.
//
// Streams and events follow CUDA's model, so the CUDA backend maps onto them
// one to one and the CPU backend emulates them:
//  * work on one stream runs in issue order;
//  * record_event(s) marks the current end of stream s; wait_event(s2, e) makes
//    later work on s2 wait for e without blocking the host; synchronize(e)
//    blocks the host until e has completed;
//  * ops() always launch on the compute stream (kComputeStream).
// Ownership rule for every asynchronous call: the caller keeps the source and
// destination buffers alive, and does not touch them, until an event recorded
// after the call has completed.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/allocator.h"
#include "core/tensor.h"
#include "kernels/ops.h"

namespace zero {

using StreamId = int;
inline constexpr StreamId kComputeStream = 0;

// Opaque completion marker; backends derive their own.
class Event {
 public:
  virtual ~Event() = default;
  // True once the work before the event has finished (never blocks).
  virtual bool query() const = 0;
};
using EventPtr = std::shared_ptr<Event>;

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string_view name() const = 0;  // "cpu", "cuda:0"
  // One line for logs: the name plus what the hardware is ("cuda:0 (NVIDIA
  // H200, 139.8 GiB, sm_90)"); the name alone by default.
  virtual std::string description() const { return std::string(name()); }
  // The tier op operands live in: kHost for the CPU backend, kDevice for CUDA.
  virtual Tier compute_tier() const = 0;
  virtual Ops& ops() = 0;

  // A dry run (kernels/dry_run/dry_run_backend.h): allocations are tracked
  // but hold no memory, ops and copies do nothing. Code that touches memory
  // other than through ops() and copies (initial values, swap-buffer fills,
  // element-wise store writes) skips the touch when this is true.
  virtual bool dry_run() const { return false; }
  // The process-wide figures this backend's allocations count in:
  // MemoryTracker::global(), or a dry run's own tracker.
  virtual MemoryTracker& process_tracker() { return MemoryTracker::global(); }
  // A backend of the same kind computing in host memory, for what the engine
  // keeps on the host beside a compute backend (ZeRO-Offload's optimizer,
  // cpu_checkpointing's segment inputs): a CpuBackend, or a dry run's host.
  virtual std::unique_ptr<Backend> make_host_backend() = 0;

  // ---- memory: every tracked byte of the engine and the model comes from here.
  // Fails with RESOURCE_EXHAUSTED naming the size, category and tier.
  absl::StatusOr<std::shared_ptr<Storage>> allocate(size_t bytes, Tier tier, MemCategory category,
                                                    size_t alignment = kDefaultAlignment);
  // Uninitialised tensor; aborts on out-of-memory (for internal buffers whose
  // size the memory planner has already checked).
  Tensor empty(const Shape& shape, DType dtype, MemCategory category);
  Tensor empty(const Shape& shape, DType dtype, MemCategory category, Tier tier);
  Tensor zeros(const Shape& shape, DType dtype, MemCategory category);
  // Returns cached blocks of every tier to the OS/driver.
  void release_cached();
  // What was allocated through this backend (allocate/empty/zeros), by tier
  // and category; MemoryTracker::global() sums every backend of the process.
  // Tells apart two backends that allocate in the same tier (the host
  // backend of ZeRO-Offload beside a CPU compute backend).
  MemorySnapshot memory() const { return tracker_.snapshot(); }
  // Bytes of device memory in use on this backend's device as the driver
  // reports it (cudaMemGetInfo: total - free, every process and the context
  // included): what the tracked device figures are checked against. nullopt
  // for a backend without a device.
  virtual std::optional<int64_t> device_memory_in_use() { return std::nullopt; }

  // ---- streams and events
  virtual StreamId create_stream() = 0;
  virtual EventPtr record_event(StreamId stream) = 0;
  virtual void wait_event(StreamId stream, const EventPtr& event) = 0;
  virtual void synchronize(const EventPtr& event) = 0;
  virtual void synchronize_stream(StreamId stream) = 0;

  // ---- copies between any two tiers this backend serves (host <-> device,
  // host <-> host, device <-> device), ordered on `stream`.
  virtual void copy_async(void* dst, const void* src, size_t bytes, StreamId stream) = 0;
  // Copy and wait; convenience for set-up and tests.
  void copy(void* dst, const void* src, size_t bytes);
  // Copies a tensor's bytes into another of equal size (any tiers).
  void copy(const Tensor& dst, const Tensor& src);

 protected:
  // The allocator behind each tier this backend serves, or nullptr.
  virtual RawAllocator* raw_allocator(Tier tier) = 0;

 private:
  MemoryTracker tracker_;  // this backend's share of the global figures
};

// Host fp32 values converted into dst (any float dtype, any tier of
// backend), through a tracked staging buffer when dst is not host memory.
void upload_fp32(Backend& backend, absl::Span<const float> host, const Tensor& dst);
// src (any float dtype, any tier) read back to host as fp32.
std::vector<float> download_fp32(Backend& backend, const Tensor& src);

}  // namespace zero
