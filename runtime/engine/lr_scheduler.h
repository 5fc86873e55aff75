// DeepSpeed's learning-rate schedules (runtime/lr_schedules.py), by their
// formulas. t is DeepSpeed's last_batch_iteration: -1 at construction, +1 per
// step(). The engine takes lr() for an optimizer step and calls step() after
// it, once per optimizer step and never on a step skipped for overflow, as
// DeepSpeed's engine does. So the first optimizer step runs at t = -1 (for the
// warm-up schedules that is warmup_min_lr, or lr 0 for WarmupCosineLR).
//
//  WarmupLR        lr = min + (max - min) g, g = log(t+1)/log(N) or t/N while
//                  t < N (N = max(2, warmup_num_steps)), then 1
//  WarmupDecayLR   warm-up as above, then g = max(0, (T - t) / max(1, T - N))
//  WarmupCosineLR  lr = base x ratio: warm-up ratio wmr + (1 - wmr) g, then
//                  p = min(1, (t - N + 1) / max(1, T - N)),
//                  ratio = max(0, cmr + (1 - cmr)(1 + cos(pi p)) / 2)
//  OneCycle        a triangle from cycle_min_lr to cycle_max_lr and back over
//                  first + second step sizes (optionally in stairs), then
//                  min / (1 + decay_lr_rate (t - total + 1) / decay_step_size);
//                  momentum (Adam's beta1) cycles inversely, and beta2 is 0.99
//                  while it does (DeepSpeed sets betas = (momentum, 0.99))
//  LRRangeTest     lr = min (1 + rate (t + 1) / step_size), floored if staircase
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace zero {

// DeepSpeed's schedules, by its names (scheduler.type); kNone: the
// optimizer's lr throughout.
enum class SchedulerType { kNone, kWarmupLR, kWarmupDecayLR, kWarmupCosineLR, kOneCycle, kLRRangeTest };
// "WarmupLR", ...; "none" for kNone.
std::string_view scheduler_type_name(SchedulerType type);

struct SchedulerConfig {
  SchedulerType type = SchedulerType::kNone;

  // WarmupLR, WarmupDecayLR (and warmup_num_steps/warmup_type for WarmupCosineLR)
  double warmup_min_lr = 0.0;
  std::optional<double> warmup_max_lr;  // WarmupLR: unset = the optimizer's lr; WarmupDecayLR: 0.001
  int64_t warmup_num_steps = 1000;
  std::string warmup_type = "log";     // "log" or "linear"
  int64_t total_num_steps = 0;         // WarmupDecayLR, WarmupCosineLR

  // WarmupCosineLR
  double warmup_min_ratio = 0.0;
  double cos_min_ratio = 1e-4;

  // OneCycle
  double cycle_min_lr = 0.0, cycle_max_lr = 0.0, decay_lr_rate = 0.0;
  double cycle_first_step_size = 2000;
  std::optional<double> cycle_second_step_size;  // unset = first
  int64_t cycle_first_stair_count = 0;
  std::optional<int64_t> cycle_second_stair_count;  // unset = first
  double decay_step_size = 0;
  bool cycle_momentum = true;
  double cycle_min_mom = 0.8, cycle_max_mom = 0.9, decay_mom_rate = 0.0;

  // LRRangeTest
  double lr_range_test_min_lr = 1e-3;
  int64_t lr_range_test_step_size = 2000;
  double lr_range_test_step_rate = 1.0;
  bool lr_range_test_staircase = false;
};

class LrScheduler {
 public:
  // base_lr: the optimizer's configured lr; momentum_capable: whether the
  // optimizer has betas (OneCycle's momentum cycling is off otherwise, as in
  // DeepSpeed for torch's SGD).
  LrScheduler(const SchedulerConfig& config, double base_lr, bool momentum_capable);

  double lr() const;
  // (beta1, beta2) override while OneCycle cycles momentum.
  std::optional<std::pair<double, double>> betas() const;
  void step() { ++t_; }

  int64_t last_batch_iteration() const { return t_; }
  void set_last_batch_iteration(int64_t t) { t_ = t; }

 private:
  double warmup_gamma(int64_t warmup_steps) const;
  double one_cycle_scale() const;

  SchedulerConfig c_;
  double base_lr_;
  bool momentum_;
  int64_t t_ = -1;
};

}  // namespace zero
