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

#include <deque>
#include <optional>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "comm/communicator.h"
#include "graph/module.h"
#include "kernels/backend.h"
#include "offload/optimizer_state_store.h"
#include "zero/gather_trace.h"
#include "zero/zero_config.h"

namespace zero {

// DeepSpeed's stage-3 partitioning of `params` (in model order) over `world`
// ranks: each parameter padded to a multiple of world, chunk = ceil(numel /
// world), the chunks packed in order into this rank's shard buffers; a
// parameter of at most param_persistence_threshold elements persists, up to
// model_persistence_threshold elements in total. Frozen parameters
// (requires_grad false) are partitioned and persist by the same rules, but
// their chunks pack into a shard of their own (model dtype only: no
// gradient, master or optimizer state beside it). The stage-3 model state
// and the memory planner both partition through this.
struct Stage3Partitions {
  std::unordered_map<const Parameter*, ParamPartition> parts;
  int64_t shard_elems = 0;         // sum of the trainable parameters' chunks
  int64_t frozen_shard_elems = 0;  // sum of the frozen parameters' chunks
  int64_t max_chunk = 0;           // the largest trainable chunk (a gather's read from NVMe)
};
Stage3Partitions plan_stage3_partitions(const std::vector<Parameter*>& params, int world, const ZeroConfig& config);

class ParamCoordinator {
 public:
  ParamCoordinator(const ZeroConfig& config, Backend& backend, Communicator& comm, DType dtype);

  // shard: this rank's flat shard buffer (model dtype); parts: per parameter.
  // With `swapped` (offload_param "nvme") the shard is not in memory: a
  // gather first reads the chunk from the store (started when the gather is
  // issued, so a prefetch reads ahead in the recorded order), and shard is
  // undefined. With `host_shard` (offload_param "cpu" on a device backend)
  // the shard is host memory: a gather copies the chunk up on a copy stream,
  // started when the gather is issued (a prefetch starts it early), and the
  // compute stream, which the collective follows, waits for it. With
  // `read_staging` (swapped, on a device backend: host memory of at least
  // the largest chunk) a read lands there and is copied up into the slot.
  void set_partitions(Tensor shard, std::unordered_map<const Parameter*, ParamPartition> parts,
                      OptimizerStateStore* swapped = nullptr, bool host_shard = false,
                      Tensor read_staging = Tensor());
  // The frozen parameters' chunks (model dtype), always in memory, even
  // where the trainable shard is swapped; with `host` (host memory on a
  // device backend) a gather copies up from it as from a host shard.
  void set_frozen_shard(Tensor shard, bool host);

  void begin_iteration();  // before each forward: trace bookkeeping
  // Brackets an evaluation forward: the trace is paused (gather_trace.h).
  void set_evaluating(bool evaluating) { trace_.set_paused(evaluating); }
  absl::Status fetch(Module& m, bool backward);
  absl::Status release(Module& m, bool backward);
  // Releases every non-persistent parameter (their values go stale at the
  // step). With a host shard, also waits for every copy of it: the step
  // rewrites it next.
  absl::Status release_all();
  // Gathers the persistent parameters from the (updated) shards.
  absl::Status gather_persistent();
  // Gathers one parameter now (waits), e.g. for inspection, and releases it.
  absl::Status gather_now(Parameter& p);
  void release_one(Parameter& p) {
    if (!parts_.at(&p).persistent) drop(p);
  }

  int64_t prefetches() const { return prefetches_; }
  int64_t gathers() const { return gathers_; }
  int64_t host_copies() const { return host_copies_; }  // chunks copied up from a host shard or read staging

 private:
  struct Slot {
    Tensor full;        // [world * chunk], model dtype
    CommHandle handle;  // set while in flight
    std::optional<int64_t> read;  // swapped: the chunk's read, until it lands and the all-gather starts
  };
  // Issues p's gather. A prefetch (may_skip) of a swapped chunk when every
  // read buffer is taken is skipped (false); a fetch waits for the oldest read.
  absl::StatusOr<bool> start_gather(Parameter& p, bool may_skip = false);
  // Whether p's chunk is read from the swapped store (not a frozen one).
  bool swapped(const Parameter& p) const { return swapped_ != nullptr && !parts_.at(&p).frozen; }
  // Swapped: starts reading p's chunk; nullopt when skipped (may_skip and
  // every read buffer taken), else the read's ticket.
  absl::StatusOr<std::optional<int64_t>> issue_read(Parameter& p, bool may_skip);
  // Swapped: waits for p's chunk to land in its place; starts the all-gather.
  absl::Status finish_read(Parameter& p);
  // Copies this rank's chunk of p into the slot and starts the all-gather.
  absl::Status begin_all_gather(Parameter& p, Slot& slot);
  // Waits for p's gather and points p.data at it; p.data is defined even
  // when the gather failed (then with the gather's error).
  absl::Status wait_gather(Parameter& p);
  // A gathered buffer for p: [world * chunk] of the model dtype, counted live.
  Tensor allocate_full(const Parameter& p);
  void drop(Parameter& p);
  void prefetch();

  ZeroConfig config_;
  Backend& backend_;
  Communicator& comm_;
  DType dtype_;
  Tensor shard_;
  Tensor frozen_shard_;
  OptimizerStateStore* swapped_ = nullptr;
  bool host_shard_ = false;
  bool frozen_host_shard_ = false;  // frozen_shard_ is host memory on a device backend
  Tensor read_staging_;  // swapped on a device: where a read lands before going up
  StreamId copy_stream_ = kComputeStream;  // host shard: where chunks go up
  std::deque<Parameter*> reading_;  // swapped chunks being read, oldest first
  std::unordered_map<const Parameter*, ParamPartition> parts_;
  std::unordered_map<const Parameter*, Slot> slots_;
  int64_t live_elems_ = 0;

  GatherTrace trace_;
  int64_t prefetches_ = 0, gathers_ = 0, host_copies_ = 0;
  bool warned_ = false;
};

}  // namespace zero
