// AdamW/Adam and SGD over flat buffers; see optimizer.h.
#include "runtime/engine/optimizer.h"

#include <tuple>

#include "runtime/base/strings.h"

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

}  // namespace

absl::StatusOr<std::unique_ptr<Optimizer>> make_optimizer(const OptimizerConfig& config, Backend& backend) {
  if (config.type == "Adam" || config.type == "AdamW") {
    OptimizerConfig c = config;
    if (config.type == "AdamW") c.adam_w_mode = true;
    return std::unique_ptr<Optimizer>(new AdamOptimizer(c, backend));
  }
  if (config.type == "SGD") return std::unique_ptr<Optimizer>(new SgdOptimizer(config, backend));
  return absl::InvalidArgumentError(
      cat("optimizer.type: \"", config.type, "\" is not supported (supported: Adam, AdamW, SGD)"));
}

}  // namespace zero
