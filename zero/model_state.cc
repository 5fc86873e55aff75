// The stage factory; see model_state.h.
#include "zero/model_state.h"

#include <algorithm>

#include "core/status.h"
#include "core/strings.h"
#include "graph/parallel_layers.h"
#include "zero/flat_model_state.h"
#include "zero/stage3_model_state.h"
#include "zero/state_buffers.h"

namespace zero {

absl::StatusOr<std::unique_ptr<ModelState>> ModelState::create(Module& model, const ModelStateOptions& options,
                                                               Backend& backend, Communicator& comm) {
  const ZeroStage stage = options.zero.stage;
  ZE_RETURN_IF_ERROR(check_offload(
      options.zero, host_offload_for(options.zero, backend.compute_tier(), options.force_offload_path)));
  ZE_RETURN_IF_ERROR(
      check_optimizer_precision(options.optimizer_precision, stage_number(stage), options.param_dtype, options.grad_dtype));
  if (stage == ZeroStage::k3) {
    auto s = std::make_unique<Stage3ModelState>(model, options, backend, comm);
    ZE_RETURN_IF_ERROR(s->init());
    return std::unique_ptr<ModelState>(std::move(s));
  }
  auto s = std::make_unique<FlatModelState>(model, options, backend, comm);
  ZE_RETURN_IF_ERROR(s->init());
  return std::unique_ptr<ModelState>(std::move(s));
}

std::vector<Parameter*> ModelState::held_parameters(Module& model) const {
  std::vector<Parameter*> out;
  const std::vector<Parameter*> all = model.parameters();
  for (size_t i = 0; i < all.size(); ++i) {
    all[i]->set_index(static_cast<int64_t>(i));
    if (holds(*all[i])) out.push_back(all[i]);
  }
  return out;
}

double ModelState::local_grad_square_sum(const std::function<bool(const Parameter&)>& include) {
  const Tensor grads = owned_grads();
  double sum = 0.0;
  for (const StateRange& r : held_ranges()) {
    if (include(*r.param)) sum += backend_.ops().sum_squares(grads.slice(r.offset, {r.end - r.begin}));
  }
  return sum;
}

absl::Status ModelState::sum_gradient_over(const Parameter& p, Communicator& group) {
  const Tensor grads = owned_grads();
  const DType dtype = options_.grad_dtype;
  const Tensor sum = backend_.zeros({p.numel()}, dtype, MemCategory::kCommBuffers);
  const SplitRange share =
      grads_replicated() ? even_split(p.numel(), comm_.world_size(), comm_.rank()) : SplitRange{0, p.numel()};
  const std::vector<StateRange> held = held_ranges();
  for (const StateRange& r : held) {
    if (r.param != &p) continue;
    const int64_t a = std::max(r.begin, share.offset), b = std::min(r.end, share.offset + share.size);
    if (a < b) backend_.copy(sum.slice(a, {b - a}), grads.slice(r.offset + a - r.begin, {b - a}));
  }
  ZE_RETURN_IF_ERROR(annotate(group.all_reduce(sum.data(), p.numel(), dtype, ReduceOp::kSum),
                              cat("summing the gradient of ", p.name(), " over ", group.world_size(), " ranks")));
  for (const StateRange& r : held) {
    if (r.param == &p) backend_.copy(grads.slice(r.offset, {r.end - r.begin}), sum.slice(r.begin, {r.end - r.begin}));
  }
  return absl::OkStatus();
}

absl::Status ModelState::init_optimizer_state(int64_t numel, Tensor master, int64_t max_param_read) {
  // One path for "cpu" and "nvme" on a device: the store (resident or NVMe)
  // and the optimizer on a host backend of their own, the host step between
  // them and the compute backend; only the store differs.
  if (host_offload_.optimizer) host_backend_ = backend_.make_host_backend();
  Backend& state_backend = host_backend_ != nullptr ? *host_backend_ : backend_;
  ZE_CHECK(host_backend_ == nullptr || !master.defined());
  ZE_ASSIGN_OR_RETURN(optimizer_, make_optimizer(options_.optimizer, state_backend, options_.optimizer_precision));
  StateStoreOptions so;
  so.stage = stage_number(options_.zero.stage);
  so.sub_group_size = options_.zero.sub_group_size;
  so.offload_optimizer = options_.zero.offload_optimizer;
  so.offload_param = options_.zero.offload_param;
  so.aio = options_.aio;
  so.rank = comm_.rank();
  so.precision = options_.optimizer_precision;
  so.hold_parameters = max_param_read > 0;
  so.param_dtype = options_.param_dtype;
  so.max_param_read = max_param_read;
  ZE_ASSIGN_OR_RETURN(store_,
                      make_state_store(state_backend, numel, optimizer_->state_names(), so, std::move(master)));
  if (host_offload_.optimizer) {
    ZE_ASSIGN_OR_RETURN(host_step_,
                        HostStep::create(backend_, *host_backend_, numel,
                                         host_step_chunk_elems(numel, options_.zero.sub_group_size),
                                         options_.grad_dtype, options_.param_dtype,
                                         host_offload_.parameters || store_->holds_parameters(),
                                         host_offload_.optimizer_on_nvme));
  }
  return absl::OkStatus();
}

absl::Status ModelState::init_frozen_weights(Backend& backend, const Tensor& weights) {
  if (!weights.defined() || weights.numel() == 0) return absl::OkStatus();
  ZE_CHECK(weights.dtype() == options_.param_dtype && weights.tier() == backend.compute_tier())
      << weights.debug_string();
  OptimizerPrecision precision;
  precision.master = options_.param_dtype;  // the one array is the weights themselves
  ZE_ASSIGN_OR_RETURN(frozen_store_, make_resident_state_store(backend, weights.numel(), {}, weights.numel(),
                                                               precision, weights.view({weights.numel()})));
  return absl::OkStatus();
}

absl::Status ModelState::step_sub_groups(const Tensor& grads, const Tensor& param_out,
                                         const Optimizer::StepArgs& args) {
  if (host_step_ != nullptr) return host_step_->step(*store_, *optimizer_, grads, param_out, args);
  const size_t states = store_->names().size() - 1;
  return store_->for_each(
      [&](int64_t offset, absl::Span<const Tensor> arrays) {
        const Shape s{arrays[0].numel()};
        const Tensor out = store_->holds_parameters() ? arrays.back()
                           : param_out.defined()      ? param_out.slice(offset, s)
                                                      : Tensor();
        optimizer_->step(arrays[0], grads.slice(offset, s), arrays.subspan(1, states), out, args);
      },
      /*write_back=*/true);
}

absl::Status ModelState::cast_master_into(const Tensor& param_out) {
  if (host_step_ != nullptr) return host_step_->cast_master_into(*store_, param_out);
  const bool into_store = !param_out.defined();
  ZE_CHECK(!into_store || store_->holds_parameters());
  return store_->for_each(
      [&](int64_t offset, absl::Span<const Tensor> arrays) {
        backend_.ops().cast(arrays[0], into_store ? arrays.back() : param_out.slice(offset, {arrays[0].numel()}));
      },
      /*write_back=*/into_store);
}

absl::Status ModelState::copy_master(int64_t offset, const Tensor& dst) {
  ZE_ASSIGN_OR_RETURN(std::vector<float> v, store_->read(0, offset, dst.numel()));
  upload_fp32(backend_, v, dst);
  return absl::OkStatus();
}

}  // namespace zero
