// DeepSpeed's learning-rate schedules; see lr_scheduler.h.
#include "runtime/engine/lr_scheduler.h"

#include <algorithm>
#include <cmath>

namespace zero {

LrScheduler::LrScheduler(const SchedulerConfig& config, double base_lr, bool momentum_capable)
    : c_(config), base_lr_(base_lr), momentum_(momentum_capable && config.cycle_momentum) {}

// The warm-up fraction at t for N = max(2, warmup_steps), log or linear.
double LrScheduler::warmup_gamma(int64_t warmup_steps) const {
  const double n = static_cast<double>(std::max<int64_t>(2, warmup_steps));
  if (c_.warmup_type == "linear") return static_cast<double>(t_) / n;
  return std::log(static_cast<double>(t_ + 1)) / std::log(n);
}

double LrScheduler::one_cycle_scale() const {
  const double first = c_.cycle_first_step_size;
  const double second = c_.cycle_second_step_size.value_or(first);
  const double total = first + second;
  const double step_ratio = first / total;
  const double it = static_cast<double>(t_ + 1);
  const double cycle = std::floor(1.0 + it / total);
  const double x = 1.0 + it / total - cycle;
  double scale;
  int64_t stairs;
  if (x <= step_ratio) {
    scale = x / step_ratio;
    stairs = c_.cycle_first_stair_count;
  } else {
    scale = (x - 1.0) / (step_ratio - 1.0);
    stairs = c_.cycle_second_stair_count.value_or(c_.cycle_first_stair_count);
  }
  if (stairs > 0) {
    const double in_cycle = std::fmod(it, total);
    const double position = in_cycle <= first ? in_cycle * stairs / first : (total - in_cycle) * stairs / second;
    scale = std::floor(position) / static_cast<double>(stairs);
  }
  return scale;
}

std::string_view scheduler_type_name(SchedulerType type) {
  switch (type) {
    case SchedulerType::kNone:
      return "none";
    case SchedulerType::kWarmupLR:
      return "WarmupLR";
    case SchedulerType::kWarmupDecayLR:
      return "WarmupDecayLR";
    case SchedulerType::kWarmupCosineLR:
      return "WarmupCosineLR";
    case SchedulerType::kOneCycle:
      return "OneCycle";
    case SchedulerType::kLRRangeTest:
      return "LRRangeTest";
  }
  return "?";
}

double LrScheduler::lr() const {
  const SchedulerType type = c_.type;
  if (type == SchedulerType::kNone) return base_lr_;
  if (type == SchedulerType::kWarmupLR || type == SchedulerType::kWarmupDecayLR) {
    const double max_lr = c_.warmup_max_lr.value_or(type == SchedulerType::kWarmupLR ? base_lr_ : 0.001);
    if (t_ < 0) return c_.warmup_min_lr;
    const int64_t n = std::max<int64_t>(2, c_.warmup_num_steps);
    double gamma;
    if (t_ < n) gamma = warmup_gamma(n);
    else if (type == SchedulerType::kWarmupLR) gamma = 1.0;
    else
      gamma = std::max(0.0, static_cast<double>(c_.total_num_steps - t_) /
                                std::max(1.0, static_cast<double>(c_.total_num_steps - n)));
    return c_.warmup_min_lr + (max_lr - c_.warmup_min_lr) * gamma;
  }
  if (type == SchedulerType::kWarmupCosineLR) {
    if (t_ < 0) return 0.0;
    const int64_t n = std::max<int64_t>(2, c_.warmup_num_steps);
    double ratio;
    if (t_ < n) {
      ratio = c_.warmup_min_ratio + warmup_gamma(n) * (1.0 - c_.warmup_min_ratio);
    } else {
      const double real_last = static_cast<double>(t_ - n + 1);
      const double real_total = std::max<double>(1.0, static_cast<double>(c_.total_num_steps - n));
      const double progress = std::min(1.0, real_last / real_total);
      ratio = std::max(0.0, c_.cos_min_ratio + (1.0 - c_.cos_min_ratio) * (1.0 + std::cos(M_PI * progress)) / 2.0);
    }
    return base_lr_ * ratio;
  }
  if (type == SchedulerType::kOneCycle) {
    if (t_ < 0) return c_.cycle_min_lr;  // set at construction
    const double total = c_.cycle_first_step_size + c_.cycle_second_step_size.value_or(c_.cycle_first_step_size);
    if (static_cast<double>(t_) < total) {
      return c_.cycle_min_lr + (c_.cycle_max_lr - c_.cycle_min_lr) * one_cycle_scale();
    }
    if (c_.decay_step_size == 0 || c_.decay_lr_rate == 0) return c_.cycle_min_lr;
    const double interval = (static_cast<double>(t_) - total + 1.0) / c_.decay_step_size;
    return c_.cycle_min_lr / (1.0 + c_.decay_lr_rate * interval);
  }
  if (type == SchedulerType::kLRRangeTest) {
    if (t_ < 0) return c_.lr_range_test_min_lr;
    double interval = static_cast<double>(t_ + 1) / static_cast<double>(c_.lr_range_test_step_size);
    if (c_.lr_range_test_staircase) interval = std::floor(interval);
    return c_.lr_range_test_min_lr * (1.0 + c_.lr_range_test_step_rate * interval);
  }
  return base_lr_;
}

std::optional<std::pair<double, double>> LrScheduler::betas() const {
  if (c_.type != SchedulerType::kOneCycle || !momentum_) return std::nullopt;
  if (t_ < 0) return std::make_pair(c_.cycle_min_mom, 0.99);
  const double total = c_.cycle_first_step_size + c_.cycle_second_step_size.value_or(c_.cycle_first_step_size);
  if (static_cast<double>(t_) < total) {
    return std::make_pair(c_.cycle_max_mom - (c_.cycle_max_mom - c_.cycle_min_mom) * one_cycle_scale(), 0.99);
  }
  if (c_.decay_step_size == 0 || c_.decay_mom_rate == 0) return std::make_pair(c_.cycle_max_mom, 0.99);
  const double interval = (static_cast<double>(t_) - total + 1.0) / c_.decay_step_size;
  return std::make_pair(c_.cycle_max_mom * (1.0 + c_.decay_mom_rate * interval), 0.99);
}

}  // namespace zero
