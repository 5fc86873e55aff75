// The planner's mirror of the model states: zero/flat_model_state.cc (stages
// 0-2: flat buffers, gradient buckets), zero/param_coordinator.cc and
// zero/stage3_model_state.cc (stage 3: gathers, prefetch, reuse, full-size
// gradients and their reduce-scatters), zero/optimizer_state_store.h (resident
// or NVMe-swapped optimizer state), zero/host_step.h (ZeRO-Offload: the state
// in host memory, pinned staging). Sized by the same layout functions the
// model states use. See memory_plan_sim.h.
#include <algorithm>
#include <deque>
#include <unordered_set>

#include "zero/flat_layout.h"
#include "zero/grad_buckets.h"
#include "zero/host_step.h"
#include "zero/memory_plan_sim.h"
#include "zero/param_coordinator.h"
#include "zero/state_buffers.h"
#include "zero/swap_layout.h"

namespace zero::memsim {
namespace {

// ---- zero/state_buffers.cc: add_reduced stages a 16-bit reduced part in fp32.
void simulate_add_reduced(Sim& sim, int64_t numel, DType grad_dtype) {
  if (numel == 0 || grad_dtype == DType::kF32) return;
  Buf staged = sim.alloc(MemCategory::kWorkspace, std::min(numel, kReducedStagingElems) * 4);
}

// The fp32 master (unless it aliases fp32 parameters at stage 0) and the
// optimizer's states for `numel` elements: in memory, or in a swap file with
// host swap buffers (offload_optimizer.device = "nvme", zero/swap_layout.h).
// With max_param_read > 0 (offload_param "nvme") the records also hold the
// parameters, read ahead through offload_param.buffer_count buffers, or,
// without offload_optimizer "nvme", the parameters have a file of their own. With
// offload.optimizer (ZeRO-Offload, zero/host_step.h) the arrays are host
// memory, beside the host step's staging (host tier, pinned on a device).
std::vector<Buf> allocate_optimizer_state(Sim& sim, const EngineConfig& e, int64_t numel, bool separate_master,
                                          const HostOffload& offload, int64_t max_param_read = 0) {
  std::vector<Buf> store;
  const int states = optimizer_state_arrays(e.optimizer);
  const int arrays = (separate_master ? 1 : 0) + states;
  const OptimizerPrecision& precision = e.optimizer_precision;
  const Tier optimizer_tier = offload.optimizer ? Tier::kHost : sim.tier;
  // A 16-bit master or states: the optimizer's fp32 staging (runtime/engine/optimizer.h).
  if (precision.narrow()) {
    store.push_back(sim.alloc(optimizer_tier, MemCategory::kWorkspace, narrow_step_staging_bytes(precision, states)));
  }
  // The arrays in memory, in their dtypes.
  auto resident_arrays = [&](Tier tier) {
    for (int i = 0; i < arrays; ++i) {
      const DType t = i == 0 && separate_master ? precision.master : precision.states;
      store.push_back(sim.alloc(tier, MemCategory::kOptimizerState, numel * static_cast<int64_t>(dtype_size(t))));
    }
  };
  // The host step (ZeRO-Offload / ZeRO-Infinity on a device) runs over a
  // store built on a host backend: the staging beside it, and nothing of the
  // optimizer on the compute tier.
  auto host_step_staging = [&] {
    const int64_t chunk = host_step_chunk_elems(numel, e.zero.sub_group_size);
    const bool params_on_host = offload.parameters || max_param_read > 0;
    store.push_back(sim.alloc(Tier::kHost, kHostStepStagingCategory,
                              host_step_staging_bytes(chunk, e.gradient_dtype(), e.param_dtype, params_on_host)));
  };
  const int64_t param_elem = max_param_read > 0 ? static_cast<int64_t>(dtype_size(e.param_dtype)) : 0;
  if (e.zero.offload_optimizer.device != OffloadDevice::kNvme && max_param_read > 0) {
    // offload_param "nvme" alone (offload/nvme_param_store.h): the states
    // resident, the shard in a swap file of its own with write and read buffers.
    resident_arrays(optimizer_tier);
    const SwapLayout layout = param_swap_layout(numel, e.zero.offload_param.buffer_size, param_elem);
    store.push_back(sim.alloc(Tier::kHost, MemCategory::kSwapBuffers, kParamWriteBuffers * layout.record_bytes()));
    store.push_back(sim.alloc(Tier::kHost, MemCategory::kSwapBuffers,
                              e.zero.offload_param.buffer_count * layout.param_read_buffer_bytes(max_param_read)));
    store.push_back(sim.alloc(Tier::kNvme, MemCategory::kParameters, layout.file_bytes()));
    if (offload.optimizer) host_step_staging();
    return store;
  }
  if (offload.optimizer && !offload.optimizer_on_nvme) {
    resident_arrays(Tier::kHost);
    host_step_staging();
    return store;
  }
  if (e.zero.offload_optimizer.device == OffloadDevice::kNvme) {
    const SwapLayout layout = SwapLayout::make(numel, e.zero.sub_group_size, arrays, param_elem,
                                               static_cast<int64_t>(dtype_size(precision.master)),
                                               static_cast<int64_t>(dtype_size(precision.states)));
    store.push_back(sim.alloc(Tier::kNvme, MemCategory::kOptimizerState, layout.file_bytes()));
    store.push_back(sim.alloc(Tier::kHost, MemCategory::kSwapBuffers,
                              layout.buffer_bytes(e.zero.offload_optimizer.buffer_count)));
    if (max_param_read > 0) {
      store.push_back(sim.alloc(Tier::kHost, MemCategory::kSwapBuffers,
                                e.zero.offload_param.buffer_count * layout.param_read_buffer_bytes(max_param_read)));
    }
    if (offload.optimizer) host_step_staging();
    return store;
  }
  resident_arrays(sim.tier);
  return store;
}

// ---- zero/flat_model_state.cc (stages 0-2), simulated

class FlatStateSim final : public StateSim {
 public:
  FlatStateSim(Sim& sim, Module& model, const EngineConfig& e, int world, int rank, MemoryPlan& plan)
      : sim_(sim), e_(e), world_(world), rank_(rank), stage_(e.zero.stage) {
    layout_ = FlatLayout(model.parameters(), stage_ == 0 ? 1 : 2 * world);
    const int64_t n = layout_.numel();
    part_ = stage_ == 0 ? n : n / world;
    gsize_ = static_cast<int64_t>(dtype_size(e.gradient_dtype()));
    params_ = sim.alloc(MemCategory::kParameters, n * static_cast<int64_t>(dtype_size(e.param_dtype)));
    grads_ = sim.alloc(MemCategory::kGradients, (stage_ == 2 ? part_ : n) * gsize_);
    const bool aliased = stage_ == 0 && e.param_dtype == DType::kF32;
    store_ = allocate_optimizer_state(sim, e, part_, !aliased, host_offload_for(e.zero, sim.tier, e.force_offload_path));
    // On a device, initial values go up through an fp32 staging buffer per
    // parameter (upload_fp32), one at a time.
    if (sim.tier != Tier::kHost) {
      int64_t largest = 0;
      for (const FlatSegment& seg : layout_.segments()) largest = std::max(largest, seg.param->numel());
      Buf staging = sim.alloc(MemCategory::kWorkspace, largest * 4);
    }
    buckets_ = plan_grad_buckets(layout_, e.zero.reduce_bucket_size);
    for (size_t b = 0; b < buckets_.size(); ++b)
      for (Parameter* p : buckets_[b].params) bucket_of_[p] = b;
    uses_ = count_parameter_uses(model);
    bucket_buffers_.resize(buckets_.size());
    plan.partition_numel = part_;
  }

