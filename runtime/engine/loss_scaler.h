// fp16 loss scaling with DeepSpeed's exact rules (runtime/fp16/loss_scaler.py).
//
// Dynamic (fp16.loss_scale == 0): the scale starts at 2^initial_scale_power.
//  * overflow, and hysteresis has run down to 1 (or hysteresis == 1):
//      at min_loss_scale -> error "Current loss scale already at minimum -
//      cannot decrease scale anymore. Exiting run."; else scale =
//      max(scale / 2, min_loss_scale);
//  * overflow otherwise: hysteresis -= 1, scale unchanged;
//  * no overflow: with consecutive_hysteresis, hysteresis refills; when
//      stable = iter - last_overflow_iter - 1 is > 0 and a multiple of
//      loss_scale_window, hysteresis refills and the scale doubles;
//  * every update (overflow or not) advances iter.
// Static (loss_scale > 0, or bf16/fp32 with scale 1): never changes.
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace zero {

struct LossScalerConfig {
  bool dynamic = false;
  double static_scale = 1.0;       // used when !dynamic
  int64_t initial_scale_power = 16;
  int64_t scale_window = 1000;     // loss_scale_window
  int64_t hysteresis = 2;          // delayed_shift
  bool consecutive_hysteresis = false;
  double min_scale = 1.0;
  bool raise_error_at_min_scale = true;
};

struct LossScalerState {
  double scale = 1.0;
  int64_t iter = 0;
  int64_t last_overflow_iter = -1;
  int64_t hysteresis = 2;
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerConfig& config);

  double scale() const { return state_.scale; }
  bool dynamic() const { return config_.dynamic; }
  // Applies one optimizer step's outcome. Fails (with DeepSpeed's message)
  // only when an overflow happens at the minimum scale.
  absl::Status update(bool overflow);

  const LossScalerState& state() const { return state_; }
  void set_state(const LossScalerState& s) { state_ = s; }

 private:
  LossScalerConfig config_;
  LossScalerState state_;
};

}  // namespace zero
