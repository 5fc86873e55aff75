// AdamW/Adam, SGD and Lion over flat buffers; see optimizer.h.
#include "kernels/optimizer.h"

#include <algorithm>
#include <tuple>

#include "core/check.h"
#include "core/strings.h"

namespace zero {

namespace {

class AdamOptimizer final : public Optimizer {
 public:
  AdamOptimizer(const OptimizerConfig& c, Backend& backend) : backend_(backend) {
    hyper_.beta1 = c.beta1;
    hyper_.beta2 = c.beta2;
    hyper_.eps = c.eps;
    hyper_.weight_decay = c.weight_decay;
    hyper_.adamw_mode = c.adam_w_mode;
    hyper_.bias_correction = c.bias_correction;
  }
  std::string_view name() const override { return hyper_.adamw_mode ? "AdamW" : "Adam"; }

  std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  void step(const Tensor& master, const Tensor& grad, absl::Span<const Tensor> state, const Tensor& param_out,
            const StepArgs& args) override {
    AdamWHyper h = hyper_;
    h.lr = args.lr;
    h.step = args.step;
    h.grad_scale = args.grad_scale;
    if (args.betas) std::tie(h.beta1, h.beta2) = *args.betas;
    backend_.ops().adamw(master, grad, state[0], state[1], param_out, h);
  }
  bool has_betas() const override { return true; }

 private:
  Backend& backend_;
  AdamWHyper hyper_;
};

class SgdOptimizer final : public Optimizer {
 public:
  SgdOptimizer(const OptimizerConfig& c, Backend& backend) : backend_(backend) {
    hyper_.momentum = c.momentum;
    hyper_.dampening = c.dampening;
    hyper_.weight_decay = c.weight_decay;
    hyper_.nesterov = c.nesterov;
  }
  std::string_view name() const override { return "SGD"; }
  // Plain SGD keeps no state; with momentum, PyTorch's momentum_buffer.
  std::vector<std::string> state_names() const override {
    if (hyper_.momentum == 0.0f) return {};
    return {"momentum_buffer"};
  }
  void step(const Tensor& master, const Tensor& grad, absl::Span<const Tensor> state, const Tensor& param_out,
            const StepArgs& args) override {
    SgdHyper h = hyper_;
    h.lr = args.lr;
    h.grad_scale = args.grad_scale;
    h.first_step = args.step == 1;
    backend_.ops().sgd(master, grad, state.empty() ? Tensor() : state[0], param_out, h);
  }
  bool has_betas() const override { return false; }

 private:
  Backend& backend_;
  SgdHyper hyper_;
};

// Lion (LionHyper): one state, the momentum exp_avg, as DeepSpeed's FusedLion.
class LionOptimizer final : public Optimizer {
 public:
  LionOptimizer(const OptimizerConfig& c, Backend& backend) : backend_(backend) {
    hyper_.beta1 = c.beta1;
    hyper_.beta2 = c.beta2;
    hyper_.weight_decay = c.weight_decay;
  }
  std::string_view name() const override { return "Lion"; }
  std::vector<std::string> state_names() const override { return {"exp_avg"}; }
  void step(const Tensor& master, const Tensor& grad, absl::Span<const Tensor> state, const Tensor& param_out,
            const StepArgs& args) override {
    LionHyper h = hyper_;
    h.lr = args.lr;
    h.grad_scale = args.grad_scale;
    if (args.betas) std::tie(h.beta1, h.beta2) = *args.betas;
    backend_.ops().lion(master, grad, state[0], param_out, h);
  }
  bool has_betas() const override { return true; }

 private:
  Backend& backend_;
  LionHyper hyper_;
};

// An fp32 optimizer over bf16 master weights and/or states, where the
// backend's kernel does not take them itself (SGD and Lion; Adam on backends
// without Ops::adamw_takes_narrow_master): each piece of
// kNarrowStepElems elements is widened into fp32 staging, stepped by the
// inner optimizer, and narrowed back (the backend's cast rounds to nearest
// even). fp32 arrays and the gradient pass through untouched.
class NarrowOptimizer final : public Optimizer {
 public:
  NarrowOptimizer(std::unique_ptr<Optimizer> inner, Backend& backend, const OptimizerPrecision& precision)
      : inner_(std::move(inner)), backend_(backend), precision_(precision) {
    auto staging = [&] { return backend_.empty({kNarrowStepElems}, DType::kF32, MemCategory::kWorkspace); };
    if (precision_.master != DType::kF32) master_ = staging();
    if (precision_.states != DType::kF32)
      for (size_t i = 0; i < inner_->state_names().size(); ++i) states_.push_back(staging());
  }
  std::string_view name() const override { return inner_->name(); }
  std::vector<std::string> state_names() const override { return inner_->state_names(); }
  bool has_betas() const override { return inner_->has_betas(); }