  void begin_backward(bool boundary) override {
    boundary_ = boundary;
    uses_left_ = uses_;
    params_pending_.assign(buckets_.size(), 0);
    for (size_t b = 0; b < buckets_.size(); ++b) params_pending_[b] = static_cast<int>(buckets_[b].params.size());
    launched_.assign(buckets_.size(), false);
  }

  void pre_backward(Module& m) override {
    if (stage_ != 2) return;
    for (Parameter* p : m.direct_parameters()) {
      if (grad_defined_.count(p)) continue;
      const size_t b = bucket_of_.at(p);
      if (bucket_buffers_[b] == nullptr)
        bucket_buffers_[b] = sim_.alloc(MemCategory::kCommBuffers, (buckets_[b].end - buckets_[b].begin) * gsize_);
      for (Parameter* q : buckets_[b].params) grad_defined_.insert(q);
    }
  }

  void post_backward(Module& m) override {
    for (Parameter* p : m.direct_parameters()) {
      if (--uses_left_[p] != 0) continue;
      const size_t b = bucket_of_.at(p);
      if (--params_pending_[b] == 0 && reduces_now()) launch(b);
    }
  }

  void end_backward() override {
    if (reduces_now()) {
      for (size_t b = 0; b < buckets_.size(); ++b)
        if (!launched_[b]) launch(b);
    }
    finish_all();
  }

