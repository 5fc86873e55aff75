// Optimizers over a flat fp32 master buffer (the whole model at stage 0, this
// rank's shard under ZeRO). An optimizer names the fp32 state arrays it needs
// beside the master weights (Adam: exp_avg, exp_avg_sq) but does not own
// them: the model state's store keeps them in memory or streams them through
// NVMe (zero/optimizer_state_store.h) and hands each step a slice of master
// and states. A step is one fused kernel: update, then write the model-dtype
// copy of the new weights. Every optimizer here is elementwise, so a buffer
// may be updated in pieces with bitwise the same result.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "runtime/backend/backend.h"

namespace zero {

struct OptimizerConfig {
  std::string type = "AdamW";  // "Adam", "AdamW", "SGD" (DeepSpeed's names)
  float lr = 1e-3f;
  float beta1 = 0.9f, beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  bool adam_w_mode = true;  // "Adam" is AdamW unless adam_w_mode is false (DeepSpeed)
  bool bias_correction = true;
  float momentum = 0.0f, dampening = 0.0f;  // SGD
  bool nesterov = false;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string_view name() const = 0;

  // What changes from step to step (the schedule, the loss scale, clipping).
  struct StepArgs {
    int64_t step = 1;  // 1-based count of applied updates (bias correction; SGD's first step)
    float lr = 1e-3f;
    // The gradient is multiplied by this first: 1 / (loss scale x clip coefficient).
    float grad_scale = 1.0f;
    // Adam's (beta1, beta2) for this step, when a schedule drives them (OneCycle).
    std::optional<std::pair<float, float>> betas;
  };

  // Names of the fp32 state arrays, each as long as the master buffer and
  // zero at the start (checkpoint tensor kinds: "exp_avg", ...).
  virtual std::vector<std::string> state_names() const = 0;

  // One update of master (fp32) from grad (model or fp32 dtype) and the
  // matching slices of the state arrays (state_names() order). When
  // param_out is defined it receives the new weights in its dtype in the same
  // pass.
  virtual void step(const Tensor& master, const Tensor& grad, absl::Span<const Tensor> state,
                    const Tensor& param_out, const StepArgs& args) = 0;
  // Whether the optimizer has betas a schedule may drive (Adam) or not (SGD).
  virtual bool has_betas() const = 0;
};

// Builds the optimizer named by config.type, running its kernels through
// `backend`. Unknown types are an error naming the type and the supported ones.
absl::StatusOr<std::unique_ptr<Optimizer>> make_optimizer(const OptimizerConfig& config, Backend& backend);

}  // namespace zero
