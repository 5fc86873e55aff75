// What zero-train writes besides checkpoints, as a user sees it when it goes
// wrong: a metrics or monitor file that cannot be written (a full disk;
// /dev/full fails every write with ENOSPC) ends the run with exit 1 and an
// error naming the file, and a monitor job_name that would put files outside
// output_path is a config error naming the key, exit 2, with nothing created;
// and MFU's denominator is a peak that says what it is and where it came
// from, the same in every run (not a rate measured on a busy machine).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tests/testing/run_command.h"
#include "tests/testing/test_files.h"

namespace {

namespace fs = std::filesystem;

std::string dir_for(const std::string& name) { return zero::testing::fresh_test_dir(name); }

zero::testing::CommandResult train(const std::string& args) {
  return zero::testing::run_command(std::string(ZE_TRAIN_BIN) + " --config " + ZE_SOURCE_DIR +
                                    "/configs/small-gpt.json --config " + ZE_SOURCE_DIR +
                                    "/configs/ds/fp32-adamw.json --steps 2 " + args);
}

TEST(ZeroTrainOutputsTest, AMetricsFileThatCannotBeWrittenEndsTheRunNamingIt) {
  const auto r = train("--metrics /dev/full");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("metrics file /dev/full: writing step 1's line: No space left on device"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("done: "), std::string::npos) << "the run did not go on without its metrics\n" << r.output;
}

TEST(ZeroTrainOutputsTest, ACsvMonitorFileThatCannotBeWrittenEndsTheRunNamingIt) {
  const std::string out = dir_for("csv");
  fs::create_directories(out + "/job");
  fs::create_symlink("/dev/full", out + "/job/Train_Samples_train_loss.csv");
  const auto r = train("--set csv_monitor.enabled=true --set csv_monitor.output_path=" + out +
                       " --set csv_monitor.job_name=job");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("csv_monitor: writing " + out + "/job/Train_Samples_train_loss.csv: No space left on device"),
            std::string::npos)
      << r.output;
}

TEST(ZeroTrainOutputsTest, AJobNameOutsideOutputPathIsAConfigErrorAndCreatesNothing) {
  for (const char* monitor : {"csv_monitor", "tensorboard"}) {
    const std::string root = dir_for(monitor);
    const std::string out = root + "/a/b";
    const auto r = train(std::string("--set ") + monitor + ".enabled=true --set " + monitor + ".output_path=" + out +
                         " --set " + monitor + ".job_name=../../x");
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(std::string(monitor) + ".job_name: \"../../x\" is not a directory name"), std::string::npos)
        << r.output;
    EXPECT_TRUE(fs::is_empty(root)) << "nothing written, in output_path or outside it: " << root;
  }
}

std::string mfu_line(const std::string& output) {
  const size_t at = output.find("MFU against ");
  return at == std::string::npos ? "" : output.substr(at, output.find('\n', at) - at);
}

TEST(ZeroTrainOutputsTest, TheMfuDenominatorIsTheCpusPeakAndTheSameInEveryRun) {
  const auto first = train("");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::string line = mfu_line(first.output);
  EXPECT_NE(line.find(" TFLOP/s per rank, the fp32 FMA peak of "), std::string::npos) << line;
  EXPECT_NE(line.find(" FLOP/cycle x "), std::string::npos) << line;
  EXPECT_NE(line.find("clock from "), std::string::npos) << line;
  for (int i = 0; i < 2; ++i) {
    const auto again = train("");
    EXPECT_EQ(mfu_line(again.output), line) << again.output;
  }
  // A peak given overrides it.
  const auto given = train("--peak-tflops 2");
  EXPECT_EQ(mfu_line(given.output), "MFU against 2 TFLOP/s per rank (run.peak_tflops)") << given.output;
}

}  // namespace
