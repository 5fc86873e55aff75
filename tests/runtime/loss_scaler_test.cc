// DeepSpeed's dynamic loss scaler, step by step with injected overflows
// (the sequences of DeepSpeed's test_zero_optim_overflow.py and the rules in
// runtime/fp16/loss_scaler.py).
#include <gtest/gtest.h>

#include "runtime/engine/loss_scaler.h"

namespace zero {
namespace {

std::vector<double> run(LossScaler& s, const std::vector<bool>& overflows) {
  std::vector<double> scales;
  for (bool o : overflows) {
    EXPECT_TRUE(s.update(o).ok());
    scales.push_back(s.scale());
  }
  return scales;
}

TEST(LossScalerTest, DoublesAfterEachWindowOfCleanSteps) {
  LossScaler s({.dynamic = true, .initial_scale_power = 8, .scale_window = 2});
  EXPECT_EQ(s.scale(), 256.0);
  EXPECT_EQ(run(s, {false, false, false, false, false}), (std::vector<double>{256, 256, 512, 512, 1024}));
  EXPECT_EQ(s.state().iter, 5);
}

TEST(LossScalerTest, HysteresisDelaysTheHalving) {
  LossScaler s({.dynamic = true, .initial_scale_power = 8, .scale_window = 1000, .hysteresis = 2});
  // First overflow only uses up hysteresis; the second halves; then each halves.
  EXPECT_EQ(run(s, {true, true, true}), (std::vector<double>{256, 128, 64}));
  EXPECT_EQ(s.state().hysteresis, 1);
}

TEST(LossScalerTest, HysteresisOneHalvesEveryOverflowAndRecovers) {
  LossScaler s({.dynamic = true, .initial_scale_power = 8, .scale_window = 2, .hysteresis = 1});
  // Each inf/NaN halves; window + 1 clean steps after it double once.
  EXPECT_EQ(run(s, {true, true, false, false, false}), (std::vector<double>{128, 64, 64, 64, 128}));
}

TEST(LossScalerTest, CleanStepsRefillHysteresisOnlyAtTheWindow) {
  LossScaler s({.dynamic = true, .initial_scale_power = 8, .scale_window = 3, .hysteresis = 2});
  run(s, {true, false});
  EXPECT_EQ(s.state().hysteresis, 1);  // not consecutive: still spent
  run(s, {false, false});  // stable = iter - last_overflow - 1 = 2: not yet
  EXPECT_EQ(s.state().hysteresis, 1);
  run(s, {false});         // stable reaches the window (3): refill and double
  EXPECT_EQ(s.state().hysteresis, 2);
  EXPECT_EQ(s.scale(), 512.0);
  LossScaler c({.dynamic = true, .initial_scale_power = 8, .scale_window = 3, .hysteresis = 2,
                .consecutive_hysteresis = true});
  run(c, {true, false});
  EXPECT_EQ(c.state().hysteresis, 2);  // consecutive: refilled by the first clean step
}

TEST(LossScalerTest, OverflowAtMinimumScaleStopsWithDeepSpeedsMessage) {
  LossScaler s({.dynamic = true, .initial_scale_power = 2, .scale_window = 1000, .hysteresis = 1, .min_scale = 1});
  EXPECT_TRUE(s.update(true).ok());  // 4 -> 2
  EXPECT_TRUE(s.update(true).ok());  // 2 -> 1
  const absl::Status st = s.update(true);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(), "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.");
}

TEST(LossScalerTest, StaticScaleNeverChanges) {
  LossScaler s({.dynamic = false, .static_scale = 128});
  EXPECT_EQ(run(s, {true, false, true}), (std::vector<double>{128, 128, 128}));
}

}  // namespace
}  // namespace zero
