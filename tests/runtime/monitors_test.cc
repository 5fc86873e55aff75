// DeepSpeed's csv_monitor and tensorboard sections (runtime/tools/monitors.h):
// the config turns them on, the CSV files have DeepSpeed's names, header and
// rows (values at their float precision), a second run appends without a
// second header, only rank 0 writes, and the TensorBoard file holds the same
// events; wandb and comet stay refused by name.
#include "runtime/tools/monitors.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "runtime/config/run_config.h"

#include "tests/testing/test_files.h"

namespace zero {
namespace {

std::string tmp_dir(const std::string& name) { return testing::fresh_test_path(name); }
std::string read_all(const std::string& path) { return testing::read_file(path); }

absl::StatusOr<RunConfig> parse(const Json& sections) {
  Json j = {{"train_micro_batch_size_per_gpu", 1}};
  j.update(sections);
  return parse_run_config(j, {});
}

TEST(MonitorsTest, CsvMonitorWritesDeepSpeedsLayout) {
  const std::string out = tmp_dir("csv");
  RunConfig c = parse({{"csv_monitor", {{"enabled", true}, {"output_path", out}, {"job_name", "job1"}}}}).value();
  EXPECT_TRUE(c.csv_monitor.enabled);
  EXPECT_EQ(c.csv_monitor.job_name, "job1");
  {
    auto m = Monitors::open(c, 0).value();
    ASSERT_TRUE(m->enabled());
    ASSERT_TRUE(m->write_events({{"Train/Samples/train_loss", monitor_float(5.5f), 8},
                                 {"Train/Samples/lr", monitor_float(0.003f), 8}})
                    .ok());
    ASSERT_TRUE(m->write_events({{"Train/Samples/train_loss", monitor_float(4.25f), 16}}).ok());
  }
  const std::string dir = out + "/job1/";
  EXPECT_EQ(read_all(dir + "Train_Samples_train_loss.csv"), "step,train_loss\r\n8,5.5\r\n16,4.25\r\n");
  EXPECT_EQ(read_all(dir + "Train_Samples_lr.csv"), "step,lr\r\n8,0.003\r\n");
  // A resumed run appends below the first header.
  {
    auto m = Monitors::open(c, 0).value();
    ASSERT_TRUE(m->write_events({{"Train/Samples/lr", monitor_float(0.0015f), 24}}).ok());
  }
  EXPECT_EQ(read_all(dir + "Train_Samples_lr.csv"), "step,lr\r\n8,0.003\r\n24,0.0015\r\n");
  // Other ranks write nothing.
  auto other = Monitors::open(c, 1).value();
  EXPECT_FALSE(other->enabled());
}

TEST(MonitorsTest, DefaultJobNameIsDeepSpeeds) {
  RunConfig c = parse({{"csv_monitor", {{"enabled", false}}}}).value();
  EXPECT_EQ(c.csv_monitor.job_name, "DeepSpeedJobName");
  EXPECT_EQ(c.csv_monitor.output_path, "");
  auto m = Monitors::open(c, 0).value();
  EXPECT_FALSE(m->enabled());
}

TEST(MonitorsTest, TensorBoardHoldsTheSameEvents) {
  const std::string out = tmp_dir("tb");
  RunConfig c = parse({{"tensorboard", {{"enabled", true}, {"output_path", out}, {"job_name", "run"}}}}).value();
  std::string path;
  {
    auto m = Monitors::open(c, 0).value();
    ASSERT_TRUE(m->write_events({{"Train/Samples/train_loss", monitor_float(5.5f), 8},
                                 {"Train/Samples/eval_loss", 5.75, 8}})
                    .ok());
    EXPECT_NE(m->describe().find(out + "/run/events.out.tfevents."), std::string::npos) << m->describe();
  }
  ASSERT_EQ(std::distance(std::filesystem::directory_iterator(out + "/run"), std::filesystem::directory_iterator()), 1);
  path = std::filesystem::directory_iterator(out + "/run")->path().string();
  auto events = read_tensorboard_events(path).value();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[1].tag, "Train/Samples/train_loss");
  EXPECT_EQ(events[1].value, 5.5f);
  EXPECT_EQ(events[1].step, 8);
  EXPECT_EQ(events[2].tag, "Train/Samples/eval_loss");
}

TEST(MonitorsTest, UnknownKeysAndNetworkMonitorsAreRefusedByName) {
  absl::StatusOr<RunConfig> typo = parse({{"csv_monitor", {{"enabled", true}, {"output_pth", "x"}}}});
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("csv_monitor.output_pth"), std::string::npos) << typo.status();
  for (const char* section : {"wandb", "comet"}) {
    absl::StatusOr<RunConfig> c = parse({{section, {{"enabled", true}}}});
    ASSERT_FALSE(c.ok()) << section;
    EXPECT_NE(c.status().message().find(section), std::string::npos) << c.status();
    EXPECT_NE(c.status().message().find("network service"), std::string::npos) << c.status();
  }
  EXPECT_TRUE(parse({{"wandb", {{"enabled", false}, {"project", "p"}}}}).ok());
}

TEST(MonitorsTest, AJobNameThatIsNotOneDirectoryNameIsAConfigErrorNamingTheKey) {
  const std::string out = tmp_dir("escape");
  for (const char* section : {"csv_monitor", "tensorboard"}) {
    for (const char* name : {"../../x", "a/b", "..", "a\\b"}) {
      absl::StatusOr<RunConfig> c =
          parse({{section, {{"enabled", true}, {"output_path", out}, {"job_name", name}}}});
      ASSERT_FALSE(c.ok()) << section << " " << name;
      EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << c.status();
      EXPECT_NE(c.status().message().find(std::string(section) + ".job_name: \"" + name + "\""), std::string::npos)
          << c.status();
      EXPECT_NE(c.status().message().find("output_path"), std::string::npos) << c.status();
    }
    // A plain name, dots inside it included, is one directory under output_path.
    EXPECT_TRUE(parse({{section, {{"enabled", true}, {"output_path", out}, {"job_name", "run.v2"}}}}).ok());
  }
  EXPECT_FALSE(std::filesystem::exists(out)) << "nothing is created by parsing";
}

TEST(MonitorsTest, AFailedWriteIsAnErrorNamingTheFileAndTheReason) {
  const std::string out = tmp_dir("full");
  std::filesystem::create_directories(out + "/job");
  // A disk with no room left: every write to /dev/full fails with ENOSPC.
  std::filesystem::create_symlink("/dev/full", out + "/job/Train_Samples_train_loss.csv");
  RunConfig c = parse({{"csv_monitor", {{"enabled", true}, {"output_path", out}, {"job_name", "job"}}}}).value();
  auto m = Monitors::open(c, 0).value();
  const absl::Status s = m->write_events({{"Train/Samples/train_loss", monitor_float(5.5f), 8}});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(out + "/job/Train_Samples_train_loss.csv"), std::string::npos) << s;
  EXPECT_NE(s.message().find("No space left on device"), std::string::npos) << s;
}

TEST(MonitorsTest, ShortestTextKeepsFloatPrecision) {
  EXPECT_EQ(shortest_text(monitor_float(0.003f)), "0.003");
  EXPECT_EQ(shortest_text(static_cast<double>(0.003f)), "0.003000000026077032");
  EXPECT_EQ(shortest_text(2.0), "2");
  EXPECT_EQ(shortest_text(1e-05), "1e-05");
}

}  // namespace
}  // namespace zero
