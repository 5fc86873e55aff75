// The ZeRO paper's analytic model-state count (Rajbhandari et al., §3,
// Table 1): (2 + 2 + K) Psi per rank with stage-dependent division by the
// data-parallel degree, the factors of an engine config, what ZeroEngine
// allocates with DeepSpeed's padding, and DeepSpeed's own estimators. The
// full per-rank plan (activations, buffers, workspace, every tier) is the
// engine's dry run: runtime/engine/memory_plan.h.
#pragma once

#include <cstdint>

#include "runtime/engine/engine_config.h"

namespace zero {

// Bytes per parameter of each model state. The paper's mixed-precision Adam:
// 2 (fp16 parameters) + 2 (fp16 gradients) + K = 12 (fp32 master, m, v).
struct ModelStateFactors {
  double param_bytes = 2;
  double grad_bytes = 2;
  double optimizer_bytes = 12;  // K
};

struct ModelStateBytes {
  double parameters = 0, gradients = 0, optimizer_state = 0;
  double total() const { return parameters + gradients + optimizer_state; }
};

// Per-rank model-state bytes of `params` parameters at ZeRO `stage` (0: plain
// data parallelism; 1: P_os; 2: P_os+g; 3: P_os+g+p) over `world` ranks,
// without padding.
ModelStateBytes model_state_bytes(double params, int64_t world, int stage, const ModelStateFactors& f = {});

// The factors of an engine config: parameter and gradient dtypes, and K =
// the master (unless it aliases fp32 parameters at stage 0) plus each state
// array the configured optimizer keeps (asked of the optimizer itself), in
// their dtypes. The optimizer type must be one make_optimizer() knows.
ModelStateFactors model_state_factors(const EngineConfig& engine);

// What ZeroEngine itself allocates for model states of a `params`-element
// model held as one tensor: the paper's count plus DeepSpeed's padding (a
// multiple of 2W at stages 1-2, of W at stage 3) and the aliasing above.
ModelStateBytes engine_model_state_bytes(int64_t params, int64_t world, int stage, const EngineConfig& engine);
// The same with `frozen` of the `params` elements frozen (requires_grad
// false): they keep their parameter bytes (stage 3: divided by W, padded to
// W) but hold no gradient, master or optimizer state; the trainable rest is
// counted as above (its flat group padded to 2W at stages 1-2).
ModelStateBytes engine_model_state_bytes(int64_t params, int64_t frozen, int64_t world, int stage,
                                         const EngineConfig& engine);

// DeepSpeed's own estimators (estimate_zero2/3_model_states_mem_needs, no
// offload), for comparison: stage 2: 4 Psi + 16 Psi / W; stage 3:
// 4 largest_layer + 18 Psi / W. Device bytes per rank.
double deepspeed_zero2_estimate(double params, int64_t world);
double deepspeed_zero3_estimate(double params, double largest_layer_params, int64_t world);

}  // namespace zero
