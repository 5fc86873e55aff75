// Stage-3 gather / prefetch / release; see param_coordinator.h.
#include "zero/param_coordinator.h"

#include <cstdio>

#include "runtime/base/status.h"
#include "runtime/base/strings.h"

namespace zero {

Stage3Partitions plan_stage3_partitions(const std::vector<Parameter*>& params, int world, const ZeroConfig& config) {
  Stage3Partitions out;
  int64_t persistent_total = 0;
  for (Parameter* p : params) {
    ParamPartition part;
    part.chunk = (p->numel() + world - 1) / world;
    part.shard_offset = out.shard_elems;
    if (p->numel() <= config.param_persistence_threshold &&
        persistent_total + p->numel() <= config.model_persistence_threshold) {
      part.persistent = true;
      persistent_total += p->numel();
    }
    out.shard_elems += part.chunk;
    out.parts[p] = part;
  }
  return out;
}

ParamCoordinator::ParamCoordinator(const ZeroConfig& config, Backend& backend, Communicator& comm, DType dtype)
    : config_(config), backend_(backend), comm_(comm), dtype_(dtype) {}

void ParamCoordinator::set_partitions(Tensor shard, std::unordered_map<const Parameter*, ParamPartition> parts) {
  shard_ = std::move(shard);
  parts_ = std::move(parts);
}

absl::Status ParamCoordinator::start_gather(Parameter& p) {
  const ParamPartition& part = parts_.at(&p);
  Slot& slot = slots_[&p];
  if (slot.full.defined()) return absl::OkStatus();  // available or in flight
  const int world = comm_.world_size();
  slot.full = backend_.empty({world * part.chunk}, dtype_,
                             part.persistent ? MemCategory::kParameters : MemCategory::kCommBuffers);
  // This rank's chunk goes to its place; the all-gather fills the others in place.
  backend_.copy(slot.full.slice(comm_.rank() * part.chunk, {part.chunk}),
                shard_.slice(part.shard_offset, {part.chunk}));
  slot.handle = comm_.all_gather_async(slot.full.data(), part.chunk, part.chunk, dtype_);
  if (!part.persistent) live_elems_ += world * part.chunk;
  ++gathers_;
  return absl::OkStatus();
}

absl::Status ParamCoordinator::wait_gather(Parameter& p) {
  Slot& slot = slots_.at(&p);
  if (slot.handle) {
    ZE_RETURN_IF_ERROR(slot.handle->wait());
    slot.handle.reset();
  }
  p.data = slot.full.slice(0, p.shape());
  return absl::OkStatus();
}

void ParamCoordinator::drop(Parameter& p) {
  auto it = slots_.find(&p);
  if (it == slots_.end() || !it->second.full.defined()) return;
  if (it->second.handle) (void)it->second.handle->wait();  // never free memory a collective still writes
  live_elems_ -= it->second.full.numel();
  slots_.erase(it);
  p.data = Tensor();
}

int64_t ParamCoordinator::gather_elements(const Module& m) const {
  int64_t n = 0;
  for (const Parameter* p : m.direct_parameters()) {
    const ParamPartition& part = parts_.at(p);
    if (!part.persistent) n += comm_.world_size() * part.chunk;
  }
  return n;
}

void ParamCoordinator::begin_iteration() {
  if (trace_state_ == TraceState::kRecord && !trace_.empty()) finish_trace();
  if (trace_state_ == TraceState::kInvalid) {
    trace_.clear();
    trace_state_ = TraceState::kRecord;
  }
  position_ = 0;
}

void ParamCoordinator::finish_trace() {
  trace_state_ = TraceState::kComplete;
  trace_prefix_elems_.assign(trace_.size() + 1, 0);
  for (size_t i = 0; i < trace_.size(); ++i)
    trace_prefix_elems_[i + 1] = trace_prefix_elems_[i] + gather_elements(*trace_[i].module);
}

void ParamCoordinator::record(Module& m, bool backward) {
  if (trace_state_ == TraceState::kRecord) {
    trace_.push_back({&m, backward});
    return;
  }
  if (trace_state_ != TraceState::kComplete) return;
  if (position_ < trace_.size() && trace_[position_].module == &m && trace_[position_].backward == backward) {
    ++position_;
    return;
  }
  // The model ran differently from the recorded order: stop prefetching and
  // record again from the next iteration.
  if (!warned_) {
    std::fprintf(stderr, "zero-train: warning: stage-3 module order changed at %s (%s); re-recording the trace\n",
                 m.name().c_str(), backward ? "backward" : "forward");
    warned_ = true;
  }
  trace_state_ = TraceState::kInvalid;
}

absl::Status ParamCoordinator::fetch(Module& m, bool backward) {
  record(m, backward);
  for (Parameter* p : m.direct_parameters()) ZE_RETURN_IF_ERROR(start_gather(*p));
  if (trace_state_ == TraceState::kComplete) prefetch_after(position_);
  for (Parameter* p : m.direct_parameters()) ZE_RETURN_IF_ERROR(wait_gather(*p));
  return absl::OkStatus();
}

void ParamCoordinator::prefetch_after(size_t position) {
  const int64_t budget = std::min(config_.prefetch_bucket_size, config_.max_live_parameters - live_elems_);
  int64_t issued = 0;
  for (size_t j = position; j < trace_.size() && issued < budget; ++j) {
    for (Parameter* p : trace_[j].module->direct_parameters()) {
      if (issued >= budget) break;
      const ParamPartition& part = parts_.at(p);
      if (part.persistent || slots_.count(p)) continue;
      if (!start_gather(*p).ok()) return;
      issued += comm_.world_size() * part.chunk;
      ++prefetches_;
    }
  }
}

bool ParamCoordinator::reused_soon(const Parameter* p, size_t position) const {
  if (trace_state_ != TraceState::kComplete) return false;
  for (size_t j = position; j < trace_.size(); ++j) {
    if (trace_prefix_elems_[j] - trace_prefix_elems_[position] > config_.max_reuse_distance) return false;
    for (const Parameter* q : trace_[j].module->direct_parameters())
      if (q == p) return true;
  }
  return false;
}

absl::Status ParamCoordinator::release(Module& m, bool backward) {
  for (Parameter* p : m.direct_parameters()) {
    if (parts_.at(p).persistent) continue;
    if (reused_soon(p, position_)) continue;
    drop(*p);
  }
  return absl::OkStatus();
}

absl::Status ParamCoordinator::release_all() {
  std::vector<Parameter*> held;
  for (auto& [p, slot] : slots_)
    if (!parts_.at(p).persistent) held.push_back(const_cast<Parameter*>(p));
  for (Parameter* p : held) drop(*p);
  return absl::OkStatus();
}

absl::Status ParamCoordinator::gather_persistent() {
  std::vector<Parameter*> persistent;
  for (auto& [p, part] : parts_)
    if (part.persistent) persistent.push_back(const_cast<Parameter*>(p));
  // Deterministic order across ranks: by shard offset.
  std::sort(persistent.begin(), persistent.end(),
            [&](Parameter* a, Parameter* b) { return parts_.at(a).shard_offset < parts_.at(b).shard_offset; });
  for (Parameter* p : persistent) {
    Slot& slot = slots_[p];
    if (!slot.full.defined()) {
      ZE_RETURN_IF_ERROR(start_gather(*p));
      continue;
    }
    const ParamPartition& part = parts_.at(p);
    backend_.copy(slot.full.slice(comm_.rank() * part.chunk, {part.chunk}), shard_.slice(part.shard_offset, {part.chunk}));
    slot.handle = comm_.all_gather_async(slot.full.data(), part.chunk, part.chunk, dtype_);
    ++gathers_;
  }
  for (Parameter* p : persistent) ZE_RETURN_IF_ERROR(wait_gather(*p));
  return absl::OkStatus();
}

absl::Status ParamCoordinator::gather_now(Parameter& p) {
  ZE_RETURN_IF_ERROR(start_gather(p));
  return wait_gather(p);
}

}  // namespace zero
