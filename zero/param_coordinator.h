// The stage-3 parameter coordinator: which parameters are materialised when.
//
// Each parameter is partitioned (rank r holds elements [r c, (r+1) c) of it,
// c = ceil(numel / world), zero-padded). Before a module runs, its direct
// parameters are all-gathered into full buffers (tracked as communication
// buffers); after it runs they are released again, unless
//  * they are persistent (numel <= stage3_param_persistence_threshold, up to
//    stage3_model_persistence_threshold in total): always materialised, and
//    re-gathered after every optimizer step;
//  * the recorded trace says they are used again within
//    stage3_max_reuse_distance elements of gathering.
// The first forward + backward records the order modules run in; from then
// on, fetching trace position i also starts the gathers of the next modules
// (stage3_prefetch_bucket_size elements ahead, capped so that no more than
// stage3_max_live_parameters elements are materialised). A module call that
// does not match the trace invalidates it: prefetching stops, and the next
// iteration records again (DeepSpeed's behaviour; no error).
#pragma once

#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "runtime/backend/backend.h"
#include "runtime/comm/communicator.h"
#include "runtime/graph/module.h"
#include "zero/zero_config.h"

namespace zero {

struct ParamPartition {
  int64_t chunk = 0;         // elements per rank (ceil(numel / world))
  int64_t shard_offset = 0;  // where this rank's chunk sits in the flat shard buffers
  bool persistent = false;
};

// DeepSpeed's stage-3 partitioning of `params` (in model order) over `world`
// ranks: each parameter padded to a multiple of world, chunk = ceil(numel /
// world), the chunks packed in order into this rank's shard buffers; a
// parameter of at most param_persistence_threshold elements persists, up to
// model_persistence_threshold elements in total. The stage-3 model state and
// the memory planner both partition through this.
struct Stage3Partitions {
  std::unordered_map<const Parameter*, ParamPartition> parts;
  int64_t shard_elems = 0;  // sum of the chunks
};
Stage3Partitions plan_stage3_partitions(const std::vector<Parameter*>& params, int world, const ZeroConfig& config);

class ParamCoordinator {
 public:
  ParamCoordinator(const ZeroConfig& config, Backend& backend, Communicator& comm, DType dtype);

  // shard: this rank's flat shard buffer (model dtype); parts: per parameter.
  void set_partitions(Tensor shard, std::unordered_map<const Parameter*, ParamPartition> parts);

  void begin_iteration();  // before each forward: trace bookkeeping
  absl::Status fetch(Module& m, bool backward);
  absl::Status release(Module& m, bool backward);
  // Releases every non-persistent parameter (their values go stale at the step).
  absl::Status release_all();
  // Gathers the persistent parameters from the (updated) shards.
  absl::Status gather_persistent();
  // Gathers one parameter now (waits), e.g. for inspection, and releases it.
  absl::Status gather_now(Parameter& p);
  void release_one(Parameter& p) {
    if (!parts_.at(&p).persistent) drop(p);
  }

  int64_t live_elements() const { return live_elems_; }
  bool trace_complete() const { return trace_state_ == TraceState::kComplete; }
  int64_t prefetches() const { return prefetches_; }
  int64_t gathers() const { return gathers_; }

 private:
  enum class TraceState { kRecord, kComplete, kInvalid };
  struct Slot {
    Tensor full;        // [world * chunk], model dtype
    CommHandle handle;  // set while in flight
  };
  struct Step {
    Module* module;
    bool backward;
  };

  absl::Status start_gather(Parameter& p);
  absl::Status wait_gather(Parameter& p);
  void drop(Parameter& p);
  void record(Module& m, bool backward);
  void finish_trace();
  void prefetch_after(size_t position);
  bool reused_soon(const Parameter* p, size_t position) const;
  int64_t gather_elements(const Module& m) const;

  ZeroConfig config_;
  Backend& backend_;
  Communicator& comm_;
  DType dtype_;
  Tensor shard_;
  std::unordered_map<const Parameter*, ParamPartition> parts_;
  std::unordered_map<const Parameter*, Slot> slots_;
  int64_t live_elems_ = 0;

  TraceState trace_state_ = TraceState::kRecord;
  std::vector<Step> trace_;
  std::vector<int64_t> trace_prefix_elems_;  // elements gathered before position i
  size_t position_ = 0;
  int64_t prefetches_ = 0, gathers_ = 0;
  bool warned_ = false;
};

}  // namespace zero
