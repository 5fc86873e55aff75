// Each DeepSpeed schedule at chosen steps, against its formula written out
// here (runtime/lr_schedules.py). t is DeepSpeed's last_batch_iteration: the
// first optimizer step runs at t = -1.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/engine/lr_scheduler.h"

namespace zero {
namespace {

double lr_at(LrScheduler s, int64_t t) {
  s.set_last_batch_iteration(t);
  return s.lr();
}

TEST(LrSchedulerTest, NoScheduleKeepsTheOptimizerLr) {
  LrScheduler s({}, 0.01, true);
  EXPECT_DOUBLE_EQ(s.lr(), 0.01);
  s.step();
  EXPECT_DOUBLE_EQ(s.lr(), 0.01);
}

TEST(LrSchedulerTest, WarmupLrLogAndLinear) {
  for (int64_t n : {10, 15, 19, 33}) {  // DeepSpeed's test_lr_schedulers warm-up lengths
    SchedulerConfig c{.type = SchedulerType::kWarmupLR, .warmup_min_lr = 1e-5, .warmup_max_lr = 1e-3, .warmup_num_steps = n};
    LrScheduler s(c, 0.5, true);
    EXPECT_DOUBLE_EQ(lr_at(s, -1), 1e-5);  // before the first step(): min
    EXPECT_DOUBLE_EQ(lr_at(s, 0), 1e-5);   // log(1) = 0
    EXPECT_NEAR(lr_at(s, 4), 1e-5 + (1e-3 - 1e-5) * std::log(5.0) / std::log(double(n)), 1e-15);
    EXPECT_DOUBLE_EQ(lr_at(s, n), 1e-3);
    EXPECT_DOUBLE_EQ(lr_at(s, 10 * n), 1e-3);
    c.warmup_type = "linear";
    LrScheduler l(c, 0.5, true);
    EXPECT_NEAR(lr_at(l, 4), 1e-5 + (1e-3 - 1e-5) * 4.0 / double(n), 1e-15);
  }
  // warmup_max_lr unset: the optimizer's lr. warmup_num_steps 1 counts as 2.
  LrScheduler s({.type = SchedulerType::kWarmupLR, .warmup_num_steps = 1, .warmup_type = "linear"}, 0.2, true);
  EXPECT_DOUBLE_EQ(lr_at(s, 1), 0.1);
  EXPECT_DOUBLE_EQ(lr_at(s, 2), 0.2);
}

TEST(LrSchedulerTest, WarmupDecayLr) {
  LrScheduler s({.type = SchedulerType::kWarmupDecayLR, .warmup_min_lr = 0, .warmup_max_lr = 0.01, .warmup_num_steps = 10,
                 .warmup_type = "linear", .total_num_steps = 30},
                1.0, true);
  EXPECT_DOUBLE_EQ(lr_at(s, 5), 0.005);
  EXPECT_DOUBLE_EQ(lr_at(s, 10), 0.01 * 20.0 / 20.0);
  EXPECT_DOUBLE_EQ(lr_at(s, 20), 0.01 * 10.0 / 20.0);
  EXPECT_DOUBLE_EQ(lr_at(s, 30), 0.0);
  EXPECT_DOUBLE_EQ(lr_at(s, 40), 0.0);  // max(0, .)
}

TEST(LrSchedulerTest, WarmupCosineLr) {
  const double base = 0.01, wmr = 0.1, cmr = 0.01;
  LrScheduler s({.type = SchedulerType::kWarmupCosineLR, .warmup_num_steps = 5, .warmup_type = "linear", .total_num_steps = 20,
                 .warmup_min_ratio = wmr, .cos_min_ratio = cmr},
                base, true);
  EXPECT_DOUBLE_EQ(lr_at(s, -1), 0.0);  // DeepSpeed returns 0 before the first step()
  EXPECT_NEAR(lr_at(s, 2), base * (wmr + (1 - wmr) * 2.0 / 5.0), 1e-15);
  for (int64_t t : {5, 10, 19, 25}) {
    const double p = std::min(1.0, (t - 5 + 1) / 15.0);
    EXPECT_NEAR(lr_at(s, t), base * std::max(0.0, cmr + (1 - cmr) * (1 + std::cos(M_PI * p)) / 2), 1e-15) << t;
  }
}

TEST(LrSchedulerTest, OneCycleLrAndMomentum) {
  SchedulerConfig c{.type = SchedulerType::kOneCycle, .cycle_min_lr = 0.001, .cycle_max_lr = 0.01, .decay_lr_rate = 0.5,
                    .cycle_first_step_size = 4, .decay_step_size = 2, .cycle_min_mom = 0.8, .cycle_max_mom = 0.9,
                    .decay_mom_rate = 0.1};
  LrScheduler s(c, 1.0, true);
  EXPECT_DOUBLE_EQ(lr_at(s, -1), 0.001);
  // t = 1: iteration 2 of a cycle of 8 with step ratio 0.5 -> scale 0.5.
  EXPECT_NEAR(lr_at(s, 1), 0.001 + 0.009 * 0.5, 1e-15);
  s.set_last_batch_iteration(1);
  ASSERT_TRUE(s.betas());
  EXPECT_NEAR(s.betas()->first, 0.9 - 0.1 * 0.5, 1e-15);
  EXPECT_DOUBLE_EQ(s.betas()->second, 0.99);  // DeepSpeed sets betas = (momentum, 0.99)
  EXPECT_NEAR(lr_at(s, 3), 0.01, 1e-15);           // peak: iteration 4
  EXPECT_NEAR(lr_at(s, 5), 0.001 + 0.009 * 0.5, 1e-15);  // way down: (0.75 - 1) / (0.5 - 1)
  // After the cycle: min / (1 + rate (t - total + 1) / decay_step_size).
  EXPECT_NEAR(lr_at(s, 9), 0.001 / (1 + 0.5 * 1.0), 1e-15);
  s.set_last_batch_iteration(9);
  EXPECT_NEAR(s.betas()->first, 0.9 * (1 + 0.1 * 1.0), 1e-15);
  // SGD has no betas: momentum cycling is off, as in DeepSpeed.
  EXPECT_FALSE(LrScheduler(c, 1.0, false).betas());
}

TEST(LrSchedulerTest, OneCycleStairs) {
  SchedulerConfig c{.type = SchedulerType::kOneCycle, .cycle_min_lr = 0, .cycle_max_lr = 1, .cycle_first_step_size = 8,
                    .cycle_first_stair_count = 4};
  LrScheduler s(c, 1.0, true);
  EXPECT_DOUBLE_EQ(lr_at(s, 0), 0.0);   // position 1 * 4 / 8 = 0.5 -> stair 0
  EXPECT_DOUBLE_EQ(lr_at(s, 2), 0.25);  // iteration 3 -> 1.5 -> 1/4
  EXPECT_DOUBLE_EQ(lr_at(s, 7), 1.0);
}

TEST(LrSchedulerTest, LrRangeTest) {
  SchedulerConfig c{.type = SchedulerType::kLRRangeTest, .lr_range_test_min_lr = 1e-3, .lr_range_test_step_size = 10,
                    .lr_range_test_step_rate = 2.0};
  EXPECT_DOUBLE_EQ(lr_at(LrScheduler(c, 1, true), -1), 1e-3);
  EXPECT_DOUBLE_EQ(lr_at(LrScheduler(c, 1, true), 4), 1e-3 * (1 + 2.0 * 0.5));
  c.lr_range_test_staircase = true;
  EXPECT_DOUBLE_EQ(lr_at(LrScheduler(c, 1, true), 4), 1e-3);
  EXPECT_DOUBLE_EQ(lr_at(LrScheduler(c, 1, true), 9), 1e-3 * 3);
}

}  // namespace
}  // namespace zero
