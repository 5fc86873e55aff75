// Checkpoints as a user meets them, through zero-train (and mpirun):
//  * bitwise resume: N steps, save, stop, resume, M steps gives the same
//    losses and the same final weights (byte-identical consolidated files) as
//    N + M steps straight, for stages 0-3 on 1 and 2 ranks, and with fp16's
//    loss-scaler state (skipped steps, scale) carried over;
//  * resharding: a checkpoint written at W ranks and stage S continues at
//    W' ranks and stage T with no conversion, on the uninterrupted run's
//    trajectory (losses within 1e-5 relative: only the summation order of the
//    world size changes), and at other accumulation steps with dropout;
//  * a run killed (SIGKILL) at arbitrary moments, saves included, always
//    leaves `latest` naming a complete checkpoint that verifies and resumes;
//  * a missing rank file and a full disk are refused with their names, and a
//    failed save keeps the previous checkpoint.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/testing/run_command.h"

namespace {

namespace fs = std::filesystem;
using zero::testing::run_command;

std::string dir_for(const std::string& name) {
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string test = t->name();
  for (char& c : test)
    if (c == '/') c = '_';  // parameterised names contain '/'
  const std::string d = ::testing::TempDir() + "/" + test + "." + name;
  fs::remove_all(d);
  fs::remove(d + ".jsonl");  // resumed runs append to their metrics file
  return d;
}

std::string train_cmd(int ranks, const std::string& args) {
  const std::string launcher =
      ranks == 1 ? "" : std::string(ZE_MPIEXEC) + " --allow-run-as-root --oversubscribe -np " + std::to_string(ranks) + " ";
  return "cd " + std::string(ZE_SOURCE_DIR) + " && timeout 300 " + launcher + ZE_TRAIN_BIN +
         " --config configs/small-gpt.json --config configs/ds/fp32-adamw.json"
         " --set train_batch_size=16 --set train_micro_batch_size_per_gpu=null " + args;
}

struct Metrics {
  std::vector<double> loss, scale;
  std::vector<int64_t> skipped;
};

Metrics read_metrics(const std::string& path) {
  Metrics m;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    m.loss.push_back(j["loss"].get<double>());
    m.scale.push_back(j["loss_scale"].get<double>());
    m.skipped.push_back(j["skipped_steps"].get<int64_t>());
  }
  return m;
}

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::string consolidate(const std::string& dir) {
  const std::string out = dir + "/model.safetensors";
  const auto r = run_command(std::string(ZE_CKPT_BIN) + " consolidate " + dir + " --out " + out);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return file_bytes(out);
}

// Straight N+M steps against N, stop, resume, M: losses and weights bitwise.
void expect_bitwise_resume(int ranks, const std::string& extra, int n, int m) {
  const std::string straight = dir_for("straight"), split = dir_for("split");
  auto r = run_command(train_cmd(ranks, extra + " --steps " + std::to_string(n + m) + " --save-dir " + straight +
                                            " --metrics " + straight + ".jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_command(train_cmd(ranks, extra + " --steps " + std::to_string(n) + " --save-dir " + split + " --metrics " +
                                       split + ".jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_command(train_cmd(ranks, extra + " --steps " + std::to_string(n + m) + " --save-dir " + split +
                                       " --resume auto --metrics " + split + ".jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from " + split + "/global_step" + std::to_string(n)), std::string::npos) << r.output;
  const Metrics a = read_metrics(straight + ".jsonl"), b = read_metrics(split + ".jsonl");
  ASSERT_EQ(a.loss.size(), static_cast<size_t>(n + m));
  ASSERT_EQ(b.loss.size(), a.loss.size());
  for (size_t i = 0; i < a.loss.size(); ++i) {
    EXPECT_EQ(a.loss[i], b.loss[i]) << "step " << i + 1;
    EXPECT_EQ(a.scale[i], b.scale[i]) << "step " << i + 1;
    EXPECT_EQ(a.skipped[i], b.skipped[i]) << "step " << i + 1;
  }
  EXPECT_TRUE(consolidate(straight) == consolidate(split)) << "final weights differ";
}

class BitwiseResumeTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(BitwiseResumeTest, StopAndResumeEqualsStraight) {
  const auto [ranks, stage] = GetParam();
  expect_bitwise_resume(ranks, "--set zero_optimization.stage=" + std::to_string(stage), 5, 4);
}

INSTANTIATE_TEST_SUITE_P(StagesAndRanks, BitwiseResumeTest,
                         ::testing::Combine(::testing::Values(1, 2), ::testing::Values(0, 1, 2, 3)),
                         [](const auto& info) {
                           return "ranks" + std::to_string(std::get<0>(info.param)) + "_stage" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(CheckpointMpiTest, Fp16LossScalerStateResumesBitwise) {
  // 2^20 overflows the first steps: the resumed run must carry the scale,
  // hysteresis and skipped-step count over.
  expect_bitwise_resume(2,
                        "--config configs/ds/fp16.json --set train_micro_batch_size_per_gpu=null"
                        " --set zero_optimization.stage=1 --set fp16.initial_scale_power=20"
                        " --set fp16.loss_scale_window=3",
                        4, 6);
}

struct Reshard {
  int from_ranks, from_stage, to_ranks, to_stage;
};

class ReshardTest : public ::testing::TestWithParam<Reshard> {};

TEST_P(ReshardTest, ContinuesOnTheUninterruptedTrajectory) {
  const Reshard c = GetParam();
  const std::string straight = dir_for("straight"), split = dir_for("split");
  const std::string from = " --set zero_optimization.stage=" + std::to_string(c.from_stage);
  const std::string to = " --set zero_optimization.stage=" + std::to_string(c.to_stage);
  auto r = run_command(train_cmd(c.from_ranks, from + " --steps 10 --metrics " + straight + ".jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_command(train_cmd(c.from_ranks, from + " --steps 5 --save-dir " + split));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_command(train_cmd(c.to_ranks, to + " --steps 10 --resume " + split + " --metrics " + split + ".jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from " + split), std::string::npos) << r.output;
  const Metrics a = read_metrics(straight + ".jsonl"), b = read_metrics(split + ".jsonl");
  ASSERT_EQ(a.loss.size(), 10u);
  ASSERT_EQ(b.loss.size(), 5u);  // only the resumed steps
  for (size_t i = 0; i < b.loss.size(); ++i) EXPECT_NEAR(b.loss[i], a.loss[5 + i], 1e-5 * a.loss[5 + i]) << "step " << 6 + i;
}

INSTANTIATE_TEST_SUITE_P(WorldAndStageChanges, ReshardTest,
                         ::testing::Values(Reshard{2, 2, 1, 0}, Reshard{1, 0, 2, 3}, Reshard{4, 3, 2, 1}),
                         [](const auto& info) {
                           const Reshard& c = info.param;
                           return "from" + std::to_string(c.from_ranks) + "x" + std::to_string(c.from_stage) + "_to" +
                                  std::to_string(c.to_ranks) + "x" + std::to_string(c.to_stage);
                         });

// The same global batch with other accumulation steps (fewer or more micro-
// batches per step), with dropout: the resumed run continues the
// uninterrupted one, masks included, whether or not the saved step times the
// old accumulation divides by the new one (5 x 2 by 4 does not).
struct AccumulationChange {
  int from, to;
};

class AccumulationChangeTest : public ::testing::TestWithParam<AccumulationChange> {};

TEST_P(AccumulationChangeTest, ContinuesOnTheUninterruptedTrajectoryWithDropout) {
  const AccumulationChange c = GetParam();
  const std::string straight = dir_for("straight"), split = dir_for("split");
  const std::string common = " --set model.dropout=0.1 --set gradient_accumulation_steps=";
  const std::string from = common + std::to_string(c.from), to = common + std::to_string(c.to);
  auto r = run_command(train_cmd(1, from + " --steps 8 --metrics " + straight + ".jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_command(train_cmd(1, from + " --steps 5 --save-dir " + split));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_command(train_cmd(1, to + " --steps 8 --resume " + split + " --metrics " + split + ".jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from " + split), std::string::npos) << r.output;
  const Metrics a = read_metrics(straight + ".jsonl"), b = read_metrics(split + ".jsonl");
  ASSERT_EQ(a.loss.size(), 8u);
  ASSERT_EQ(b.loss.size(), 3u);
  for (size_t i = 0; i < b.loss.size(); ++i) EXPECT_NEAR(b.loss[i], a.loss[5 + i], 1e-5 * a.loss[5 + i]) << "step " << 6 + i;
}

INSTANTIATE_TEST_SUITE_P(Accumulation, AccumulationChangeTest,
                         ::testing::Values(AccumulationChange{2, 1}, AccumulationChange{1, 2},
                                           AccumulationChange{2, 4}),
                         [](const auto& info) {
                           return "from" + std::to_string(info.param.from) + "_to" + std::to_string(info.param.to);
                         });

TEST(CheckpointMpiTest, KilledAtAnyMomentLeavesALoadableLatest) {
  const std::string dir = dir_for("ckpt");
  // A model whose checkpoint (~38 MB) takes a while to write, saved every step.
  const std::string args = " --set model.d_model=256 --set model.n_layer=4 --steps 400 --save-every 1 --keep 2 --save-dir " +
                           dir + " --resume auto";
  // exec: the pid killed is zero-train itself.
  const std::string cmd = "cd " + std::string(ZE_SOURCE_DIR) + " && exec " + ZE_TRAIN_BIN +
                          " --config configs/small-gpt.json --config configs/ds/fp32-adamw.json" + args +
                          " > /dev/null 2>&1";
  for (int attempt = 0; attempt < 6; ++attempt) {
    const pid_t pid = fork();
    if (pid == 0) {
      execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    // Let it reach its step-and-save cycle (a first checkpoint exists), then
    // kill it at a moment that moves through the cycle from attempt to attempt.
    const std::string before = fs::exists(dir + "/latest") ? file_bytes(dir + "/latest") : "";
    for (int i = 0; i < 600 && (!fs::exists(dir + "/latest") || file_bytes(dir + "/latest") == before); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(53 + 97 * attempt));
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    ASSERT_TRUE(fs::exists(dir + "/latest")) << "no checkpoint within 60 s";
    const auto inspect = run_command(std::string(ZE_CKPT_BIN) + " inspect " + dir);
    EXPECT_EQ(inspect.exit_code, 0) << "after kill " << attempt << ":\n" << inspect.output;
    EXPECT_NE(inspect.output.find("segments OK"), std::string::npos) << inspect.output;
  }
  // And the run resumes from it.
  const auto r = run_command(train_cmd(1, " --set model.d_model=256 --set model.n_layer=4 --save-dir " + dir +
                                              " --resume auto --steps 1"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(CheckpointMpiTest, MissingRankFileIsNamed) {
  const std::string dir = dir_for("ckpt");
  auto r = run_command(train_cmd(2, "--set zero_optimization.stage=2 --steps 2 --save-dir " + dir));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  fs::remove(dir + "/global_step2/rank_00001.shard");
  r = run_command(train_cmd(1, "--set zero_optimization.stage=2 --steps 3 --resume " + dir));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("shard of rank 1 is missing"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank_00001.shard"), std::string::npos) << r.output;
}

TEST(CheckpointMpiTest, FullDiskFailsTheSaveAndKeepsThePreviousCheckpoint) {
  const std::string dir = dir_for("small_disk");
  fs::create_directories(dir);
  // Room for one checkpoint of this model (~1.4 MB), not two.
  if (mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=2m") != 0) {
    GTEST_SKIP() << "cannot mount a small tmpfs here (" << std::strerror(errno) << ")";
  }
  const auto r = run_command(train_cmd(1, "--steps 5 --save-every 1 --save-dir " + dir));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("the disk is full"), std::string::npos) << r.output;
  const auto inspect = run_command(std::string(ZE_CKPT_BIN) + " inspect " + dir);
  EXPECT_EQ(inspect.exit_code, 0) << inspect.output;
  EXPECT_NE(inspect.output.find("global_step1 (latest)"), std::string::npos) << inspect.output;
  bool partial_left = false;
  for (const auto& e : fs::directory_iterator(dir)) partial_left |= e.path().filename().string().rfind(".", 0) == 0;
  EXPECT_FALSE(partial_left) << "a failed save left its partial directory";
  umount(dir.c_str());
}

}  // namespace
