// zero-run (runtime/tools/zero_run.cc) as a user meets it:
//  * a 2-rank run whose rank 1 is killed (SIGKILL) mid-run is launched again
//    from its newest checkpoint and finishes with every step's loss equal,
//    bit for bit, to an uninterrupted run's (the same layout after the
//    restart);
//  * on two hosts (played on this machine by two_hosts_launcher.sh), a host
//    that does not come back after its rank was killed is dropped: the job
//    continues on the other host's one rank, the elasticity section keeping
//    the global batch, on the uninterrupted run's losses (within 1e-5
//    relative: the summation order of the world size changes);
//  * a failure that repeats with nothing saved stops after the second
//    attempt, a changing one after --max-restarts, each with its cause;
//  * a config error (exit 2) is not restarted;
//  * an unreachable host is refused, by name, before anything starts.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/testing/run_command.h"
#include "tests/testing/test_files.h"

namespace {

namespace fs = std::filesystem;
using zero::testing::run_command;

const std::string kMpirun = std::string("\"") + ZE_MPIEXEC + " --allow-run-as-root --oversubscribe\"";

std::string dir_for(const std::string& name) {
  const std::string d = ::testing::TempDir() + "/zero_run_test." + name;
  fs::remove_all(d);
  fs::remove(d + ".jsonl");
  return d;
}

std::string train_args(const std::string& dir, int steps) {
  return std::string(ZE_TRAIN_BIN) + " --config configs/small-gpt.json --config configs/ds/fp32-adamw.json" +
         " --set model.d_model=128 --steps " + std::to_string(steps) + " --save-every 2 --save-dir " + dir +
         " --metrics " + dir + ".jsonl";
}

// step -> loss; a step logged twice (run again after a restart) keeps its last value.
std::map<int, double> losses(const std::string& path) {
  std::map<int, double> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    out[j["step"].get<int>()] = j["loss"].get<double>();
  }
  return out;
}

// The line of `text` that holds `part` ("" when none).
std::string line_with(const std::string& text, const std::string& part) {
  const size_t at = text.find(part);
  if (at == std::string::npos) return "";
  const size_t start = text.rfind('\n', at), end = text.find('\n', at);
  return text.substr(start == std::string::npos ? 0 : start + 1,
                     end == std::string::npos ? std::string::npos : end - (start == std::string::npos ? 0 : start + 1));
}

// The pid of the zero-train process of MPI rank `rank` whose command line names `marker`.
pid_t rank_pid(const std::string& marker, int rank) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = zero::testing::read_file(e.path() / "cmdline");
    for (char& c : cmdline)
      if (c == '\0') c = ' ';
    if (cmdline.find(ZE_TRAIN_BIN) != 0 || cmdline.find(marker) == std::string::npos) continue;
    std::string env = zero::testing::read_file(e.path() / "environ");
    for (char& c : env)
      if (c == '\0') c = '\n';
    if (env.find("\nOMPI_COMM_WORLD_RANK=" + std::to_string(rank) + "\n") != std::string::npos) return std::stoi(name);
  }
  return -1;
}

