// Everything the engine needs to know about a run, already validated: the
// config parser (runtime/config) fills it from JSON; C++ users may fill it
// directly.
#pragma once

#include <cstdint>

#include "runtime/core/dtype.h"
#include "runtime/engine/optimizer.h"

namespace zero {

struct EngineConfig {
  // Model dtype: parameters and gradients (bf16.enabled -> bf16, fp16 -> fp16).
  // Master weights and optimizer state are always fp32.
  DType param_dtype = DType::kF32;

  int64_t micro_batch_size = 1;  // train_micro_batch_size_per_gpu
  int64_t gradient_accumulation_steps = 1;

  // Global-norm clipping (DeepSpeed's formula); 0 disables. DeepSpeed's
  // default is 1.0 since v0.19.3.
  float gradient_clipping = 1.0f;

  OptimizerConfig optimizer;
  uint64_t seed = 42;  // parameter initialisation
};

}  // namespace zero
