// DeepSpeed's loss scaler; see loss_scaler.h.
#include "runtime/engine/loss_scaler.h"

#include <algorithm>
#include <cmath>

namespace zero {

LossScaler::LossScaler(const LossScalerConfig& config) : config_(config) {
  state_.scale = config.dynamic ? std::ldexp(1.0, static_cast<int>(config.initial_scale_power))
                                : config.static_scale;
  state_.hysteresis = config.hysteresis;
}

absl::Status LossScaler::update(bool overflow) {
  if (!config_.dynamic) return absl::OkStatus();
  LossScalerState& s = state_;
  if (overflow) {
    if (config_.hysteresis == 1 || s.hysteresis == 1) {
      if (s.scale == config_.min_scale && config_.raise_error_at_min_scale) {
        return absl::FailedPreconditionError(
            "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.");
      }
      s.scale = std::max(s.scale / 2.0, config_.min_scale);
    } else {
      s.hysteresis -= 1;
    }
    s.last_overflow_iter = s.iter;
  } else {
    if (config_.consecutive_hysteresis) s.hysteresis = config_.hysteresis;
    const int64_t stable = s.iter - s.last_overflow_iter - 1;
    if (stable > 0 && stable % config_.scale_window == 0) {
      if (!config_.consecutive_hysteresis) s.hysteresis = config_.hysteresis;
      s.scale *= 2.0;
    }
  }
  s.iter += 1;
  return absl::OkStatus();
}

}  // namespace zero
