// SIGTERM (what `timeout`, a scheduler or mpirun send) reaches a zero-train
// rank that is still setting up, blocked in a collective with a peer that
// never joins (tests/runtime/silent_rank_main.cc; in practice a rank stuck
// reading a checkpoint or a hung file system): the rank ends at once with
// exit 143 and says so. Stopping gracefully at a step boundary starts only
// with training; before, the signal only asked for a stop at a boundary the
// run never reached, and the rank stayed until SIGKILL.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "tests/testing/run_command.h"
#include "tests/testing/test_files.h"

namespace {

namespace fs = std::filesystem;

TEST(ZeroTrainSetupSignalTest, SigtermDuringSetUpEndsTheRankAtOnce) {
  const std::string dir = zero::testing::fresh_test_dir("job");
  // A checkpoint to resume: loading it ends with a collective every rank joins.
  const std::string ckpt = dir + "/ckpt";
  const std::string base = "cd " + std::string(ZE_SOURCE_DIR) + " && " + ZE_TRAIN_BIN +
                           " --config configs/small-gpt.json --set train_batch_size=4";
  auto saved = zero::testing::run_command(base + " --steps 1 --save-dir " + ckpt);
  ASSERT_EQ(saved.exit_code, 0) << saved.output;
  // Rank 0: zero-train (its pid written first); rank 1: the silent peer.
  const std::string pid_file = dir + "/pid", log = dir + "/log";
  const std::string wrapper = dir + "/rank0.sh";
  std::ofstream(wrapper) << "#!/bin/sh\necho $$ > " << pid_file << "\nexec " << ZE_TRAIN_BIN
                         << " --config configs/small-gpt.json --set train_batch_size=4 --steps 2 --resume " << ckpt
                         << "\n";
  fs::permissions(wrapper, fs::perms::owner_all);
  const pid_t job = ::fork();
  ASSERT_GE(job, 0);
  if (job == 0) {
    const std::string cmd = "cd " + std::string(ZE_SOURCE_DIR) + " && ZE_STOP_GRACE_S=600 exec " + ZE_MPIEXEC +
                            " --allow-run-as-root --oversubscribe -np 1 " + wrapper + " : -np 1 " + ZE_SILENT_BIN +
                            " > " + log + " 2>&1";
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Wait for rank 0 to start, then for it to reach set-up.
  pid_t rank0 = -1;
  for (int i = 0; i < 300 && rank0 <= 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::ifstream(pid_file) >> rank0;
  }
  ASSERT_GT(rank0, 0) << zero::testing::read_file(log);
  std::this_thread::sleep_for(std::chrono::seconds(4));
  ::kill(rank0, SIGTERM);
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  bool ended = false;
  while (!ended && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30)) {
    ended = ::waitpid(job, &status, WNOHANG) == job;
    if (!ended) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!ended) {
    ::kill(rank0, SIGKILL);
    ::waitpid(job, &status, 0);
  }
  const std::string output = zero::testing::read_file(log);
  ASSERT_TRUE(ended) << "the job was still running 30 s after SIGTERM to its rank 0\n" << output;
  EXPECT_NE(output.find("ZeroEngine rank 0: terminated by signal 15"), std::string::npos) << output;
  EXPECT_EQ(output.find("stopping at the end of this step"), std::string::npos) << output;
  EXPECT_EQ(output.find("step 1/2"), std::string::npos) << "it trained instead of ending\n" << output;
}

}  // namespace
