// A rank that dies mid-step makes the others exit within a bounded time, no
// hang, with an error naming the operation (our SIGTERM handler: which
// collective was in flight) and the rank (the launcher's report of the dead
// process); the same for an all-to-all and an all-to-all-v. A rank that
// stays alive but never reaches the all-to-all makes the others' waits time
// out (ZE_COMM_TIMEOUT_S=3), naming it. The same for a receive posted early
// (before this rank's send): the survivor names the receive.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "tests/testing/run_command.h"

namespace {

struct JobRun {
  zero::testing::CommandResult r;
  double seconds;
};

JobRun run_job(int ranks, const std::string& args) {
  const auto t0 = std::chrono::steady_clock::now();
  JobRun run{zero::testing::run_command(std::string("timeout 120 ") + ZE_MPIEXEC +
                                     " --allow-run-as-root --oversubscribe -np " + std::to_string(ranks) + " " +
                                     ZE_DEATH_BIN + " " + args),
          0.0};
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return run;
}

void expect_stopped_in_time(const JobRun& run) {
  EXPECT_NE(run.r.exit_code, 0) << run.r.output;
  EXPECT_NE(run.r.exit_code, 124) << "the job hung until timeout killed it:\n" << run.r.output;
  EXPECT_LT(run.seconds, 60.0) << run.r.output;
  EXPECT_EQ(run.r.output.find("finished (unexpected)"), std::string::npos) << run.r.output;
}

TEST(RankDeathTest, SurvivorsStopAndNameTheCollectiveAndTheRank) {
  const JobRun run = run_job(2, "");
  expect_stopped_in_time(run);
  // The launcher names the dead rank ...
  EXPECT_NE(run.r.output.find("rank 1"), std::string::npos) << run.r.output;
  // ... and the survivor says which collective it was in.
  EXPECT_NE(run.r.output.find("during all_reduce of 1.0 MiB fp32 (collective #"), std::string::npos) << run.r.output;
}

TEST(RankDeathTest, AllToAllSurvivorsStopAndNameTheCollectiveAndTheRank) {
  for (const char* op : {"all_to_all", "all_to_all_v"}) {
    SCOPED_TRACE(op);
    const JobRun run = run_job(4, std::string(op) + " die");
    expect_stopped_in_time(run);
    EXPECT_NE(run.r.output.find("rank 1"), std::string::npos) << run.r.output;
    EXPECT_NE(run.r.output.find(std::string("during ") + op + " of 1.0 MiB fp32 (collective #"), std::string::npos)
        << run.r.output;
  }
}

TEST(RankDeathTest, AFrozenPeerMakesTheAllToAllTimeOutNamingIt) {
  const JobRun run = run_job(2, "all_to_all freeze");
  expect_stopped_in_time(run);
  EXPECT_NE(run.r.output.find("rank 0: all_to_all of 1.0 MiB fp32 did not finish within 3 s: a peer rank is not "
                              "responding"),
            std::string::npos)
      << run.r.output;
  EXPECT_LT(run.seconds, 30.0) << "one timeout, not the launcher's: " << run.r.output;
}

TEST(RankDeathTest, APeerThatDiesBeforeAnEarlyReceiveCompletesIsNamed) {
  const JobRun run = run_job(2, "early_recv die");
  expect_stopped_in_time(run);
  EXPECT_NE(run.r.output.find("rank 1"), std::string::npos) << run.r.output;
  // The survivor waits on the receive it posted early.
  EXPECT_NE(run.r.output.find("during receive of 1.0 MiB fp32 from rank 1 (point-to-point #"), std::string::npos)
      << run.r.output;
}

TEST(RankDeathTest, AFrozenPeerMakesAnEarlyReceiveTimeOutNamingIt) {
  const JobRun run = run_job(2, "early_recv freeze");
  expect_stopped_in_time(run);
  EXPECT_NE(run.r.output.find("rank 0: receive of 1.0 MiB fp32 from rank 1 (point-to-point #"), std::string::npos)
      << run.r.output;
  EXPECT_NE(run.r.output.find(") did not finish within 3 s: a peer rank is not responding"), std::string::npos)
      << run.r.output;
  EXPECT_LT(run.seconds, 30.0) << "one timeout, not the launcher's: " << run.r.output;
}

}  // namespace
