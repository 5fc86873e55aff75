// The stage-3 coordinator's decisions, apart from what a gather does: the
// order modules ran in during the first iteration (DeepSpeed's trace), which
// parameters to gather ahead after each fetch (prefetch_bucket_size elements,
// within max_live_parameters), and whether a parameter is used again soon
// enough to stay gathered (max_reuse_distance). ParamCoordinator runs it
// (on a dry run too, so the memory planner sees the same decisions).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "absl/functional/function_ref.h"
#include "graph/module.h"
#include "zero/zero_config.h"

namespace zero {

// One parameter's stage-3 partition (see plan_stage3_partitions).
struct ParamPartition {
  int64_t chunk = 0;         // elements per rank (numel padded to a multiple of world, / world)
  int64_t shard_offset = 0;  // where this rank's chunk starts in its shard buffers (the frozen shard when frozen)
  bool persistent = false;
  bool frozen = false;       // requires_grad false: in the frozen shard, no gradient or optimizer state
};

class GatherTrace {
 public:
  GatherTrace(const ZeroConfig& config, int world, const std::unordered_map<const Parameter*, ParamPartition>& parts)
      : config_(config), world_(world), parts_(parts) {}

  // Before each forward: completes the trace after the first iteration,
  // starts recording again after a divergence.
  void begin_iteration();
  // Notes that m runs (its forward or backward). False when this breaks the
  // recorded order: prefetching stops and the next iteration records again.
  bool record(Module& m, bool backward);
  bool complete() const { return state_ == State::kComplete; }
  // An evaluation pass (forward only, between iterations): while paused the
  // trace neither records nor checks the order, and nothing is prefetched or
  // kept gathered; resuming leaves the trace as it was.
  void set_paused(bool paused) { paused_ = paused; }

  // Parameters to gather ahead of the current position, in trace order:
  // neither persistent nor `held`, until `budget` elements are gathered.
  std::vector<Parameter*> prefetch(int64_t budget, absl::FunctionRef<bool(const Parameter*)> held) const;
  // Whether p is used again within max_reuse_distance gathered elements.
  bool reused_soon(const Parameter* p) const;
  // Elements a gather of m's non-persistent parameters materialises.
  int64_t gather_elements(const Module& m) const;

 private:
  enum class State { kRecord, kComplete, kInvalid };
  struct Step {
    Module* module;
    bool backward;
  };

  ZeroConfig config_;
  int world_;
  const std::unordered_map<const Parameter*, ParamPartition>& parts_;
  State state_ = State::kRecord;
  std::vector<Step> trace_;
  std::vector<int64_t> prefix_elems_;  // elements gathered before position i
  size_t position_ = 0;
  bool paused_ = false;
};

}  // namespace zero
