// ZeRO stage 3; see stage3_model_state.h.
#include "zero/stage3_model_state.h"

#include "core/status.h"
#include "core/strings.h"
#include "zero/grad_buckets.h"
#include "zero/state_buffers.h"
#include "zero/window_sizes.h"

namespace zero {

Stage3ModelState::Stage3ModelState(Module& model, const ModelStateOptions& options, Backend& backend,
                                   Communicator& comm)
    : ModelState(options, backend, comm), model_(model) {}

absl::Status Stage3ModelState::init() {
  const int world = comm_.world_size(), rank = comm_.rank();
  params_ = held_parameters(model_);
  for (size_t i = 0; i < params_.size(); ++i) {
    num_parameters_ += params_[i]->numel();
    if (params_[i]->requires_grad()) {
      trainable_.push_back(params_[i]);
      num_trainable_parameters_ += params_[i]->numel();
    }
  }
  // Windows the config left unset are sized to the model (window_sizes.h);
  // the coordinator and the reductions below read them from options_.
  options_.zero = windows_for_model(options_.zero, num_trainable_parameters_, world);
  Stage3Partitions plan = plan_stage3_partitions(params_, world, options_.zero);
  parts_ = std::move(plan.parts);
  shard_elems_ = plan.shard_elems;
  // offload_param "nvme": the parameter shard lives in the NVMe store (in the
  // optimizer's swap records, or in a swap file of its own beside resident
  // optimizer state), and a gather reads one parameter's chunk at a time.
  const bool params_on_nvme = options_.zero.offload_param.device == OffloadDevice::kNvme;
  const int64_t max_chunk = plan.max_chunk;
  const Tier tier = backend_.compute_tier();
  auto alloc = [&](DType t, MemCategory c) -> absl::StatusOr<Tensor> {
    ZE_ASSIGN_OR_RETURN(auto s, backend_.allocate(static_cast<size_t>(shard_elems_) * dtype_size(t), tier, c));
    return Tensor(std::move(s), {shard_elems_}, t);
  };
  // offload_param "cpu" on a device backend: the shard lives in host memory
  // (pinned), the step writes it there, and a gather copies the chunk up.
  const bool params_on_host = host_offload_.parameters;
  if (params_on_host) {
    ZE_ASSIGN_OR_RETURN(auto s, backend_.allocate(static_cast<size_t>(shard_elems_) * dtype_size(options_.param_dtype),
                                                  Tier::kHost, MemCategory::kParameters));
    param_shard_ = Tensor(std::move(s), {shard_elems_}, options_.param_dtype);
  } else if (!params_on_nvme) {
    ZE_ASSIGN_OR_RETURN(param_shard_, alloc(options_.param_dtype, MemCategory::kParameters));
  }
  ZE_ASSIGN_OR_RETURN(grad_shard_, alloc(options_.grad_dtype, MemCategory::kGradients));
  backend_.ops().fill(grad_shard_, 0.0f);
  ZE_RETURN_IF_ERROR(init_optimizer_state(shard_elems_, Tensor(), params_on_nvme ? max_chunk : 0));
  // The frozen parameters' shard: beside the trainable one, or in host
  // memory where that is offloaded (offload_param "nvme" included: the
  // frozen chunks are never rewritten by a step, so they need no swap
  // records, and stay in pinned host memory).
  const bool frozen_on_host = host_offload_.parameters || host_offload_.parameters_on_nvme;
  if (plan.frozen_shard_elems > 0) {
    const int64_t bytes = plan.frozen_shard_elems * static_cast<int64_t>(dtype_size(options_.param_dtype));
    ZE_ASSIGN_OR_RETURN(auto s, backend_.allocate(static_cast<size_t>(bytes), frozen_on_host ? Tier::kHost : tier,
                                                  MemCategory::kParameters));
    frozen_shard_ = Tensor(std::move(s), {plan.frozen_shard_elems}, options_.param_dtype);
    ZE_RETURN_IF_ERROR(init_frozen_weights(frozen_on_host ? *host_backend_ : backend_, frozen_shard_));
  }
  // Each rank initialises only its chunk of each parameter; the padding is 0.
  for (Parameter* p : params_) {
    const ParamPartition& part = parts_.at(p);
    const int64_t lo = std::min(p->numel(), rank * part.chunk), hi = std::min(p->numel(), lo + part.chunk);
    OptimizerStateStore& store = part.frozen ? *frozen_store_ : *store_;
    ZE_RETURN_IF_ERROR(for_each_initial_piece(backend_, *p, options_.init_seed(), lo, hi, part.chunk,
                                              [&](int64_t o, absl::Span<const float> v) {
                                                return store.write(0, part.shard_offset + o, v);
                                              }));
  }
  ZE_RETURN_IF_ERROR(store_->flush());
  ZE_RETURN_IF_ERROR(cast_master_into(param_shard_));
  coordinator_ = std::make_unique<ParamCoordinator>(options_.zero, backend_, comm_, options_.param_dtype);
  // offload_param "nvme" on a device: a chunk read from the swap file lands
  // in host staging (pinned) before it goes up to its gather.
  Tensor read_staging;
  if (host_offload_.parameters_on_nvme) {
    ZE_ASSIGN_OR_RETURN(auto s, backend_.allocate(static_cast<size_t>(max_chunk) * dtype_size(options_.param_dtype),
                                                  Tier::kHost, MemCategory::kCommBuffers));
    read_staging = Tensor(std::move(s), {max_chunk}, options_.param_dtype);
  }
  coordinator_->set_partitions(param_shard_, parts_, params_on_nvme ? store_.get() : nullptr, params_on_host,
                               std::move(read_staging));
  if (frozen_shard_.defined()) coordinator_->set_frozen_shard(frozen_shard_, frozen_on_host);
  ZE_RETURN_IF_ERROR(coordinator_->gather_persistent());
  uses_ = count_parameter_uses(model_);
  return absl::OkStatus();
}

absl::Status Stage3ModelState::pre_forward(Module& m) { return coordinator_->fetch(m, false); }
absl::Status Stage3ModelState::post_forward(Module& m) { return coordinator_->release(m, false); }

void Stage3ModelState::begin_backward(bool) { uses_left_ = uses_; }

absl::Status Stage3ModelState::pre_backward(Module& m) {
  absl::Status fetched = coordinator_->fetch(m, true);
  for (Parameter* p : m.direct_parameters()) {
    if (!p->requires_grad() || !holds(*p)) continue;  // frozen: gathered, never a gradient
    if (p->grad.defined()) continue;    // a tied parameter's second use adds to the same buffer
    const ParamPartition& part = parts_.at(p);
    Tensor full = backend_.zeros({comm_.world_size() * part.chunk}, options_.grad_dtype, MemCategory::kCommBuffers);
    p->grad = full.slice(0, p->shape());
    full_grads_[p] = full;
  }
  return fetched;
}

absl::Status Stage3ModelState::post_backward(Module& m) {
  // A reduction's failure is kept for end_backward (the reductions still in
  // flight finish first); the release's is this hook's.
  for (Parameter* p : m.direct_parameters()) {
    if (p->requires_grad() && holds(*p) && --uses_left_[p] == 0) reduce(*p);
  }
  return coordinator_->release(m, true);
}

void Stage3ModelState::reduce(Parameter& p) {
  const ParamPartition& part = parts_.at(&p);
  const int world = comm_.world_size();
  InFlight f;
  // The gradient is the head of a full [world * chunk] buffer whose padding is 0.
  f.full_grad = std::move(full_grads_.at(&p));
  full_grads_.erase(&p);
  f.shard_offset = part.shard_offset;
  // Reduced in place: this rank's chunk of the sum lands in its own chunk of
  // the full gradient (the reduce-scatter's in-place form; reduce_scatter:
  // false, or one rank, all-reduces it whole), and no receive buffer is held.
  f.recv = f.full_grad.slice(comm_.rank() * part.chunk, {part.chunk});
  if (options_.zero.reduce_scatter && world > 1) {
    f.handle = comm_.reduce_scatter_async(f.full_grad.data(), f.recv.data(), std::vector<int64_t>(world, part.chunk),
                                          options_.grad_dtype);
  } else {
    f.handle = comm_.all_reduce_async(f.full_grad.data(), f.full_grad.numel(), options_.grad_dtype, ReduceOp::kSum);
  }
  p.grad = Tensor();
  in_flight_elems_ += f.full_grad.numel();
  in_flight_.push_back(std::move(f));
  // Bound what is in flight: reduce_bucket_size elements with overlap, nothing without.
  const int64_t cap = options_.zero.overlap_comm ? options_.zero.reduce_bucket_size : 0;
  while (!in_flight_.empty() && in_flight_elems_ > cap) note(finish_one());
}

absl::Status Stage3ModelState::finish_one() {
  InFlight f = std::move(in_flight_.front());
  in_flight_.pop_front();
  in_flight_elems_ -= f.full_grad.numel();
  ZE_RETURN_IF_ERROR(f.handle->wait());
  add_reduced(backend_, grad_shard_.slice(f.shard_offset, {f.recv.numel()}), f.recv, options_.post_reduce_scale);
  return absl::OkStatus();
}

absl::Status Stage3ModelState::end_backward() {
  // Parameters this backward did not reach still reduce (zeros), in model
  // order, so every rank issues the same collectives.
  for (Parameter* p : trainable_) {
    if (uses_left_[p] > 0) {
      uses_left_[p] = 0;
      if (!p->grad.defined()) {
        const ParamPartition& part = parts_.at(p);
        full_grads_[p] = backend_.zeros({comm_.world_size() * part.chunk}, options_.grad_dtype, MemCategory::kCommBuffers);
        p->grad = full_grads_[p].slice(0, p->shape());
      }
      reduce(*p);
    }
  }
  while (!in_flight_.empty()) note(finish_one());
  return std::exchange(error_, absl::OkStatus());
}

std::string Stage3ModelState::nonfinite_gradient_names() {
  std::string names;
  int shown = 0;
  for (Parameter* p : trainable_) {
    const ParamPartition& part = parts_.at(p);
    if (backend_.ops().count_nonfinite(grad_shard_.slice(part.shard_offset, {part.chunk})) == 0) continue;
    if (shown++ == 3) return names + ", ...";
    names += cat(names.empty() ? "" : ", ", p->name());
  }
  return names;
}

absl::Status Stage3ModelState::apply_step(const Optimizer::StepArgs& args) {
  // Gathered copies go stale with the update: release them, update the
  // shards, then re-gather the persistent parameters.
  ZE_RETURN_IF_ERROR(coordinator_->release_all());
  ZE_RETURN_IF_ERROR(step_sub_groups(grad_shard_, param_shard_, args));
  return coordinator_->gather_persistent();
}

std::vector<StateRange> Stage3ModelState::ranges_of(int rank, bool frozen) const {
  std::vector<StateRange> out;
  for (Parameter* p : params_) {
    const ParamPartition& part = parts_.at(p);
    if (part.frozen != frozen) continue;
    const int64_t lo = std::min(p->numel(), rank * part.chunk), hi = std::min(p->numel(), lo + part.chunk);
    if (lo < hi) out.push_back({p, lo, hi, part.shard_offset});
  }
  return out;
}

absl::Status Stage3ModelState::refresh_parameters() {
  // Released first: no gather may still be reading the shard the cast rewrites.
  ZE_RETURN_IF_ERROR(coordinator_->release_all());
  ZE_RETURN_IF_ERROR(cast_master_into(param_shard_));
  return coordinator_->gather_persistent();
}

absl::StatusOr<std::vector<float>> Stage3ModelState::gather_master(const Parameter& p) {
  const ParamPartition& part = parts_.at(&p);
  const int world = comm_.world_size();
  Tensor full = backend_.empty({world * part.chunk}, DType::kF32, MemCategory::kWorkspace);
  const Tensor mine = full.slice(comm_.rank() * part.chunk, {part.chunk});
  if (part.frozen) {  // no master: the weights
    ZE_ASSIGN_OR_RETURN(const std::vector<float> v, frozen_store_->read(0, part.shard_offset, part.chunk));
    upload_fp32(backend_, v, mine);
  } else {
    ZE_RETURN_IF_ERROR(copy_master(part.shard_offset, mine));
  }
  ZE_RETURN_IF_ERROR(comm_.all_gather(full.data(), part.chunk, part.chunk, DType::kF32));
  return download_fp32(backend_, full.slice(0, {p.numel()}));
}

absl::StatusOr<std::vector<float>> Stage3ModelState::gather_parameter(const Parameter& p) {
  Parameter& mp = const_cast<Parameter&>(p);
  const bool was_available = p.data.defined();
  ZE_RETURN_IF_ERROR(coordinator_->gather_now(mp));
  std::vector<float> out = download_fp32(backend_, p.data.view({p.numel()}));
  if (!was_available) coordinator_->release_one(mp);
  return out;
}

}  // namespace zero
