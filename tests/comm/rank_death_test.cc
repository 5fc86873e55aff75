// A rank that dies mid-step makes the others exit within a bounded time, no
// hang, with an error naming the operation (our SIGTERM handler: which
// collective was in flight) and the rank (the launcher's report of the dead
// process).
#include <gtest/gtest.h>

#include <chrono>

#include "tests/testing/run_command.h"

namespace {

TEST(RankDeathTest, SurvivorsStopAndNameTheCollectiveAndTheRank) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = zero::testing::run_command(std::string("timeout 120 ") + ZE_MPIEXEC +
                                            " --allow-run-as-root --oversubscribe -np 2 " + ZE_DEATH_BIN);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << "the job hung until timeout killed it:\n" << r.output;
  EXPECT_LT(seconds, 60.0) << r.output;
  EXPECT_EQ(r.output.find("finished (unexpected)"), std::string::npos) << r.output;
  // The launcher names the dead rank ...
  EXPECT_NE(r.output.find("rank 1"), std::string::npos) << r.output;
  // ... and the survivor says which collective it was in.
  EXPECT_NE(r.output.find("during all_reduce of 1.0 MiB fp32 (collective #"), std::string::npos) << r.output;
}

}  // namespace
