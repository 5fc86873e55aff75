// Optimizers over a flat master buffer (the whole model at stage 0, this
// rank's shard under ZeRO). An optimizer names the state arrays it needs
// beside the master weights (Adam: exp_avg, exp_avg_sq; Lion: exp_avg) but
// does not own them: the model state's store keeps them in memory or streams
// them through NVMe (offload/optimizer_state_store.h) and hands each step a
// slice of master and states. A step is one fused kernel: update, then write
// the model-dtype copy of the new weights. Every optimizer here is
// elementwise, so a buffer may be updated in pieces with bitwise the same
// result.
//
// Master weights and states are fp32, or 16-bit (DeepSpeed's
// bf16.bf16_master_weights_and_grads and bf16_optimizer_states,
// fp16.fp16_master_weights_and_grads): then the step is the fp32 step over
// the widened values, narrowed back with round-to-nearest-even, as DeepSpeed's
// CPU Adam does (the arithmetic is fp32 either way; no stochastic rounding).
// Adam on the CPU does it in registers in one pass (Ops::adamw); otherwise
// each piece of the 16-bit arrays is widened into fp32 staging, stepped by the
// fp32 kernel and narrowed back.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/backend.h"

namespace zero {

// The optimizers, by DeepSpeed's names for them (optimizer.type).
enum class OptimizerType { kAdam, kAdamW, kSGD, kLion };
// "Adam", "AdamW", "SGD", "Lion".
std::string_view optimizer_type_name(OptimizerType type);

struct OptimizerConfig {
  OptimizerType type = OptimizerType::kAdamW;
  float lr = 1e-3f;
  float beta1 = 0.9f, beta2 = 0.999f;  // Adam's; Lion's are (0.9, 0.99) (the config sets them)
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // decoupled for AdamW and Lion
  bool adam_w_mode = true;  // "Adam" is AdamW unless adam_w_mode is false (DeepSpeed)
  bool bias_correction = true;
  float momentum = 0.0f, dampening = 0.0f;  // SGD
  bool nesterov = false;
};

// The dtypes of the master weights and of the optimizer states.
struct OptimizerPrecision {
  DType master = DType::kF32;  // kF32, kBF16 or kF16 (the model dtype)
  DType states = DType::kF32;  // kF32, or kBF16 with a bf16 master
  bool narrow() const { return master != DType::kF32 || states != DType::kF32; }
};

// Elements a narrow (bf16) step widens at a time; its fp32 staging, one
// array per bf16 array, is tracked workspace on the optimizer's backend.
inline constexpr int64_t kNarrowStepElems = int64_t{1} << 18;
// Bytes of that staging for `state_arrays` states (none is made where the
// backend's kernel takes the 16-bit arrays itself: Adam on the CPU).
inline int64_t narrow_step_staging_bytes(const OptimizerPrecision& p, int state_arrays) {
  const int64_t arrays = (p.master != DType::kF32 ? 1 : 0) + (p.states != DType::kF32 ? state_arrays : 0);
  return arrays * kNarrowStepElems * 4;
}

// The precisions a run can use, as DeepSpeed's config rules and ours say, each
// error naming its key: a 16-bit master (bf16_master_weights_and_grads,
// fp16_master_weights_and_grads) only at ZeRO stages 1-3 (DeepSpeed's rule),
// in the model dtype (the model's weights are the master's values) with
// gradients in it too (the key covers both); bf16 states only with a bf16
// master (DeepSpeed's rule). The config parser, the engine and the planner
// all ask this one function.
absl::Status check_optimizer_precision(const OptimizerPrecision& p, int zero_stage, DType param_dtype,
                                       DType grad_dtype);

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
    // Adam's or Lion's (beta1, beta2) for this step, when a schedule drives them (OneCycle).
    std::optional<std::pair<float, float>> betas;
  };

  // Names of the state arrays (fp32, or bf16 with bf16_optimizer_states), each
  // as long as the master buffer and zero at the start (checkpoint tensor
  // kinds: "exp_avg", ...).
  virtual std::vector<std::string> state_names() const = 0;

  // One update of master (the precision's dtype) from grad (model or fp32
  // dtype) and the matching slices of the state arrays (state_names() order).
  // When param_out is defined it receives the new weights in its dtype in the
  // same pass.
  virtual void step(const Tensor& master, const Tensor& grad, absl::Span<const Tensor> state,
                    const Tensor& param_out, const StepArgs& args) = 0;
  // Whether the optimizer has betas a schedule may drive (Adam, Lion) or not (SGD).
  virtual bool has_betas() const = 0;
};

// Builds the optimizer config.type names, running its kernels through
// `backend`, over master weights and states of `precision`.
absl::StatusOr<std::unique_ptr<Optimizer>> make_optimizer(const OptimizerConfig& config, Backend& backend,
                                                          const OptimizerPrecision& precision = {});

}  // namespace zero
