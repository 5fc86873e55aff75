// Ctrl-C and `kill` as a user sends them to a running zero-train (one rank,
// optimizer state on NVMe, checkpoints every 5 steps), once the run is a few
// steps in:
//  * SIGINT: the run stops at the end of its step, says after which step and
//    where to resume, exits 130, and leaves no swap file;
//  * SIGTERM: the same with exit 143; the checkpoint it names resumes;
//  * two SIGINTs: the second ends it at once (exit 130), no swap file left;
//  * SIGKILL: no handler runs, and no swap file is left either (the files
//    have no name on disk while the run uses them).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/run_command.h"
#include "tests/testing/test_files.h"

namespace {

namespace fs = std::filesystem;

std::string dir_for(const std::string& name) { return zero::testing::fresh_test_dir(name); }

int count_lines(const std::string& path) {
  std::ifstream f(path);
  int n = 0;
  for (std::string line; std::getline(f, line);) ++n;
  return n;
}

std::string read_all(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

struct Background {
  std::string swap, ckpt, metrics, log;
  pid_t pid = -1;
};

// zero-train with its optimizer state on NVMe, started in the background.
Background start(const std::string& name, const std::vector<std::string>& extra = {}) {
  Background r;
  r.swap = dir_for(name + ".swap");
  r.ckpt = dir_for(name + ".ckpt") + "/ckpt";
  r.metrics = dir_for(name + ".metrics") + "/m.jsonl";
  r.log = dir_for(name + ".log") + "/out.txt";
  const std::vector<std::string> args = {
      ZE_TRAIN_BIN, "--config", std::string(ZE_SOURCE_DIR) + "/configs/small-gpt.json", "--config",
      std::string(ZE_SOURCE_DIR) + "/configs/ds/zero3-nvme-optimizer.json", "--set",
      "zero_optimization.offload_optimizer.nvme_path=" + r.swap, "--steps", "100000", "--metrics", r.metrics,
      "--save-dir", r.ckpt, "--save-every", "5"};
  std::vector<std::string> all = args;
  all.insert(all.end(), extra.begin(), extra.end());
  r.pid = fork();
  if (r.pid == 0) {
    const int fd = open(r.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    std::vector<char*> argv;
    for (const std::string& a : all) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return r;
}

// Waits until the run has done `steps` steps (its metrics lines), at most 60 s.
bool wait_steps(const Background& r, int steps) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (count_lines(r.metrics) < steps) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// Its exit status (-signal if a signal killed it), at most 60 s.
int wait_exit(const Background& r) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  int status = 0;
  while (waitpid(r.pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(r.pid, SIGKILL);
      waitpid(r.pid, &status, 0);
      return -1000;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

bool empty_dir(const std::string& d) { return fs::is_empty(d); }

// The files process `pid` holds open that were in `dir` and have no name
// there (its swap files), from /proc/<pid>/fd.
int unnamed_files_open(pid_t pid, const std::string& dir) {
  const std::string prefix = fs::canonical(dir).string() + "/";
  int n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    std::error_code link_ec;
    const std::string target = fs::read_symlink(e.path(), link_ec).string();
    if (!link_ec && target.rfind(prefix, 0) == 0 && target.find(" (deleted)") != std::string::npos) ++n;
  }
  return n;
}

TEST(ZeroTrainSignalTest, SigintStopsAtTheStepBoundaryAndRemovesTheSwapFile) {
  Background r = start("int");
  ASSERT_TRUE(wait_steps(r, 7)) << read_all(r.log);
  EXPECT_EQ(unnamed_files_open(r.pid, r.swap), 1) << "the run swaps through a file";
  EXPECT_TRUE(empty_dir(r.swap)) << "which has no name on disk";
  kill(r.pid, SIGINT);
  EXPECT_EQ(wait_exit(r), 130) << read_all(r.log);
  const std::string out = read_all(r.log);
  EXPECT_NE(out.find("signal 2 during"), std::string::npos) << out;
  EXPECT_NE(out.find("stopping at the end of this step"), std::string::npos) << out;
  EXPECT_NE(out.find("stopped by signal 2 after step "), std::string::npos) << out;
  EXPECT_NE(out.find("the last checkpoint is " + r.ckpt + "/global_step"), std::string::npos) << out;
  EXPECT_TRUE(empty_dir(r.swap)) << "swap files are removed";
}

TEST(ZeroTrainSignalTest, SigtermStopsWith143AndTheNamedCheckpointResumes) {
  Background r = start("term");
  ASSERT_TRUE(wait_steps(r, 7)) << read_all(r.log);
  kill(r.pid, SIGTERM);
  EXPECT_EQ(wait_exit(r), 143) << read_all(r.log);
  const std::string out = read_all(r.log);
  EXPECT_NE(out.find("stopped by signal 15 after step "), std::string::npos) << out;
  EXPECT_TRUE(empty_dir(r.swap));
  // The checkpoint it named resumes, and the resumed run trains on to 5 steps
  // past where the first one stopped.
  const size_t at = out.find("stopped by signal 15 after step ");
  ASSERT_NE(at, std::string::npos) << out;
  const int stopped = std::stoi(out.substr(at + 32));
  const auto resumed = zero::testing::run_command(
      std::string(ZE_TRAIN_BIN) + " --config " + ZE_SOURCE_DIR + "/configs/small-gpt.json --config " + ZE_SOURCE_DIR +
      "/configs/ds/zero3-nvme-optimizer.json --set zero_optimization.offload_optimizer.nvme_path=" + r.swap +
      " --resume " + r.ckpt + " --steps " + std::to_string(stopped + 5));
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from " + r.ckpt + "/global_step"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("done: "), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("step " + std::to_string(stopped + 5) + "/"), std::string::npos)
      << "it trained on\n" << resumed.output;
  EXPECT_TRUE(empty_dir(r.swap));
}

TEST(ZeroTrainSignalTest, ASecondSignalStopsAtOnceAndStillRemovesTheSwapFile) {
  // Long steps (a large micro-batch), so the second signal lands inside one.
  Background r = start("twice", {"--set", "train_micro_batch_size_per_gpu=256"});
  ASSERT_TRUE(wait_steps(r, 2)) << read_all(r.log);
  kill(r.pid, SIGINT);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (read_all(r.log).find("stopping at the end of this step") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  kill(r.pid, SIGINT);  // the first was handled (two pending SIGINTs would merge into one)
  EXPECT_EQ(wait_exit(r), 130) << read_all(r.log);
  const std::string out = read_all(r.log);
  EXPECT_NE(out.find("ZeroEngine rank 0: terminated by signal 2 during "), std::string::npos)
      << "the second signal itself ended the run\n" << out;
  EXPECT_EQ(out.find("stopped by signal"), std::string::npos) << "it did not wait for the step boundary\n" << out;
  EXPECT_TRUE(empty_dir(r.swap)) << out;
}

// kill -9 (or mpirun's SIGKILL after a second Ctrl-C, or the OOM killer):
// no handler runs, and still no swap file is left, with the parameters in
// the optimizer state's file or in a file of their own.
TEST(ZeroTrainSignalTest, SigkillLeavesNoSwapFile) {
  for (const std::string optimizer : {"nvme", "cpu"}) {
    const std::string name = "kill_" + optimizer;
    const std::string swap = zero::testing::test_path(name + ".swap");  // the directory start() makes
    Background r = start(name, {"--set", "zero_optimization.offload_optimizer.device=" + optimizer, "--set",
                                "zero_optimization.offload_param.device=nvme", "--set",
                                "zero_optimization.offload_param.nvme_path=" + swap});
    ASSERT_EQ(r.swap, swap);
    ASSERT_TRUE(wait_steps(r, 3)) << read_all(r.log);
    EXPECT_EQ(unnamed_files_open(r.pid, r.swap), 1) << "the run swaps through a file\n" << read_all(r.log);
    kill(r.pid, SIGKILL);
    EXPECT_EQ(wait_exit(r), -SIGKILL) << read_all(r.log);
    EXPECT_TRUE(empty_dir(r.swap)) << "optimizer on " << optimizer << "\n" << read_all(r.log);
  }
}

}  // namespace