  void apply_step() override {}  // the update and the all-gather work in place

 private:
  struct InFlight {
    Buf bucket, recv;
    int64_t recv_numel = 0;
  };
  bool reduces_now() const { return stage_ == 2 || boundary_; }

  void launch(size_t b) {
    const GradBucket& bucket = buckets_[b];
    launched_[b] = true;
    InFlight f;
    if (stage_ == 2) {
      Buf& buf = bucket_buffers_[b];
      if (buf == nullptr) buf = sim_.alloc(MemCategory::kCommBuffers, (bucket.end - bucket.begin) * gsize_);
      const int64_t mine = partition_counts(bucket.begin, bucket.end, part_, world_)[rank_];
      f.bucket = buf;
      f.recv_numel = mine;
      if (e_.zero.reduce_scatter && world_ > 1)
        f.recv = sim_.alloc(MemCategory::kCommBuffers, std::max<int64_t>(mine, 1) * gsize_);
      buf = nullptr;
      for (Parameter* q : bucket.params) grad_defined_.erase(q);
    } else if (stage_ == 1 && e_.zero.reduce_scatter && world_ > 1) {
      // Stage 1's reduce-scatter receives this rank's part of the bucket.
      const int64_t mine = partition_counts(bucket.begin, bucket.end, part_, world_)[rank_];
      f.recv = sim_.alloc(MemCategory::kCommBuffers, std::max<int64_t>(mine, 1) * gsize_);
    }
    in_flight_.push_back(std::move(f));
    finish_beyond(e_.zero.overlap_comm ? kBucketsInFlight : 0);
  }

  void finish_beyond(size_t cap) {
    while (in_flight_.size() > cap) {
      if (stage_ == 2) simulate_add_reduced(sim_, in_flight_.front().recv_numel, e_.gradient_dtype());
      in_flight_.pop_front();
    }
  }
  void finish_all() { finish_beyond(0); }

  Sim& sim_;
  const EngineConfig& e_;
  int world_, rank_, stage_;
  FlatLayout layout_;
  int64_t part_ = 0, gsize_ = 0;
  Buf params_, grads_;
  std::vector<Buf> store_;
  std::vector<GradBucket> buckets_;
  std::vector<Buf> bucket_buffers_;
  std::unordered_map<const Parameter*, int> uses_, uses_left_;
  std::unordered_map<const Parameter*, size_t> bucket_of_;
  std::unordered_set<const Parameter*> grad_defined_;
  std::vector<int> params_pending_;
  std::vector<bool> launched_;
  std::deque<InFlight> in_flight_;
  bool boundary_ = false;
};

// ---- zero/param_coordinator.cc, simulated: which gathered buffers exist when.

class CoordinatorSim {
 public:
  // read_buffers > 0: parameters on NVMe (offload_param), read ahead through
  // that many buffers; a prefetch stops when all are taken.
  CoordinatorSim(Sim& sim, const ZeroConfig& config, int world, DType dtype, const Stage3Partitions& parts,
                 int64_t read_buffers)
      : sim_(sim),
        config_(config),
        world_(world),
        dsize_(static_cast<int64_t>(dtype_size(dtype))),
        parts_(parts.parts),
        read_buffers_(read_buffers),
        trace_(config, world, parts_) {}

  void begin_iteration() { trace_.begin_iteration(); }

  void fetch(Module& m, bool backward) {
    trace_.record(m, backward);
    for (Parameter* p : m.direct_parameters()) start_gather(*p, false);
    const int64_t budget = std::min(config_.prefetch_bucket_size, config_.max_live_parameters - live_elems_);
    for (Parameter* p : trace_.prefetch(budget, [&](const Parameter* q) { return slots_.count(q) > 0; }))
      if (!start_gather(*p, true)) break;
    for (Parameter* p : m.direct_parameters()) land(*p);  // wait_gather
  }