  void step(const Tensor& master, const Tensor& grad, absl::Span<const Tensor> state, const Tensor& param_out,
            const StepArgs& args) override {
    ZE_CHECK(master.dtype() == precision_.master) << master.debug_string();
    std::vector<Tensor> pieces(state.size());
    const int64_t n = master.numel();
    for (int64_t o = 0; o < n; o += kNarrowStepElems) {
      const Shape s{std::min(kNarrowStepElems, n - o)};
      auto widen = [&](const Tensor& narrow, const Tensor& staging) {
        if (!staging.defined()) return narrow.slice(o, s);
        const Tensor wide = staging.slice(0, s);
        backend_.ops().cast(narrow.slice(o, s), wide);
        return wide;
      };
      const Tensor m = widen(master, master_);
      for (size_t i = 0; i < state.size(); ++i) pieces[i] = widen(state[i], states_.empty() ? Tensor() : states_[i]);
      inner_->step(m, grad.slice(o, s), pieces, param_out.defined() ? param_out.slice(o, s) : Tensor(), args);
      if (master_.defined()) backend_.ops().cast(m, master.slice(o, s));
      for (size_t i = 0; i < states_.size(); ++i) backend_.ops().cast(pieces[i], state[i].slice(o, s));
    }
  }

 private:
  std::unique_ptr<Optimizer> inner_;
  Backend& backend_;
  OptimizerPrecision precision_;
  Tensor master_;                // fp32 staging of the master, when it is bf16
  std::vector<Tensor> states_;   // of each state, when they are bf16
};

}  // namespace

absl::Status check_optimizer_precision(const OptimizerPrecision& p, int zero_stage, DType param_dtype,
                                       DType grad_dtype) {
  if (p.states != DType::kF32 && p.master != DType::kBF16) {
    return absl::InvalidArgumentError(
        "bf16.bf16_optimizer_states: bf16_optimizer_states requires bf16_master_weights_and_grads to be enabled (as in "
        "DeepSpeed)");
  }
  if (p.master == DType::kF32) return absl::OkStatus();
  const bool bf16 = p.master == DType::kBF16;
  const std::string key = bf16 ? "bf16.bf16_master_weights_and_grads" : "fp16.fp16_master_weights_and_grads";
  const std::string_view section = bf16 ? "bf16" : "fp16";
  if (zero_stage < 1 || zero_stage > 3) {
    return absl::InvalidArgumentError(cat(key, ": ", bf16 ? "Bf16" : "Fp16", "_master_weights_and_grads is only "
                                          "supported with ZeRO Stage 1, 2, or 3 (as in DeepSpeed); set "
                                          "zero_optimization.stage"));
  }
  if (param_dtype != p.master) {
    return absl::InvalidArgumentError(cat(key, ": needs ", section, ".enabled true (the model's weights are the ",
                                          section, " master's values); the parameters here are ",
                                          dtype_name(param_dtype)));
  }
  if (grad_dtype != p.master) {
    return absl::InvalidArgumentError(cat(key, ": keeps gradients in ", section,
                                          ", but data_types.grad_accum_dtype asks for ", dtype_name(grad_dtype),
                                          "; remove one of them"));
  }
  return absl::OkStatus();
}

std::string_view optimizer_type_name(OptimizerType type) {
  switch (type) {
    case OptimizerType::kAdam:
      return "Adam";
    case OptimizerType::kAdamW:
      return "AdamW";
    case OptimizerType::kSGD:
      return "SGD";
    case OptimizerType::kLion:
      return "Lion";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<Optimizer>> make_optimizer(const OptimizerConfig& config, Backend& backend,
                                                          const OptimizerPrecision& precision) {
  std::unique_ptr<Optimizer> fp32;
  switch (config.type) {
    case OptimizerType::kAdam:
    case OptimizerType::kAdamW: {
      OptimizerConfig c = config;
      if (config.type == OptimizerType::kAdamW) c.adam_w_mode = true;
      fp32 = std::make_unique<AdamOptimizer>(c, backend);
      break;
    }
    case OptimizerType::kSGD:
      fp32 = std::make_unique<SgdOptimizer>(config, backend);
      break;
    case OptimizerType::kLion:
      fp32 = std::make_unique<LionOptimizer>(config, backend);
      break;
  }
  ZE_CHECK(fp32 != nullptr) << "optimizer type " << static_cast<int>(config.type);
  ZE_CHECK(dtype_is_float(precision.master) &&
           (precision.states == DType::kF32 || (precision.states == DType::kBF16 && precision.master == DType::kBF16)))
      << dtype_name(precision.master) << " master, " << dtype_name(precision.states) << " states";
  if (!precision.narrow()) return fp32;
  // Adam steps 16-bit arrays in one pass where the backend's kernel takes them.
  const bool adam = config.type == OptimizerType::kAdam || config.type == OptimizerType::kAdamW;
  if (adam && backend.ops().adamw_takes_narrow_master()) return fp32;
  return std::unique_ptr<Optimizer>(new NarrowOptimizer(std::move(fp32), backend, precision));
}

}  // namespace zero
