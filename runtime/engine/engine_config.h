// Everything the engine needs to know about a run, already validated: the
// config parser (runtime/config) fills it from JSON; C++ users may fill it
// directly.
#pragma once

#include <cstdint>
#include <optional>

#include "core/dtype.h"
#include "core/memory_tracker.h"
#include "graph/pipeline_partition.h"
#include "kernels/optimizer.h"
#include "offload/aio_config.h"
#include "runtime/engine/loss_scaler.h"
#include "runtime/engine/lr_scheduler.h"
#include "runtime/engine/pipeline_schedule.h"
#include "zero/zero_config.h"

namespace zero {

// DeepSpeed's activation_checkpointing section.
struct ActivationCheckpointingConfig {
  bool partition_activations = false;
  std::optional<int64_t> number_checkpoints;
  bool contiguous_memory_optimization = false;
  bool synchronize_checkpoint_boundary = false;
  bool profile = false;
  bool cpu_checkpointing = false;
};

// DeepSpeed's "pipeline" section with PipelineModule's arguments: the mesh
// has `stages` pipeline stages; the model is built as this rank's stage,
// its layers chosen by partition_method; each optimizer step runs its
// gradient_accumulation_steps micro-batches through `schedule`.
// activation_checkpoint_interval K > 0: each stage's layers in checkpoint
// segments of K (DeepSpeed's PipelineModule), 0: none.
// num_layers_per_virtual_stage L > 0: Megatron's interleaved stages
// (num_layers_per_virtual_pipeline_stage): v = n_layer / (stages L) chunks of
// L blocks per stage, run by the interleaved 1F1B (pipeline_schedule.h); it
// fixes the split (partition_method unused). 0: one chunk per stage. What
// the engine runs is the model's chunks (build_model reads this field).
struct PipelineConfig {
  int stages = 1;
  PartitionMethod partition_method = PartitionMethod::kParameters;  // DeepSpeed's default
  PipelineScheduleKind schedule = PipelineScheduleKind::k1F1B;
  int64_t activation_checkpoint_interval = 0;
  int64_t num_layers_per_virtual_stage = 0;
};

struct EngineConfig {
  // Model dtype of parameters (bf16.enabled -> bf16, fp16.enabled -> fp16).
  DType param_dtype = DType::kF32;
  // Master weights and optimizer state: fp32, or 16-bit master weights in
  // the model dtype with bf16.bf16_master_weights_and_grads or
  // fp16.fp16_master_weights_and_grads (and bf16 states with
  // bf16.bf16_optimizer_states); stages 1-3 only (check_optimizer_precision).
  OptimizerPrecision optimizer_precision;
  // Gradient buffers (data_types.grad_accum_dtype); unset = the model dtype,
  // as in DeepSpeed.
  std::optional<DType> grad_dtype;

  int64_t micro_batch_size = 1;  // train_micro_batch_size_per_gpu
  int64_t gradient_accumulation_steps = 1;

  // Global-norm clipping (DeepSpeed's formula); 0 disables. DeepSpeed's
  // default is 1.0 since v0.19.3.
  float gradient_clipping = 1.0f;

  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  // fp16: dynamic or static loss scaling; other dtypes: scale 1.
  LossScalerConfig loss_scaler;
  // Skip steps whose gradients hold inf/NaN: always for fp16; for bf16 when
  // bf16.check_grad_overflow (DeepSpeed's default since v0.19.3); never fp32.
  bool check_grad_overflow = false;

  ZeroConfig zero;
  // "aio": the io_uring engine behind NVMe offload.
  AioConfig aio;
  // DeepSpeed's pre- and post-communication gradient division: gradients are
  // divided by pre_divide before reduction (the data-parallel size, or
  // gradient_predivide_factor with prescale_gradients) and multiplied by
  // post_reduce_scale after (pre_divide / world size).
  double pre_divide = 1.0;
  float post_reduce_scale = 1.0f;
  ActivationCheckpointingConfig activation_checkpointing;
  PipelineConfig pipeline;

  uint64_t seed = 42;  // parameter initialisation and dropout masks (kernels/dropout_mask.h)
  // The parameters start at zero, not from `seed`: for a caller that loads a
  // checkpoint into the engine before its first step (a resumed run), which
  // overwrites every parameter (the loader refuses a tensor it cannot fill).
  bool skip_init = false;

  // For tests: run the device-side offload paths with the CPU backend
  // standing in for the device: offload_optimizer / offload_param "cpu"
  // (zero/host_step.h: the optimizer on a host backend of its own, gradients
  // and weights copied through pinned staging) and activation_checkpointing.
  // cpu_checkpointing (segment inputs copied out to a host backend of their
  // own and back for recompute; graph/context.h). Without it these
  // keys on the CPU backend move nothing (everything is in host memory
  // already). The memory planner follows it too. No config key sets it.
  bool force_offload_path = false;

  DType gradient_dtype() const { return grad_dtype.value_or(param_dtype); }
};

// Whether checkpointed segments keep their inputs in host memory
// (cpu_checkpointing) on a backend computing in `compute_tier`: on a device,
// or anywhere with force_offload_path. The engine and the planner both ask.
inline bool checkpoint_inputs_to_host(const EngineConfig& e, Tier compute_tier) {
  return e.activation_checkpointing.cpu_checkpointing && (compute_tier != Tier::kHost || e.force_offload_path);
}

}  // namespace zero