  void release(Module& m) {
    for (Parameter* p : m.direct_parameters()) {
      if (parts_.at(p).persistent) continue;
      if (trace_.reused_soon(p)) continue;
      drop(*p);
    }
  }

  void release_all() {
    std::vector<const Parameter*> held;
    for (auto& [p, slot] : slots_)
      if (!parts_.at(p).persistent) held.push_back(p);
    for (const Parameter* p : held) drop(*p);
  }

  void gather_persistent() {
    std::vector<const Parameter*> persistent;
    for (auto& [p, part] : parts_)
      if (part.persistent) persistent.push_back(p);
    for (const Parameter* p : persistent)
      if (!slots_.count(p)) start_gather(*p, false);
    for (const Parameter* p : persistent) land(*p);
  }

 private:
  // Swapped chunks hold a read buffer from the gather's start until they land.
  bool start_gather(const Parameter& p, bool may_skip) {
    if (slots_.count(&p)) return true;
    if (read_buffers_ > 0 && static_cast<int64_t>(reading_.size()) == read_buffers_) {
      if (may_skip) return false;
      reading_.pop_front();  // the oldest read lands, freeing its buffer
    }
    const ParamPartition& part = parts_.at(&p);
    slots_[&p] = sim_.alloc(part.persistent ? MemCategory::kParameters : MemCategory::kCommBuffers,
                            world_ * part.chunk * dsize_);
    if (!part.persistent) live_elems_ += world_ * part.chunk;
    if (read_buffers_ > 0) reading_.push_back(&p);
    return true;
  }

  void land(const Parameter& p) {
    auto it = std::find(reading_.begin(), reading_.end(), &p);
    if (it != reading_.end()) reading_.erase(it);
  }

  void drop(const Parameter& p) {
    auto it = slots_.find(&p);
    if (it == slots_.end()) return;
    land(p);
    live_elems_ -= world_ * parts_.at(&p).chunk;
    slots_.erase(it);
  }

  Sim& sim_;
  ZeroConfig config_;
  int world_;
  int64_t dsize_;
  const std::unordered_map<const Parameter*, ParamPartition>& parts_;
  int64_t read_buffers_;
  GatherTrace trace_;
  std::unordered_map<const Parameter*, Buf> slots_;
  std::deque<const Parameter*> reading_;
  int64_t live_elems_ = 0;
};

// ---- zero/stage3_model_state.cc, simulated

class Stage3StateSim final : public StateSim {
 public:
  Stage3StateSim(Sim& sim, Module& model, const EngineConfig& e, int world, MemoryPlan& plan)
      : sim_(sim), e_(e), world_(world), params_(model.parameters()),
        parts_(plan_stage3_partitions(params_, world, e.zero)) {
    const int64_t s = parts_.shard_elems;
    gsize_ = static_cast<int64_t>(dtype_size(e.gradient_dtype()));
    const bool params_on_nvme = e.zero.offload_param.device == OffloadDevice::kNvme;
    const HostOffload offload = host_offload_for(e.zero, sim.tier, e.force_offload_path);
    const int64_t largest = parts_.max_chunk;
    const int64_t shard_bytes = s * static_cast<int64_t>(dtype_size(e.param_dtype));
    if (offload.parameters) {
      param_shard_ = sim.alloc(Tier::kHost, MemCategory::kParameters, shard_bytes);
    } else if (!params_on_nvme) {
      param_shard_ = sim.alloc(MemCategory::kParameters, shard_bytes);
    }
    grad_shard_ = sim.alloc(MemCategory::kGradients, s * gsize_);
    store_ = allocate_optimizer_state(sim, e, s, /*separate_master=*/true, offload, params_on_nvme ? largest : 0);
    // Per-chunk fp32 staging of the initial values (upload_fp32) into a
    // store on the device; an offloaded store takes them in host memory.
    if (sim.tier != Tier::kHost && !offload.optimizer) {
      Buf staging = sim.alloc(MemCategory::kWorkspace, largest * 4);
    }
    // offload_param "nvme" on a device: host staging for a chunk read from
    // the swap file on its way up.
    if (offload.parameters_on_nvme) {
      read_staging_ = sim.alloc(Tier::kHost, MemCategory::kCommBuffers,
                                largest * static_cast<int64_t>(dtype_size(e.param_dtype)));
    }
    coordinator_ = std::make_unique<CoordinatorSim>(sim, e.zero, world, e.param_dtype, parts_,
                                                    params_on_nvme ? e.zero.offload_param.buffer_count : 0);
    coordinator_->gather_persistent();
    uses_ = count_parameter_uses(model);
    plan.partition_numel = s;
  }

