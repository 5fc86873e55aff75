// The CPU backend: host memory through the caching HostAllocator, ops from
// kernels/cpu (oneDNN + SIMD), and CUDA-style streams emulated with threads.
//
// Streams: the compute stream (0) runs work inline on the calling thread, so
// ops complete before they return. Every other stream is a worker thread with
// a FIFO of tasks; copy_async on it returns at once and the copy happens on
// that thread. An event recorded on a stream completes when the stream reaches
// it; wait_event on the compute stream blocks the caller, on a worker stream it
// queues a wait. This gives the engine real overlap (e.g. a copy or a
// collective progressing while the compute thread runs backward).
#pragma once

#include <memory>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_ops.h"

namespace zero {

class CpuStream;

class CpuBackend final : public Backend {
 public:
  CpuBackend();
  ~CpuBackend() override;

  std::string_view name() const override { return "cpu"; }
  Tier compute_tier() const override { return Tier::kHost; }
  Ops& ops() override { return *ops_; }
  cpu::CpuOps& cpu_ops() { return *ops_; }
  std::unique_ptr<Backend> make_host_backend() override { return std::make_unique<CpuBackend>(); }

  StreamId create_stream() override;
  EventPtr record_event(StreamId stream) override;
  void wait_event(StreamId stream, const EventPtr& event) override;
  void synchronize(const EventPtr& event) override;
  void synchronize_stream(StreamId stream) override;
  void copy_async(void* dst, const void* src, size_t bytes, StreamId stream) override;

  // Runs fn on `stream` after the work already queued there (compute stream: now).
  void enqueue(StreamId stream, std::function<void()> fn);

 protected:
  RawAllocator* raw_allocator(Tier tier) override;

 private:
  CpuStream& stream(StreamId id);

  HostAllocator host_;
  std::unique_ptr<cpu::CpuOps> ops_;
  std::vector<std::unique_ptr<CpuStream>> streams_;  // index = id - 1
};

}  // namespace zero
