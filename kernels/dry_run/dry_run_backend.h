// A backend for dry runs: the memory planner builds the real Engine for the
// real model and config on it and runs the real step path, and the peaks of
// its tracker are the plan (runtime/engine/memory_plan.h), the way ggml sizes
// a graph by running its own allocator without allocating.
//
//  * Allocations go through Backend::allocate like any other, counted by
//    category and tier, but in the dry run's own MemoryTracker (not the
//    process's) and at addresses that hold no memory: a range of address
//    space reserved PROT_NONE, so a stray touch faults at once instead of
//    reading someone's bytes.
//  * Ops (kernels/dry_run/dry_run_ops.h) compute nothing but take the workspace
//    the CPU ops take for the same shapes; copies do nothing; every event has
//    completed.
//  * dry_run() is true: the few places that touch memory outside ops and
//    copies (initial values, swap-buffer fills, element-wise store writes,
//    file I/O) skip the touch.
//
// The compute tier is chosen: kHost plans a CPU run, kDevice a GPU run (with
// the CPU ops' workspace requests). make_host_backend() returns a dry host
// backend counting into the same tracker, so ZeRO-Offload's host state and
// cpu_checkpointing's segment inputs land in the same plan.
#pragma once

#include <cstdint>
#include <memory>

#include "kernels/backend.h"

namespace zero {

// What the backends of one dry run share: the tracker and the address range.
class DryRunMemory;

// An address past the canonical user range: no memory is ever there, so a
// touch faults. Where the reservation below cannot be made, dry-run
// allocations start here; host values a dry run stands in for (initial
// values) point here too.
inline constexpr uintptr_t kDryRunUnbackedAddress = uintptr_t{1} << 47;

class DryRunBackend final : public Backend {
 public:
  explicit DryRunBackend(Tier compute_tier);
  ~DryRunBackend() override;

  std::string_view name() const override { return "dry-run"; }
  Tier compute_tier() const override { return compute_tier_; }
  Ops& ops() override { return *ops_; }
  bool dry_run() const override { return true; }
  MemoryTracker& process_tracker() override;
  std::unique_ptr<Backend> make_host_backend() override;

  StreamId create_stream() override { return ++streams_; }
  EventPtr record_event(StreamId) override;
  void wait_event(StreamId, const EventPtr&) override {}
  void synchronize(const EventPtr&) override {}
  void synchronize_stream(StreamId) override {}
  void copy_async(void*, const void*, size_t, StreamId) override {}

 protected:
  RawAllocator* raw_allocator(Tier tier) override;

 private:
  DryRunBackend(Tier compute_tier, std::shared_ptr<DryRunMemory> memory);

  Tier compute_tier_;
  std::shared_ptr<DryRunMemory> memory_;
  std::unique_ptr<Ops> ops_;
  StreamId streams_ = 0;
};

}  // namespace zero
