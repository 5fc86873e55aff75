// The analytic model-state count; see model_state_bytes.h.
#include "runtime/engine/model_state_bytes.h"

#include <cmath>

#include "core/check.h"
#include "kernels/dry_run/dry_run_backend.h"
#include "kernels/optimizer.h"

namespace zero {

ModelStateBytes model_state_bytes(double params, int64_t world, int stage, const ModelStateFactors& f) {
  const double w = static_cast<double>(world);
  ModelStateBytes b{f.param_bytes * params, f.grad_bytes * params, f.optimizer_bytes * params};
  if (stage >= 1) b.optimizer_state /= w;
  if (stage >= 2) b.gradients /= w;
  if (stage >= 3) b.parameters /= w;
  return b;
}

ModelStateFactors model_state_factors(const EngineConfig& e) {
  // The optimizer says how many state arrays it keeps (built on a dry run,
  // which holds no memory): a new optimizer is counted right by construction.
  DryRunBackend dry(Tier::kHost);
  absl::StatusOr<std::unique_ptr<Optimizer>> optimizer = make_optimizer(e.optimizer, dry);
  ZE_CHECK(optimizer.ok()) << optimizer.status().ToString();
  const double arrays = static_cast<double>((*optimizer)->state_names().size());
  const bool aliased = e.zero.stage == ZeroStage::k0 && e.param_dtype == DType::kF32;
  const double master = aliased ? 0.0 : static_cast<double>(dtype_size(e.optimizer_precision.master));
  const double states = static_cast<double>(dtype_size(e.optimizer_precision.states));
  return {static_cast<double>(dtype_size(e.param_dtype)), static_cast<double>(dtype_size(e.gradient_dtype())),
          master + states * arrays};
}

ModelStateBytes engine_model_state_bytes(int64_t params, int64_t world, int stage, const EngineConfig& engine) {
  EngineConfig e = engine;
  e.zero.stage = zero_stage(stage);
  const int64_t pad = stage == 0 ? 1 : stage == 3 ? world : 2 * world;
  const int64_t padded = (params + pad - 1) / pad * pad;
  return model_state_bytes(static_cast<double>(padded), world, stage, model_state_factors(e));
}

ModelStateBytes engine_model_state_bytes(int64_t params, int64_t frozen, int64_t world, int stage,
                                         const EngineConfig& engine) {
  ZE_CHECK(frozen >= 0 && frozen <= params) << frozen << " frozen of " << params;
  ModelStateBytes b = engine_model_state_bytes(params - frozen, world, stage, engine);
  EngineConfig e = engine;
  e.zero.stage = zero_stage(stage);
  const int64_t pad = stage == 3 ? world : 1;
  const double padded = static_cast<double>((frozen + pad - 1) / pad * pad);
  b.parameters += model_state_factors(e).param_bytes * padded / static_cast<double>(pad);
  return b;
}

double deepspeed_zero2_estimate(double params, int64_t world) {
  return 4.0 * params + std::floor(16.0 * params / static_cast<double>(world));
}

double deepspeed_zero3_estimate(double params, double largest_layer_params, int64_t world) {
  return 4.0 * largest_layer_params + std::floor(18.0 * params / static_cast<double>(world));
}

}  // namespace zero