  void pre_forward(Module& m) override { coordinator_->fetch(m, false); }
  void post_forward(Module& m) override { coordinator_->release(m); }
  void begin_forward() override { coordinator_->begin_iteration(); }
  void begin_backward(bool) override { uses_left_ = uses_; }

  void pre_backward(Module& m) override {
    coordinator_->fetch(m, true);
    for (Parameter* p : m.direct_parameters()) {
      if (full_grads_.count(p)) continue;
      full_grads_[p] = sim_.alloc(MemCategory::kCommBuffers, world_ * parts_.parts.at(p).chunk * gsize_);
    }
  }

  void post_backward(Module& m) override {
    for (Parameter* p : m.direct_parameters())
      if (--uses_left_[p] == 0) reduce(*p);
    coordinator_->release(m);
  }

  void end_backward() override {
    for (Parameter* p : params_) {
      if (uses_left_[p] > 0) {
        uses_left_[p] = 0;
        if (!full_grads_.count(p))
          full_grads_[p] = sim_.alloc(MemCategory::kCommBuffers, world_ * parts_.parts.at(p).chunk * gsize_);
        reduce(*p);
      }
    }
    while (!in_flight_.empty()) finish_one();
  }

  void apply_step() override {
    coordinator_->release_all();
    coordinator_->gather_persistent();
  }

 private:
  struct InFlight {
    Buf full_grad, recv;
    int64_t elems = 0, chunk = 0;
  };

  void reduce(Parameter& p) {
    const int64_t chunk = parts_.parts.at(&p).chunk;
    InFlight f;
    f.full_grad = std::move(full_grads_.at(&p));
    full_grads_.erase(&p);
    f.elems = world_ * chunk;
    f.chunk = chunk;
    if (e_.zero.reduce_scatter && world_ > 1) f.recv = sim_.alloc(MemCategory::kCommBuffers, chunk * gsize_);
    in_flight_elems_ += f.elems;
    in_flight_.push_back(std::move(f));
    const int64_t cap = e_.zero.overlap_comm ? e_.zero.reduce_bucket_size : 0;
    while (!in_flight_.empty() && in_flight_elems_ > cap) finish_one();
  }

  void finish_one() {
    InFlight f = std::move(in_flight_.front());
    in_flight_.pop_front();
    in_flight_elems_ -= f.elems;
    simulate_add_reduced(sim_, f.chunk, e_.gradient_dtype());
  }

  Sim& sim_;
  const EngineConfig& e_;
  int world_;
  std::vector<Parameter*> params_;
  Stage3Partitions parts_;
  int64_t gsize_ = 0;
  Buf param_shard_, grad_shard_, read_staging_;
  std::vector<Buf> store_;
  std::unique_ptr<CoordinatorSim> coordinator_;
  std::unordered_map<const Parameter*, int> uses_, uses_left_;
  std::unordered_map<const Parameter*, Buf> full_grads_;
  std::deque<InFlight> in_flight_;
  int64_t in_flight_elems_ = 0;
};

}  // namespace

int optimizer_state_arrays(const OptimizerConfig& o) {
  if (o.type == "SGD") return o.momentum != 0.0f ? 1 : 0;
  return 2;  // Adam, AdamW: exp_avg, exp_avg_sq
}

std::unique_ptr<StateSim> make_state_sim(Sim& sim, Module& model, const EngineConfig& e, int world, int rank,
                                         MemoryPlan& plan) {
  if (e.zero.stage == 3) return std::make_unique<Stage3StateSim>(sim, model, e, world, plan);
  return std::make_unique<FlatStateSim>(sim, model, e, world, rank, plan);
}

}  // namespace zero::memsim
