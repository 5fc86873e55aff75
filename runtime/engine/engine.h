// The training engine, in the spirit of deepspeed.initialize(): it takes a
// model and a config, owns every byte of model state, and runs
//
//   for each micro-batch:  loss = engine.forward(batch); engine.backward(); engine.step();
//
// step() is called every micro-batch and updates the weights at the gradient-
// accumulation boundary (DeepSpeed's semantics): the loss is divided by
// gradient_accumulation_steps inside the backward pass, the global gradient
// norm is taken, clipping and the optimizer run as one fused pass per buffer,
// and the new weights are written in the model dtype.
//
// Model state lives in flat buffers with one FlatLayout: parameters (model
// dtype), gradients (model dtype), fp32 master weights (an alias of the
// parameters when the model is fp32) and the optimizer state. Module
// parameters are views into them.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/engine/engine_config.h"
#include "runtime/engine/optimizer.h"
#include "runtime/graph/context.h"
#include "zero/flat_layout.h"

namespace zero {

// One micro-batch. inputs: int32 token ids [B, T] (or fp32 features [B, F]);
// targets: int32 [B, T] (or [B]); negative targets are ignored.
struct Batch {
  Tensor inputs;
  Tensor targets;
};

struct StepResult {
  bool boundary = false;      // an optimizer step happened (updated or skipped)
  bool skipped = false;       // gradients held inf/NaN: no update (fp16, bf16 checks)
  int64_t global_step = 0;    // optimizer steps so far, skipped ones included (as DeepSpeed)
  int64_t skipped_steps = 0;  // of those, skipped for overflow
  float loss = 0.0f;          // mean loss over the micro-batches of this step
  float lr = 0.0f;            // the learning rate this step used
  double grad_norm = 0.0;     // global L2 norm of the unscaled gradients, before clipping
  double loss_scale = 1.0;    // the scale this step's gradients carried
  double next_loss_scale = 1.0;  // the scale after this step's update
  std::string overflow_in;    // first parameters whose gradient held inf/NaN, when skipped
  // Wall time of this optimizer step's phases, summed over its micro-steps.
  double forward_s = 0, backward_s = 0, step_s = 0;
};

class Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> create(std::unique_ptr<Module> model,
                                                        const EngineConfig& config,
                                                        Backend& backend);
  ~Engine();

  // Runs the model and the fused softmax cross-entropy; returns the mean loss
  // over the micro-batch's targets. Keeps what backward() needs.
  float forward(const Batch& batch);
  // Backward pass of the last forward, accumulating into the gradients.
  void backward();
  // Counts the micro-step; at the accumulation boundary checks for overflow,
  // clips, updates, advances the LR schedule and zeroes the gradients. Fails
  // only when fp16's loss scale cannot go lower (DeepSpeed's exit).
  absl::StatusOr<StepResult> step();

  // Loss of a batch without touching gradients or saving activations.
  float evaluate(const Batch& batch);

  Module& model() { return *model_; }
  Backend& backend() { return backend_; }
  const EngineConfig& config() const { return config_; }
  const FlatLayout& layout() const { return layout_; }
  double loss_scale() const { return scaler_.scale(); }
  const LrScheduler& scheduler() const { return scheduler_; }
  int64_t global_step() const { return global_step_; }
  int64_t num_parameters() const { return layout_.real_numel(); }
  bool is_accumulation_boundary() const {
    return (micro_step_ + 1) % config_.gradient_accumulation_steps == 0;
  }

  // The fp32 master copy of one parameter (host), for tests and tools.
  std::vector<float> master_values(const Parameter& p);
  // The current gradient of one parameter as fp32 (host).
  std::vector<float> grad_values(const Parameter& p);

 private:
  Engine(std::unique_ptr<Module> model, const EngineConfig& config, Backend& backend);
  absl::Status init_state();
  Tensor to_compute(const Tensor& host);
  double global_grad_norm();
  std::string nonfinite_gradient_names();

  std::unique_ptr<Module> model_;
  EngineConfig config_;
  Backend& backend_;
  Context ctx_;
  FlatLayout layout_;

  Tensor params_;  // model dtype
  Tensor grads_;   // gradient dtype (the model dtype unless data_types.grad_accum_dtype)
  Tensor master_;  // fp32 (== params_ when the model is fp32)
  std::unique_ptr<Optimizer> optimizer_;
  LossScaler scaler_;
  LrScheduler scheduler_;

  Tensor pending_dlogits_;  // set by forward(), consumed by backward()
  int64_t micro_step_ = 0;
  int64_t global_step_ = 0;
  int64_t skipped_steps_ = 0;
  double loss_sum_ = 0.0;   // over the micro-batches of the current step
  StepResult timing_;       // phase times accumulating over the current step
};

// deepspeed.initialize() for C++.
inline absl::StatusOr<std::unique_ptr<Engine>> initialize(std::unique_ptr<Module> model,
                                                          const EngineConfig& config,
                                                          Backend& backend) {
  return Engine::create(std::move(model), config, backend);
}

}  // namespace zero
