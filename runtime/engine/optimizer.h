// Optimizers over a flat fp32 master buffer (the whole model at stage 0, this
// rank's shard under ZeRO). Each owns its state tensors (tracked as optimizer
// state) sized to the buffer it was built for, and runs as one fused kernel
// per step: update, then write the model-dtype copy of the new weights.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
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

  // One update of master (fp32) from grad (model or fp32 dtype), which are
  // elements [offset, offset + numel) of what the optimizer was built for
  // (a sub-group; the whole buffer by default). When param_out is defined it
  // receives the new weights in its dtype in the same pass.
  virtual void step(const Tensor& master, const Tensor& grad, const Tensor& param_out, const StepArgs& args,
                    int64_t offset = 0) = 0;
  // Whether the optimizer has betas a schedule may drive (Adam) or not (SGD).
  virtual bool has_betas() const = 0;

  // Named state tensors, for checkpoints and memory accounting.
  virtual std::vector<std::pair<std::string, Tensor>> state() const = 0;

};

// Builds the optimizer named by config.type for `numel` master elements,
// allocating its state through `backend`. Unknown types are an error naming
// the type and the supported ones.
absl::StatusOr<std::unique_ptr<Optimizer>> make_optimizer(const OptimizerConfig& config,
                                                          int64_t numel, Backend& backend);

}  // namespace zero
