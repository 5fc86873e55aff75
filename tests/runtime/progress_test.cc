// The progress line and the --metrics object (runtime/tools/progress.h):
// rates are averaged over the last kRateWindowSteps steps, TFLOP/s is model
// FLOPs over all ranks, MFU appears with a peak, an eval line follows the
// step that evaluated, and the JSON has time, samples, tokens, world size,
// FLOP/s and floats at float precision; wall_clock_breakdown adds the
// phases and the communication wait; a metrics file that cannot be written
// is an error naming it.
#include "runtime/tools/progress.h"

#include <gtest/gtest.h>

#include <sstream>

namespace zero {
namespace {

StepResult step(int64_t n, float loss = 2.5f) {
  StepResult r;
  r.global_step = n;
  r.loss = loss;
  r.lr = 0.003f;
  return r;
}

TEST(ProgressTest, RatesAreAveragedOverTheWindow) {
  std::ostringstream out;
  ProgressReporter p(out, 20, 10, Tier::kHost, 0);
  p.set_throughput_model({2, 1e9, 0.0});
  // Nine slow steps, then ten at 1000 tokens/s and 10 samples/s: the line at
  // step 20 shows only the last ten.
  for (int i = 1; i <= 10; ++i) ASSERT_TRUE(p.on_step(step(i), {10.0, 1000, 10}).ok());
  for (int i = 11; i <= 20; ++i) ASSERT_TRUE(p.on_step(step(i), {1.0, 1000, 10}).ok());
  const std::string text = out.str();
  const size_t at = text.find("step 20/20");
  ASSERT_NE(at, std::string::npos) << text;
  const std::string line = text.substr(at, text.find('\n', at) - at);
  EXPECT_NE(line.find("| 1.0k tok/s 10.0 samples/s | 1.00 TFLOP/s |"), std::string::npos) << line;
  EXPECT_EQ(line.find("MFU"), std::string::npos) << line;
  EXPECT_NE(text.find("step 10/20 | loss 2.5000 | lr 3.000e-03 | 100.0 tok/s 1.0 samples/s"), std::string::npos)
      << text;
}

TEST(ProgressTest, MfuUsesThePeakOfEveryRank) {
  std::ostringstream out;
  ProgressReporter p(out, 1, 10, Tier::kHost, 0);
  p.set_throughput_model({4, 1e9, 1.0});  // 4 ranks x 1 TFLOP/s
  ASSERT_TRUE(p.on_step(step(1), {1.0, 1000, 10}).ok());  // 1 TFLOP/s achieved: 25%
  EXPECT_NE(out.str().find("1.00 TFLOP/s MFU 25.0%"), std::string::npos) << out.str();
}

TEST(ProgressTest, EvalLineFollowsTheStep) {
  std::ostringstream out;
  ProgressReporter p(out, 20, 10, Tier::kHost, 0);
  StepTotals t;
  t.val_loss = 3.14159;
  ASSERT_TRUE(p.on_step(step(7), {1.0, 100, 1}, t).ok());  // not a print step: the eval line still shows
  EXPECT_NE(out.str().find("eval: step 7 | val loss 3.1416\n"), std::string::npos) << out.str();
  p.summary();
  EXPECT_NE(out.str().find("(val 3.1416 -> 3.1416)"), std::string::npos) << out.str();
}

TEST(ProgressTest, MetricsJsonHasTotalsAndFloatPrecision) {
  StepTotals t;
  t.samples = 64;
  t.tokens = 64 * 16;
  t.val_loss = 2.25;
  const Json j = step_metrics_json(step(8), {0.5, 1024, 64}, MemorySnapshot(), 1, 1, {2, 1e6, 0.0}, t);
  const std::string text = j.dump();
  EXPECT_NE(text.find("\"lr\":0.003,"), std::string::npos) << text;
  EXPECT_NE(text.find("\"loss\":2.5,"), std::string::npos) << text;
  EXPECT_EQ(j["samples"], 64);
  EXPECT_EQ(j["tokens"], 1024);
  EXPECT_EQ(j["world_size"], 2);
  EXPECT_EQ(j["val_loss"], 2.25);
  EXPECT_DOUBLE_EQ(j["flops_per_s"].get<double>(), 1e6 * 1024 / 0.5);
  EXPECT_DOUBLE_EQ(j["samples_per_s"].get<double>(), 128.0);
  EXPECT_GT(j["wall_time"].get<double>(), 1.6e9);
  EXPECT_TRUE(j["time"].contains("step_s"));  // the phases stay where they were
  EXPECT_TRUE(j["time"].contains("comm_wait_s"));
}

// wall_clock_breakdown: the phases and the time spent waiting for
// collectives, in milliseconds.
TEST(ProgressTest, WallClockBreakdownShowsTheCommunicationWait) {
  std::ostringstream out;
  ProgressReporter p(out, 1, 1, Tier::kHost, 0);
  p.set_breakdowns(true, false);
  StepResult r = step(1);
  r.forward_s = 0.010, r.backward_s = 0.020, r.step_s = 0.003, r.comm_wait_s = 0.0045;
  ASSERT_TRUE(p.on_step(r, {0.05, 100, 1}).ok());
  EXPECT_NE(out.str().find("time (ms) | forward: 10.0 | backward: 20.0 (recompute 0.0) | step: 3.0 | waiting for "
                           "communication: 4.5"),
            std::string::npos)
      << out.str();
}

// A metrics line that cannot be written ends the run, naming the file and why
// (/dev/full fails every write with ENOSPC, as a full disk does).
TEST(ProgressTest, AMetricsFileThatCannotBeWrittenIsAnErrorNamingIt) {
  std::ostringstream out;
  ProgressReporter p(out, 10, 10, Tier::kHost, 0);
  ASSERT_TRUE(p.open_metrics("/dev/full").ok());
  const absl::Status s = p.on_step(step(1), {1.0, 100, 1});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("metrics file /dev/full"), std::string::npos) << s;
  EXPECT_NE(s.message().find("No space left on device"), std::string::npos) << s;
}

}  // namespace
}  // namespace zero
