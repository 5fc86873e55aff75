// The training engine (stage 0, one rank); see engine.h.
#include "runtime/engine/engine.h"

#include <chrono>
#include <cmath>

#include "runtime/base/status.h"
#include "runtime/base/strings.h"
#include "runtime/graph/init.h"

namespace zero {

absl::StatusOr<std::unique_ptr<Engine>> Engine::create(std::unique_ptr<Module> model,
                                                       const EngineConfig& config,
                                                       Backend& backend) {
  if (model == nullptr) return absl::InvalidArgumentError("initialize: model is null");
  if (config.micro_batch_size <= 0)
    return absl::InvalidArgumentError(cat("micro batch size ", config.micro_batch_size, " must be > 0"));
  if (config.gradient_accumulation_steps <= 0)
    return absl::InvalidArgumentError(
        cat("gradient_accumulation_steps ", config.gradient_accumulation_steps, " must be > 0"));
  if (config.gradient_clipping < 0)
    return absl::InvalidArgumentError(cat("gradient_clipping ", config.gradient_clipping, " must be >= 0"));
  std::unique_ptr<Engine> engine(new Engine(std::move(model), config, backend));
  ZE_RETURN_IF_ERROR(engine->init_state());
  return engine;
}

Engine::Engine(std::unique_ptr<Module> model, const EngineConfig& config, Backend& backend)
    : model_(std::move(model)),
      config_(config),
      backend_(backend),
      ctx_(backend, config.param_dtype),
      scaler_(config.loss_scaler),
      scheduler_(config.scheduler, config.optimizer.lr, /*momentum_capable=*/config.optimizer.type != "SGD") {}

Engine::~Engine() {
  ctx_.clear();
  for (Parameter* p : model_->parameters()) p->data = p->grad = Tensor();
}

absl::Status Engine::init_state() {
  std::vector<Parameter*> params = model_->parameters();
  for (size_t i = 0; i < params.size(); ++i) params[i]->set_index(static_cast<int64_t>(i));
  layout_ = FlatLayout(params);
  const int64_t n = layout_.numel();
  const Tier tier = backend_.compute_tier();

  ZE_ASSIGN_OR_RETURN(auto param_storage,
                      backend_.allocate(n * dtype_size(config_.param_dtype), tier, MemCategory::kParameters));
  params_ = Tensor(std::move(param_storage), {n}, config_.param_dtype);
  if (config_.param_dtype == DType::kF32) {
    master_ = params_;
  } else {
    ZE_ASSIGN_OR_RETURN(auto master_storage,
                        backend_.allocate(n * 4, tier, MemCategory::kOptimizerState));
    master_ = Tensor(std::move(master_storage), {n}, DType::kF32);
  }
  const DType grad_dtype = config_.gradient_dtype();
  ZE_ASSIGN_OR_RETURN(auto grad_storage,
                      backend_.allocate(n * dtype_size(grad_dtype), tier, MemCategory::kGradients));
  grads_ = Tensor(std::move(grad_storage), {n}, grad_dtype);
  backend_.ops().fill(grads_, 0.0f);

  // Initial values, parameter by parameter, through a host staging buffer
  // when the master weights are not in host memory.
  backend_.ops().fill(master_, 0.0f);  // padding
  for (const FlatSegment& seg : layout_.segments()) {
    Tensor dst = master_.slice(seg.offset, {seg.param->numel()});
    if (tier == Tier::kHost) {
      init_parameter_values(*seg.param, config_.seed, 0, seg.param->numel(), dst.f32());
    } else {
      Tensor staging = backend_.empty({seg.param->numel()}, DType::kF32, MemCategory::kWorkspace, Tier::kHost);
      init_parameter_values(*seg.param, config_.seed, 0, seg.param->numel(), staging.f32());
      backend_.copy(dst, staging);
    }
  }
  if (master_.data() != params_.data()) backend_.ops().cast(master_, params_);
  for (const FlatSegment& seg : layout_.segments()) {
    seg.param->data = layout_.param_view(params_, seg);
    seg.param->grad = layout_.param_view(grads_, seg);
  }
  ZE_ASSIGN_OR_RETURN(optimizer_, make_optimizer(config_.optimizer, n, backend_));
  return absl::OkStatus();
}

Tensor Engine::to_compute(const Tensor& t) {
  if (t.tier() == backend_.compute_tier()) return t;
  Tensor out = backend_.empty(t.shape(), t.dtype(), MemCategory::kActivations);
  backend_.copy(out, t);
  return out;
}

namespace {

int64_t count_valid_targets(const Tensor& targets) {
  ZE_CHECK(targets.dtype() == DType::kI32 && targets.tier() == Tier::kHost) << targets.debug_string();
  int64_t n = 0;
  for (int64_t i = 0; i < targets.numel(); ++i) n += targets.i32()[i] >= 0;
  return n;
}

}  // namespace

float Engine::forward(const Batch& batch) {
  const auto t0 = std::chrono::steady_clock::now();
  ctx_.clear();  // a forward without backward (or after an error) leaves nothing behind
  ctx_.set_grad_enabled(true);
  Tensor logits = ctx_.forward(*model_, to_compute(batch.inputs));
  const int64_t vocab = logits.dim(-1), rows = logits.numel() / vocab;
  ZE_CHECK_EQ(batch.targets.numel(), rows);
  const int64_t valid = count_valid_targets(batch.targets);
  // Mean over this micro-batch's tokens, divided by the accumulation steps
  // (DeepSpeed divides the loss by GAS inside backward), times the loss scale.
  const float grad_scale =
      valid == 0 ? 0.0f
                 : static_cast<float>(scaler_.scale() /
                                      (static_cast<double>(valid) * config_.gradient_accumulation_steps));
  Tensor losses = ctx_.activation({rows});
  backend_.ops().cross_entropy(logits.view({rows, vocab}), to_compute(batch.targets), grad_scale, losses);
  std::vector<float> host(rows);
  backend_.copy(host.data(), losses.data(), rows * sizeof(float));
  double sum = 0.0;
  for (float l : host) sum += l;
  const float loss = valid == 0 ? 0.0f : static_cast<float>(sum / valid);
  pending_dlogits_ = logits;
  loss_sum_ += loss;
  timing_.forward_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return loss;
}

void Engine::backward() {
  ZE_CHECK(pending_dlogits_.defined()) << "backward() without a forward()";
  const auto t0 = std::chrono::steady_clock::now();
  Tensor dlogits = std::move(pending_dlogits_);
  pending_dlogits_ = Tensor();
  ctx_.backward(*model_, dlogits);
  ZE_CHECK_EQ(ctx_.live_frames(), 0u);
  timing_.backward_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double Engine::global_grad_norm() { return std::sqrt(backend_.ops().sum_squares(grads_)); }

std::string Engine::nonfinite_gradient_names() {
  std::string names;
  int shown = 0;
  for (const FlatSegment& seg : layout_.segments()) {
    if (backend_.ops().count_nonfinite(seg.param->grad) == 0) continue;
    if (shown++ == 3) return names + ", ...";
    names += cat(names.empty() ? "" : ", ", seg.param->name());
  }
  return names;
}

absl::StatusOr<StepResult> Engine::step() {
  const auto t0 = std::chrono::steady_clock::now();
  StepResult r;
  r.boundary = is_accumulation_boundary();
  ++micro_step_;
  r.lr = static_cast<float>(scheduler_.lr());
  r.global_step = global_step_;
  r.skipped_steps = skipped_steps_;
  r.loss_scale = r.next_loss_scale = scaler_.scale();
  if (!r.boundary) {
    timing_.step_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  }

  const bool overflow = config_.check_grad_overflow && backend_.ops().count_nonfinite(grads_) > 0;
  if (overflow) r.overflow_in = nonfinite_gradient_names();
  ZE_RETURN_IF_ERROR(annotate(scaler_.update(overflow),
                              cat("step ", global_step_ + 1, ": inf/NaN gradients in ", r.overflow_in)));
  r.next_loss_scale = scaler_.scale();
  if (overflow) {
    // DeepSpeed: no update and no schedule step, but the step counts.
    r.skipped = true;
    r.grad_norm = -1.0;  // DeepSpeed's marker for a non-finite norm
    ++skipped_steps_;
  } else {
    // The norm of the loss-scaled gradients, then DeepSpeed's combined
    // unscale-and-clip: c = max(1, (norm/scale + 1e-6) / clip); grads *= 1/(c scale).
    const double scale = r.loss_scale;
    const double scaled_norm = global_grad_norm();
    r.grad_norm = scaled_norm / scale;
    double combined = scale;
    if (config_.gradient_clipping > 0.0f) {
      const double coef = (r.grad_norm + 1e-6) / config_.gradient_clipping;
      if (coef > 1.0) combined = coef * scale;
    }
    Optimizer::StepArgs args;
    args.lr = r.lr;
    args.grad_scale = static_cast<float>(1.0 / combined);
    if (auto betas = scheduler_.betas()) args.betas = std::make_pair(static_cast<float>(betas->first),
                                                                     static_cast<float>(betas->second));
    const Tensor param_out = master_.data() == params_.data() ? Tensor() : params_;
    optimizer_->step(master_, grads_, param_out, args);
    scheduler_.step();
  }
  backend_.ops().fill(grads_, 0.0f);
  r.global_step = ++global_step_;
  r.skipped_steps = skipped_steps_;
  r.loss = static_cast<float>(loss_sum_ / config_.gradient_accumulation_steps);
  loss_sum_ = 0.0;
  timing_.step_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.forward_s = timing_.forward_s;
  r.backward_s = timing_.backward_s;
  r.step_s = timing_.step_s;
  timing_ = StepResult();
  return r;
}

float Engine::evaluate(const Batch& batch) {
  ctx_.clear();
  ctx_.set_grad_enabled(false);
  Tensor logits = ctx_.forward(*model_, to_compute(batch.inputs));
  ctx_.set_grad_enabled(true);
  const int64_t vocab = logits.dim(-1), rows = logits.numel() / vocab;
  Tensor losses = ctx_.activation({rows});
  backend_.ops().cross_entropy(logits.view({rows, vocab}), to_compute(batch.targets), 0.0f, losses);
  std::vector<float> host(rows);
  backend_.copy(host.data(), losses.data(), rows * sizeof(float));
  const int64_t valid = count_valid_targets(batch.targets);
  double sum = 0.0;
  for (float l : host) sum += l;
  return valid == 0 ? 0.0f : static_cast<float>(sum / valid);
}

std::vector<float> Engine::master_values(const Parameter& p) {
  const FlatSegment& seg = layout_.segments().at(p.index());
  std::vector<float> out(p.numel());
  backend_.copy(out.data(), master_.slice(seg.offset, {p.numel()}).data(), p.numel() * 4);
  return out;
}

std::vector<float> Engine::grad_values(const Parameter& p) {
  const FlatSegment& seg = layout_.segments().at(p.index());
  Tensor g = backend_.empty({p.numel()}, DType::kF32, MemCategory::kWorkspace);
  backend_.ops().cast(grads_.slice(seg.offset, {p.numel()}), g);
  std::vector<float> out(p.numel());
  backend_.copy(out.data(), g.data(), p.numel() * 4);
  return out;
}

}  // namespace zero
