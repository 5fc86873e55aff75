// AdamW/Adam and SGD over flat buffers; see optimizer.h.
#include "runtime/engine/optimizer.h"

#include <tuple>

#include "runtime/base/strings.h"

namespace zero {

namespace {

class AdamOptimizer final : public Optimizer {
 public:
  AdamOptimizer(const OptimizerConfig& c, int64_t numel, Backend& backend)
      : backend_(backend),
        m_(backend.zeros({numel}, DType::kF32, MemCategory::kOptimizerState)),
        v_(backend.zeros({numel}, DType::kF32, MemCategory::kOptimizerState)) {
    hyper_.beta1 = c.beta1;
    hyper_.beta2 = c.beta2;
    hyper_.eps = c.eps;
    hyper_.weight_decay = c.weight_decay;
    hyper_.adamw_mode = c.adam_w_mode;
    hyper_.bias_correction = c.bias_correction;
  }
  std::string_view name() const override { return hyper_.adamw_mode ? "AdamW" : "Adam"; }

  void step(const Tensor& master, const Tensor& grad, const Tensor& param_out, const StepArgs& args,
            int64_t offset) override {
    AdamWHyper h = hyper_;
    h.lr = args.lr;
    h.step = args.step;
    h.grad_scale = args.grad_scale;
    if (args.betas) std::tie(h.beta1, h.beta2) = *args.betas;
    const Shape shape{master.numel()};
    backend_.ops().adamw(master, grad, m_.slice(offset, shape), v_.slice(offset, shape), param_out, h);
  }
  bool has_betas() const override { return true; }
  std::vector<std::pair<std::string, Tensor>> state() const override {
    return {{"exp_avg", m_}, {"exp_avg_sq", v_}};
  }

 private:
  Backend& backend_;
  AdamWHyper hyper_;
  Tensor m_, v_;
};

class SgdOptimizer final : public Optimizer {
 public:
  SgdOptimizer(const OptimizerConfig& c, int64_t numel, Backend& backend) : backend_(backend) {
    hyper_.momentum = c.momentum;
    hyper_.dampening = c.dampening;
    hyper_.weight_decay = c.weight_decay;
    hyper_.nesterov = c.nesterov;
    if (c.momentum != 0.0f) buf_ = backend.zeros({numel}, DType::kF32, MemCategory::kOptimizerState);
  }
  std::string_view name() const override { return "SGD"; }

  void step(const Tensor& master, const Tensor& grad, const Tensor& param_out, const StepArgs& args,
            int64_t offset) override {
    SgdHyper h = hyper_;
    h.lr = args.lr;
    h.grad_scale = args.grad_scale;
    h.first_step = args.step == 1;
    backend_.ops().sgd(master, grad, buf_.defined() ? buf_.slice(offset, {master.numel()}) : buf_, param_out, h);
  }
  bool has_betas() const override { return false; }
  std::vector<std::pair<std::string, Tensor>> state() const override {
    if (!buf_.defined()) return {};
    return {{"momentum_buffer", buf_}};
  }

 private:
  Backend& backend_;
  SgdHyper hyper_;
  Tensor buf_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Optimizer>> make_optimizer(const OptimizerConfig& config,
                                                          int64_t numel, Backend& backend) {
  if (config.type == "Adam" || config.type == "AdamW") {
    OptimizerConfig c = config;
    if (config.type == "AdamW") c.adam_w_mode = true;
    return std::unique_ptr<Optimizer>(new AdamOptimizer(c, numel, backend));
  }
  if (config.type == "SGD") return std::unique_ptr<Optimizer>(new SgdOptimizer(config, numel, backend));
  return absl::InvalidArgumentError(
      cat("optimizer.type: \"", config.type, "\" is not supported (supported: Adam, AdamW, SGD)"));
}

}  // namespace zero