// Starts `cmd` (zero-run) in a thread, waits for a checkpoint at step >= 6
// in `dir`, runs `before_kill`, kills rank 1 and returns zero-run's output.
zero::testing::CommandResult run_and_kill_rank_1(const std::string& cmd, const std::string& dir,
                                                 const std::function<void()>& before_kill) {
  zero::testing::CommandResult r;
  std::thread supervisor([&] { r = run_command(cmd); });
  pid_t victim = -1;
  for (int i = 0; i < 3000 && victim < 0; ++i) {
    const std::string latest = zero::testing::read_file(dir + "/latest");
    if (latest.rfind("global_step", 0) == 0 && std::stoi(latest.substr(11)) >= 6) victim = rank_pid(dir, 1);
    if (victim < 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (victim > 0) {
    before_kill();
    kill(victim, SIGKILL);
  }
  supervisor.join();
  if (victim <= 0) r.output = "no rank 1 to kill: " + r.output;
  return r;
}

TEST(ZeroRunTest, AKilledRankIsRestartedAndTheRunFinishesOnTheSameLosses) {
  constexpr int kSteps = 40;
  const std::string straight = dir_for("straight"), killed = dir_for("killed");
  auto r = run_command("cd " + std::string(ZE_SOURCE_DIR) + " && timeout 600 " + ZE_MPIEXEC +
                       " --allow-run-as-root --oversubscribe -np 2 " + train_args(straight, kSteps));
  ASSERT_EQ(r.exit_code, 0) << r.output;

  const std::string cmd = "cd " + std::string(ZE_SOURCE_DIR) + " && timeout 600 " + ZE_RUN_BIN + " --np 2 --mpirun " +
                          kMpirun + " --restart-delay 0.2 -- " + train_args(killed, kSteps);
  r = run_and_kill_rank_1(cmd, killed, [] {});
  const std::string& out = r.output;
  ASSERT_EQ(r.exit_code, 0) << out;
  EXPECT_NE(out.find("zero-run: attempt 1 failed (exit 137): rank 1 on "), std::string::npos) << out;
  EXPECT_NE(out.find("exited on signal 9 (Killed); restarting from the newest checkpoint"), std::string::npos) << out;
  EXPECT_NE(out.find("resumed from " + killed + "/global_step"), std::string::npos) << out;
  EXPECT_NE(out.find("zero-run: finished after 1 restart"), std::string::npos) << out;

  const std::map<int, double> a = losses(straight + ".jsonl"), b = losses(killed + ".jsonl");
  ASSERT_EQ(a.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(b.size(), a.size()) << out;
  for (const auto& [step, loss] : a) EXPECT_EQ(b.at(step), loss) << "step " << step;  // bitwise
}

TEST(ZeroRunTest, AHostThatDoesNotComeBackIsDroppedAndTheGlobalBatchKept) {
  constexpr int kSteps = 30;
  const std::string straight = dir_for("two_hosts_straight"), shrunk = dir_for("two_hosts_shrunk");
  const std::string elastic = " --set elasticity.enabled=true --set elasticity.max_train_batch_size=16"
                              " --set elasticity.micro_batch_sizes=[4,8] --set elasticity.max_gpus=2"
                              " --set elasticity.version=0.1 --set elasticity.ignore_non_elastic_batch_info=true";
  auto r = run_command("cd " + std::string(ZE_SOURCE_DIR) + " && timeout 600 " + ZE_MPIEXEC +
                       " --allow-run-as-root --oversubscribe -np 2 " + train_args(straight, kSteps) + elastic);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("micro 8 x accumulation 1 x 2 ranks"), std::string::npos) << r.output;

  const std::string down = shrunk + ".down";
  fs::remove(down);  // from an earlier run
  const std::string launcher = std::string("\"sh ") + ZE_SOURCE_DIR + "/tests/runtime/two_hosts_launcher.sh " +
                               ZE_MPIEXEC + " --allow-run-as-root --oversubscribe --\"";
  const std::string cmd = "cd " + std::string(ZE_SOURCE_DIR) + " && ZE_TEST_DOWN_HOSTS=" + down + " timeout 600 " +
                          ZE_RUN_BIN + " --hosts hosta:1,hostb:1 --mpirun " + launcher +
                          " --restart-delay 0.2 --probe-timeout 60 -- " + train_args(shrunk, kSteps) + elastic;
  r = run_and_kill_rank_1(cmd, shrunk, [&] { std::ofstream(down) << "hostb\n"; });
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("zero-run: attempt 1 of at most 4, 2 ranks on hosta:1,hostb:1"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("zero-run: dropping host that did not answer: hostb (ssh: "
                          "connect to host hostb port 22: No route to host)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("zero-run: attempt 2 of at most 4, 1 rank on hosta:1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("micro 8 x accumulation 2 x 1 rank"), std::string::npos) << r.output;
  const std::map<int, double> a = losses(straight + ".jsonl"), b = losses(shrunk + ".jsonl");
  ASSERT_EQ(b.size(), a.size()) << r.output;
  for (const auto& [step, loss] : a) EXPECT_NEAR(b.at(step), loss, 1e-5 * loss) << "step " << step;
}

TEST(ZeroRunTest, AFailureThatRepeatsWithNothingSavedStopsWithItsCause) {
  const auto r = run_command(std::string(ZE_RUN_BIN) + " --np 1 --mpirun " + kMpirun +
                             " --max-restarts 5 --restart-delay 0 -- sh -c 'echo \"disk on fire\" >&2; exit 1'");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("zero-run: attempt 2 of at most 6"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("attempt 3 of"), std::string::npos) << r.output;
  // (With or without mpirun's report, which Open MPI does not always print, in front of the words.)
  const std::string stop = line_with(r.output, "zero-run: stopped: failed the same way twice in a row with no "
                                               "checkpoint saved between: ");
  EXPECT_TRUE(stop.ends_with("disk on fire")) << r.output;
}

TEST(ZeroRunTest, RestartsAreBounded) {
  // A different cause each time (the shell's pid), so only the bound stops it.
  const auto r = run_command(std::string(ZE_RUN_BIN) + " --np 1 --mpirun " + kMpirun +
                             " --max-restarts 2 --restart-delay 0 -- sh -c 'echo \"lost $$\" >&2; exit 3'");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("attempt 3 of at most 3"), std::string::npos) << r.output;
  const std::string stop = line_with(r.output, "zero-run: stopped: gave up after 2 restarts (--max-restarts 2); the last "
                                               "failure: ");
  EXPECT_NE(stop.find("lost "), std::string::npos) << r.output;
}

TEST(ZeroRunTest, AConfigErrorIsNotRestarted) {
  const std::string dir = dir_for("config");
  const auto r = run_command("cd " + std::string(ZE_SOURCE_DIR) + " && " + ZE_RUN_BIN + " --np 1 --mpirun " + kMpirun +
                             " -- " + train_args(dir, 2) + " --set zero_optimization.stag=1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("zero_optimization.stag"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("zero-run: stopped: exit status 2 (a usage or config error"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("attempt 2"), std::string::npos) << r.output;
}

TEST(ZeroRunTest, AnUnreachableHostIsNamedBeforeAnythingStarts) {
  const std::string marker = dir_for("unreachable");
  const auto r = run_command(std::string(ZE_RUN_BIN) + " --hosts localhost:1,no-such-host.invalid:1 --mpirun " +
                             kMpirun + " --probe-timeout 30 -- touch " + marker);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("zero-run: host not reachable, nothing was started: no-such-host.invalid ("),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(marker));
}

TEST(ZeroRunTest, UsageErrorsExitTwo) {
  auto r = run_command(std::string(ZE_RUN_BIN) + " --np 2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("no program to run: give it after --"), std::string::npos) << r.output;
  r = run_command(std::string(ZE_RUN_BIN) + " --hosts a:0 -- true");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("\"a:0\""), std::string::npos) << r.output;
}

}  // namespace
