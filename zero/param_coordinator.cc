// Stage-3 gather / prefetch / release; see param_coordinator.h.
#include "zero/param_coordinator.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "core/status.h"
#include "core/strings.h"

namespace zero {

Stage3Partitions plan_stage3_partitions(const std::vector<Parameter*>& params, int world, const ZeroConfig& config) {
  Stage3Partitions out;
  int64_t persistent_total = 0;
  for (Parameter* p : params) {
    ParamPartition part;
    part.chunk = (p->numel() + world - 1) / world;
    part.frozen = !p->requires_grad();
    int64_t& shard = part.frozen ? out.frozen_shard_elems : out.shard_elems;
    part.shard_offset = shard;
    if (p->numel() <= config.param_persistence_threshold &&
        persistent_total + p->numel() <= config.model_persistence_threshold) {
      part.persistent = true;
      persistent_total += p->numel();
    }
    shard += part.chunk;
    if (!part.frozen) out.max_chunk = std::max(out.max_chunk, part.chunk);
    out.parts[p] = part;
  }
  return out;
}

ParamCoordinator::ParamCoordinator(const ZeroConfig& config, Backend& backend, Communicator& comm, DType dtype)
    : config_(config), backend_(backend), comm_(comm), dtype_(dtype), trace_(config, comm.world_size(), parts_) {}

void ParamCoordinator::set_partitions(Tensor shard, std::unordered_map<const Parameter*, ParamPartition> parts,
                                      OptimizerStateStore* swapped, bool host_shard, Tensor read_staging) {
  ZE_CHECK(swapped == nullptr || swapped->holds_parameters());
  ZE_CHECK(!(host_shard && swapped != nullptr));
  ZE_CHECK(!read_staging.defined() || (swapped != nullptr && read_staging.tier() == Tier::kHost));
  read_staging_ = std::move(read_staging);
  shard_ = std::move(shard);
  parts_ = std::move(parts);
  swapped_ = swapped;
  host_shard_ = host_shard;
  if (host_shard_ && copy_stream_ == kComputeStream) copy_stream_ = backend_.create_stream();
}

void ParamCoordinator::set_frozen_shard(Tensor shard, bool host) {
  ZE_CHECK(!host || shard.tier() == Tier::kHost) << shard.debug_string();
  frozen_shard_ = std::move(shard);
  frozen_host_shard_ = host;
  if (host && copy_stream_ == kComputeStream) copy_stream_ = backend_.create_stream();
}

absl::Status ParamCoordinator::begin_all_gather(Parameter& p, Slot& slot) {
  const ParamPartition& part = parts_.at(&p);
  // This rank's chunk goes to its place (swapped: the read put it there); the
  // all-gather fills the others in place.
  if (!swapped(p)) {
    const Tensor mine = slot.full.slice(comm_.rank() * part.chunk, {part.chunk});
    const Tensor src = (part.frozen ? frozen_shard_ : shard_).slice(part.shard_offset, {part.chunk});
    if (part.frozen ? frozen_host_shard_ : host_shard_) {
      // Up on the copy stream, overlapping what the compute stream already
      // has queued; the compute stream (and the collective behind it) waits.
      // slot.full stays alive until the gather is waited for, which is after.
      backend_.copy_async(mine.data(), src.data(), mine.nbytes(), copy_stream_);
      backend_.wait_event(kComputeStream, backend_.record_event(copy_stream_));
      ++host_copies_;
    } else {
      backend_.copy(mine, src);
    }
  }
  slot.handle = comm_.all_gather_async(slot.full.data(), part.chunk, part.chunk, dtype_);
  ++gathers_;
  return absl::OkStatus();
}

absl::StatusOr<std::optional<int64_t>> ParamCoordinator::issue_read(Parameter& p, bool may_skip) {
  const ParamPartition& part = parts_.at(&p);
  ZE_ASSIGN_OR_RETURN(std::optional<int64_t> ticket, swapped_->start_parameter_read(part.shard_offset, part.chunk));
  while (!ticket.has_value() && !may_skip) {
    // Every read buffer holds a chunk on its way: a prefetch waits for none
    // of them; a fetch lands the oldest (starting its all-gather) and retries.
    ZE_CHECK(!reading_.empty()) << "offload_param: no read buffer and no read in flight";
    ZE_RETURN_IF_ERROR(finish_read(*reading_.front()));
    ZE_ASSIGN_OR_RETURN(ticket, swapped_->start_parameter_read(part.shard_offset, part.chunk));
  }
  return ticket;
}

absl::Status ParamCoordinator::finish_read(Parameter& p) {
  Slot& slot = slots_.at(&p);
  const ParamPartition& part = parts_.at(&p);
  const int64_t ticket = *slot.read;
  slot.read.reset();
  reading_.erase(std::find(reading_.begin(), reading_.end(), &p));
  const Tensor mine = slot.full.slice(comm_.rank() * part.chunk, {part.chunk});
  if (!read_staging_.defined()) {
    ZE_RETURN_IF_ERROR(swapped_->finish_parameter_read(ticket, mine));
    return begin_all_gather(p, slot);
  }
  // On a device the read lands in host staging and goes up on the compute
  // stream, which the all-gather follows; copy() waits for it, so the one
  // staging buffer is free again for the next read that lands.
  const Tensor staged = read_staging_.slice(0, {part.chunk});
  ZE_RETURN_IF_ERROR(swapped_->finish_parameter_read(ticket, staged));
  backend_.copy(mine, staged);
  ++host_copies_;
  return begin_all_gather(p, slot);
}

absl::StatusOr<bool> ParamCoordinator::start_gather(Parameter& p, bool may_skip) {
  if (auto it = slots_.find(&p); it != slots_.end() && it->second.full.defined()) return true;  // available or in flight
  std::optional<int64_t> ticket;
  if (swapped(p)) {
    ZE_ASSIGN_OR_RETURN(ticket, issue_read(p, may_skip));
    if (!ticket.has_value()) return false;
  }
  Slot& slot = slots_[&p];
  slot.full = allocate_full(p);
  if (ticket.has_value()) {
    slot.read = ticket;
    reading_.push_back(&p);
    return true;
  }
  ZE_RETURN_IF_ERROR(begin_all_gather(p, slot));
  return true;
}

absl::Status ParamCoordinator::wait_gather(Parameter& p) {
  Slot& slot = slots_[&p];
  if (!slot.full.defined()) slot.full = allocate_full(p);  // its gather could not start: the error came then
  absl::Status s;
  if (slot.read.has_value()) s = finish_read(p);
  if (slot.handle) {
    s.Update(slot.handle->wait());
    slot.handle.reset();
  }
  p.data = slot.full.slice(0, p.shape());
  return s;
}

Tensor ParamCoordinator::allocate_full(const Parameter& p) {
  const ParamPartition& part = parts_.at(&p);
  if (!part.persistent) live_elems_ += comm_.world_size() * part.chunk;
  return backend_.empty({comm_.world_size() * part.chunk}, dtype_,
                        part.persistent ? MemCategory::kParameters : MemCategory::kCommBuffers);
}

void ParamCoordinator::drop(Parameter& p) {
  auto it = slots_.find(&p);
  if (it == slots_.end() || !it->second.full.defined()) return;
  // Never free memory a read or a collective still writes (a read in flight
  // still gathers: every rank issued it, so every rank completes it).
  if (it->second.read.has_value()) (void)finish_read(p);
  if (it->second.handle) (void)it->second.handle->wait();
  live_elems_ -= it->second.full.numel();
  slots_.erase(it);
  p.data = Tensor();
}

void ParamCoordinator::begin_iteration() { trace_.begin_iteration(); }

absl::Status ParamCoordinator::fetch(Module& m, bool backward) {
  if (!trace_.record(m, backward) && !warned_) {
    // The model ran differently from the recorded order: no prefetching
    // until the next iteration has recorded it again. Every rank sees the
    // same order, so the first says so, once.
    if (comm_.rank() == 0) {
      std::fprintf(stderr, "zero-train: warning: stage-3 module order changed at %s (%s); re-recording the trace\n",
                   m.name().empty() ? "the model's root" : m.name().c_str(), backward ? "backward" : "forward");
    }
    warned_ = true;
  }
  // Every parameter of m ends up defined, a failed gather's too (its values
  // undefined), so the pass runs to its end and the first error reaches the
  // engine as itself (graph/context.h's hook contract).
  absl::Status status;
  // Only the parameters this coordinator partitions (another state's, under
  // expert parallelism, are that state's to gather).
  std::vector<Parameter*> held;
  for (Parameter* p : m.direct_parameters())
    if (parts_.count(p)) held.push_back(p);
  for (Parameter* p : held) status.Update(start_gather(*p).status());
  if (status.ok()) prefetch();
  for (Parameter* p : held) status.Update(wait_gather(*p));
  return status;
}

void ParamCoordinator::prefetch() {
  const int64_t budget = std::min(config_.prefetch_bucket_size, config_.max_live_parameters - live_elems_);
  for (Parameter* p : trace_.prefetch(budget, [&](const Parameter* q) { return slots_.count(q) > 0; })) {
    absl::StatusOr<bool> started = start_gather(*p, /*may_skip=*/true);
    if (!started.ok() || !*started) return;  // an error shows again at the fetch
    ++prefetches_;
  }
}

absl::Status ParamCoordinator::release(Module& m, bool backward) {
  for (Parameter* p : m.direct_parameters()) {
    if (!parts_.count(p) || parts_.at(p).persistent) continue;
    if (trace_.reused_soon(p)) continue;
    drop(*p);
  }
  return absl::OkStatus();
}

absl::Status ParamCoordinator::release_all() {
  std::vector<Parameter*> held;
  for (auto& [p, slot] : slots_)
    if (!parts_.at(p).persistent) held.push_back(const_cast<Parameter*>(p));
  for (Parameter* p : held) drop(*p);
  // A persistent parameter's copy may still be in flight (one rank: the
  // gather itself waits for nothing).
  if (host_shard_ || frozen_host_shard_) backend_.synchronize_stream(copy_stream_);
  return absl::OkStatus();
}

absl::Status ParamCoordinator::gather_persistent() {
  std::vector<Parameter*> persistent;
  for (auto& [p, part] : parts_)
    if (part.persistent) persistent.push_back(const_cast<Parameter*>(p));
  // The same order on every rank (the map's is by address): by shard offset,
  // the trainable shard's first (the frozen shard's offsets start at 0 too).
  std::sort(persistent.begin(), persistent.end(), [&](Parameter* a, Parameter* b) {
    const ParamPartition &pa = parts_.at(a), &pb = parts_.at(b);
    return std::make_pair(pa.frozen, pa.shard_offset) < std::make_pair(pb.frozen, pb.shard_offset);
  });
  for (Parameter* p : persistent) {
    Slot& slot = slots_[p];
    if (!slot.full.defined()) {
      ZE_RETURN_IF_ERROR(start_gather(*p).status());
      continue;
    }
    // Already materialised: refresh it from the (updated) shard.
    if (swapped(*p)) {
      ZE_ASSIGN_OR_RETURN(slot.read, issue_read(*p, /*may_skip=*/false));
      reading_.push_back(p);
    } else {
      ZE_RETURN_IF_ERROR(begin_all_gather(*p, slot));
    }
  }
  for (Parameter* p : persistent) ZE_RETURN_IF_ERROR(wait_gather(*p));
  return absl::OkStatus();
}

absl::Status ParamCoordinator::gather_now(Parameter& p) {
  ZE_RETURN_IF_ERROR(start_gather(p).status());
  return wait_gather(p);
}

}  // namespace zero
