// zero-train under mpirun, as a user launches it: 2 ranks at micro-batch 4
// train the same global batch (16 sequences) as 1 rank at micro-batch 8, and
// rank 0 reports losses that match the single-rank run within 1e-5 relative
// (fp32; the sample order is global, see data_loader.h). Only rank 0 writes
// the metrics file and the progress lines. With tensor_parallel.autotp_size 2
// (and sequence parallelism) on 2 ranks the losses are one rank's too, and a
// tensor size the world or the heads do not divide exits 2 naming both numbers.
// With pipeline.stages 2 (1F1B and GPipe) the losses are one rank's; a
// pipeline the world or the layers cannot hold exits 2 naming the numbers,
// fewer micro-batches than stages warns with the bubble, and a middle stage's
// rank killed mid-run stops the job (no hang) naming the transfer. A
// mesh.order that puts the data ranks adjacent trains the same losses; one
// naming an unknown axis, or leaving out one the world needs, exits 2.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>

#include <nlohmann/json.hpp>

#include "tests/testing/run_command.h"

namespace {

std::vector<double> run_losses(int ranks, int micro, const std::string& metrics, const std::string& extra = "") {
  const std::string launcher = ranks == 1 ? "" : std::string(ZE_MPIEXEC) + " --allow-run-as-root --oversubscribe -np " +
                                                     std::to_string(ranks) + " ";
  const auto r = zero::testing::run_command("cd " + std::string(ZE_SOURCE_DIR) + " && timeout 300 " + launcher +
                                            ZE_TRAIN_BIN + " --config configs/small-gpt.json --config configs/ds/fp32-adamw.json" +
                                            " --set zero_optimization.stage=3 --set train_micro_batch_size_per_gpu=" +
                                            std::to_string(micro) + " --steps 20 --metrics " + metrics + extra);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  if (ranks > 1 && extra.empty()) {
    EXPECT_NE(r.output.find("micro " + std::to_string(micro) + " x accumulation 2 x 2 ranks"), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("communicator: mpi"), std::string::npos) << r.output;
  }
  std::vector<double> losses;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) losses.push_back(nlohmann::json::parse(line)["loss"].get<double>());
  return losses;
}

TEST(ZeroTrainMpiTest, TwoRanksTrainWhatOneRankTrains) {
  const std::string dir = ::testing::TempDir();
  const std::vector<double> one = run_losses(1, 8, dir + "/ZeroTrainMpiTest.one.jsonl");
  const std::vector<double> two = run_losses(2, 4, dir + "/ZeroTrainMpiTest.two.jsonl");
  ASSERT_EQ(one.size(), 20u);
  ASSERT_EQ(two.size(), 20u) << "rank 0 alone writes one line per step";
  for (size_t i = 0; i < one.size(); ++i) EXPECT_NEAR(two[i], one[i], 1e-5 * one[i]) << "step " << i + 1;
  EXPECT_LT(one.back(), one.front() - 1.0);
}

TEST(ZeroTrainMpiTest, TwoTensorRanksTrainWhatOneRankTrains) {
  const std::string dir = ::testing::TempDir();
  const std::vector<double> one = run_losses(1, 8, dir + "/ZeroTrainMpiTest.tp1.jsonl");
  for (const char* sp : {"false", "true"}) {
    const std::vector<double> two =
        run_losses(2, 8, dir + "/ZeroTrainMpiTest.tp2.jsonl",
                   std::string(" --set tensor_parallel.autotp_size=2 --set tensor_parallel.sequence_parallel=") + sp);
    ASSERT_EQ(two.size(), 20u);
    // AdamW divides by sqrt(v): weights whose true gradient is ~0 move on
    // rounding noise, which a different split sums in another order, so the
    // trajectories part by ~1e-5 relative over 20 steps (tensor_parallel_test
    // holds the split to 1e-5 with SGD, as the stage-parity test does).
    for (size_t i = 0; i < one.size(); ++i) EXPECT_NEAR(two[i], one[i], 5e-5 * one[i]) << "step " << i + 1 << " sp " << sp;
  }
}

TEST(ZeroTrainMpiTest, TwoPipelineStagesTrainWhatOneRankTrains) {
  const std::string dir = ::testing::TempDir();
  const std::vector<double> one = run_losses(1, 8, dir + "/ZeroTrainMpiTest.pp1.jsonl", " --set zero_optimization.stage=1");
  for (const char* schedule : {"1f1b", "gpipe"}) {
    const std::vector<double> two =
        run_losses(2, 8, dir + "/ZeroTrainMpiTest.pp2.jsonl",
                   std::string(" --set zero_optimization.stage=1 --set pipeline.stages=2 --set pipeline.schedule=") +
                       schedule);
    ASSERT_EQ(two.size(), 20u);
    for (size_t i = 0; i < one.size(); ++i)
      EXPECT_NEAR(two[i], one[i], 5e-5 * one[i]) << "step " << i + 1 << " " << schedule;
  }
}

// mesh.order chooses which world ranks form each group, not what they
// compute: on 4 ranks (tensor 2 x data 2) the data-parallel ranks adjacent
// ("dp-tp-pp") train what the default (tensor ranks adjacent) trains.
TEST(ZeroTrainMpiTest, TheMeshOrderMovesRanksNotResults) {
  const std::string dir = ::testing::TempDir();
  const std::string tp = " --set tensor_parallel.autotp_size=2 --steps 6";
  const std::vector<double> by_default = run_losses(4, 8, dir + "/ZeroTrainMpiTest.order1.jsonl", tp);
  const std::vector<double> dp_first =
      run_losses(4, 8, dir + "/ZeroTrainMpiTest.order2.jsonl", tp + " --set mesh.order=dp-tp-pp");
  ASSERT_EQ(by_default.size(), 6u);
  ASSERT_EQ(dp_first.size(), 6u);
  for (size_t i = 0; i < by_default.size(); ++i) EXPECT_EQ(dp_first[i], by_default[i]) << "step " << i + 1;
}

// One step of configs/small-gpt.json on `ranks` ranks with `set` overrides.
zero::testing::CommandResult launch(int ranks, const std::string& set) {
  return zero::testing::run_command("cd " + std::string(ZE_SOURCE_DIR) + " && timeout 300 " + ZE_MPIEXEC +
                                    " --allow-run-as-root --oversubscribe -np " + std::to_string(ranks) + " " +
                                    ZE_TRAIN_BIN + " --config configs/small-gpt.json " + set + " --steps 1");
}

// A shell loop sending `signal` to the ranks of the zero-train job whose
// processes carry `metrics` on their command line (rank `rank`, or all with
// -1). It matches by the launcher's OMPI_COMM_WORLD_RANK, so neither the
// shell nor mpirun (whose command lines carry the path too) is hit, nor
// another test's job.
std::string signal_ranks(const std::string& metrics, const std::string& signal, int rank) {
  const std::string env = rank < 0 ? "OMPI_COMM_WORLD_RANK=" : "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
  return "for p in $(pgrep -f -- '--metrics " + metrics + "'); do tr '\\0' '\\n' < /proc/$p/environ 2>/dev/null | "
         "grep -q" + std::string(rank < 0 ? "" : "x") + " " + env + " && kill -" + signal + " $p; done";
}

// mpirun's report of the exit code of the first rank that failed.
int reported_exit_code(const std::string& output) {
  const size_t at = output.find("Exit code:");
  return at == std::string::npos ? -1 : std::atoi(output.c_str() + at + 10);
}

TEST(ZeroTrainMpiTest, ATensorSizeTheWorldOrTheHeadsDoNotDivideExitsTwo) {
  const auto world = launch(3, "--set train_batch_size=6 --set tensor_parallel.autotp_size=2");
  EXPECT_NE(world.exit_code, 0);
  EXPECT_NE(world.output.find("tensor_parallel.autotp_size: 2 does not divide the world of 3 ranks"), std::string::npos)
      << world.output;
  EXPECT_EQ(reported_exit_code(world.output), 2) << world.output;
  const auto heads = launch(3, "--set train_batch_size=6 --set tensor_parallel.autotp_size=3");  // 4 heads
  EXPECT_NE(heads.output.find("tensor_parallel.autotp_size: 3 does not divide model.n_head 4"), std::string::npos)
      << heads.output;
  EXPECT_EQ(reported_exit_code(heads.output), 2) << heads.output;
}

TEST(ZeroTrainMpiTest, AMeshOrderWithAnUnknownOrMissingAxisExitsTwoNamingIt) {
  const auto unknown = launch(2, "--set train_batch_size=16 --set mesh.order=tp-xp-dp");
  EXPECT_NE(unknown.output.find("mesh.order: mesh order \"tp-xp-dp\": \"xp\" is not an axis (the axes: tp, cp, ep, "
                                "dp, pp"),
            std::string::npos)
      << unknown.output;
  EXPECT_EQ(reported_exit_code(unknown.output), 2) << unknown.output;
  // Two data-parallel ranks and an order without dp: the sizes cannot make the world.
  const auto missing = launch(2, "--set train_batch_size=16 --set mesh.order=tp-pp");
  EXPECT_NE(missing.output.find("mesh tp 1 x pp 1 (order \"tp-pp\") is 1 ranks, not the world's 2"), std::string::npos)
      << missing.output;
  EXPECT_EQ(reported_exit_code(missing.output), 2) << missing.output;
}

TEST(ZeroTrainMpiTest, APipelineTheWorldOrTheLayersCannotHoldExitsTwo) {
  const auto world = launch(3, "--set train_batch_size=6 --set pipeline.stages=2");
  EXPECT_NE(world.output.find("pipeline.stages: 2 pipeline stages x tensor_parallel.autotp_size 1 do not divide the "
                              "world of 3 ranks"),
            std::string::npos)
      << world.output;
  EXPECT_EQ(reported_exit_code(world.output), 2) << world.output;
  const auto layers = launch(3, "--set train_batch_size=6 --set pipeline.stages=3");  // small-gpt has 2 blocks
  EXPECT_NE(layers.output.find("pipeline.stages: 3 pipeline stages for model.n_layer 2 blocks"), std::string::npos)
      << layers.output;
  EXPECT_EQ(reported_exit_code(layers.output), 2) << layers.output;
  const auto stage3 = launch(2, "--set train_batch_size=4 --set pipeline.stages=2 --set zero_optimization.stage=3");
  EXPECT_NE(stage3.output.find("zero_optimization.stage: 3 with pipeline.stages 2: refused"), std::string::npos)
      << stage3.output;
  EXPECT_EQ(reported_exit_code(stage3.output), 2) << stage3.output;
  // One micro-batch for two stages: it runs, and says what the bubble costs.
  const auto bubble = launch(2, "--set train_batch_size=4 --set gradient_accumulation_steps=1 --set pipeline.stages=2");
  EXPECT_EQ(bubble.exit_code, 0) << bubble.output;
  EXPECT_NE(bubble.output.find("gradient_accumulation_steps 1 micro-batches for 2 stages: 1F1B never reaches its "
                               "steady state and each stage idles (P - 1) / (M + P - 1) = 50%"),
            std::string::npos)
      << bubble.output;
}

// A middle stage's rank (rank 1 of 3 stages) killed mid-run: the job stops
// well before the timeout, mpirun names the dead rank, and a survivor's
// termination message names the operation it was in (a send or receive
// with rank 1, as a rule).
TEST(ZeroTrainMpiTest, AMiddleStageDyingStopsTheJobNamingTheTransfer) {
  const std::string metrics = ::testing::TempDir() + "/ZeroTrainMpiTest.death.jsonl";
  std::remove(metrics.c_str());
  // Kill rank 1 of this job (its processes alone carry this metrics path;
  // other tests' zero-train may run beside it) once rank 0 has written a
  // step: the run is in its schedule.
  const std::string killer = "( for i in $(seq 600); do [ -s " + metrics + " ] && break; sleep 0.1; done; " +
                             signal_ranks(metrics, "KILL", 1) + " ) & ";
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = zero::testing::run_command(
      "( cd " + std::string(ZE_SOURCE_DIR) + " || exit 1; " + killer + "timeout 120 " + ZE_MPIEXEC +
      " --allow-run-as-root --oversubscribe -np 3 " + ZE_TRAIN_BIN +
      " --config configs/small-gpt.json --set model.n_layer=3 --set pipeline.stages=3 --set train_batch_size=8"
      " --set steps_per_print=1 --steps 100000 --metrics " + metrics + "; rc=$?; wait; exit $rc )");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << "the job hung until timeout killed it:\n" << r.output;
  EXPECT_LT(seconds, 90.0) << r.output;
  EXPECT_NE(r.output.find("rank 1"), std::string::npos) << r.output;
  // A survivor names what it was waiting in: a transfer with rank 1, or
  // (when the kill lands between schedules) the step's reduction over the stages.
  EXPECT_NE(r.output.find("signal 15 during "), std::string::npos) << "no survivor named its operation:\n" << r.output;
}

// A frozen peer under ZeRO-3 (rank 1 stopped with SIGSTOP mid-run, the
// communicator's timeout 5 s): rank 0 ends with the timeout naming the
// collective it waited in, exit 1, never an internal error or a hang of one
// timeout per queued collective (the work behind the stuck one fails at once).
TEST(ZeroTrainMpiTest, AFrozenPeerEndsTheRunWithTheTimeoutNamingTheCollective) {
  const std::string metrics = ::testing::TempDir() + "/ZeroTrainMpiTest.frozen.jsonl";
  std::remove(metrics.c_str());
  const std::string stopper = "( for i in $(seq 600); do [ -s " + metrics + " ] && break; sleep 0.1; done; " +
                              signal_ranks(metrics, "STOP", 1) + " ) & ";
  const auto r = zero::testing::run_command(
      "( cd " + std::string(ZE_SOURCE_DIR) + " || exit 1; " + stopper + "timeout 120 " + ZE_MPIEXEC +
      " --allow-run-as-root --oversubscribe -np 2 -x ZE_COMM_TIMEOUT_S=5 " + ZE_TRAIN_BIN +
      " --config configs/small-gpt.json --config configs/ds/zero3-bf16.json --set train_micro_batch_size_per_gpu=4"
      " --set gradient_accumulation_steps=1 --set steps_per_print=1 --steps 100000 --metrics " + metrics +
      "; rc=$?; wait; " + signal_ranks(metrics, "CONT", -1) + "; " + signal_ranks(metrics, "KILL", -1) +
      "; exit $rc )");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("zero-train (rank 0): "), std::string::npos) << r.output;
  // The timed-out collective itself, or (when that wait's error was not the
  // one to surface) the work behind it, naming it.
  EXPECT_NE(r.output.find("did not finish within 5 s"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("a peer rank is not responding"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
}

// Two ranks share the machine's cores among their OpenMP threads (cores / 2
// each), which leaves the communication thread no core of its own: DeepSpeed's stage-3 overlap_comm default is turned off and the run
// says why; a configured value is kept, with the same note.
TEST(ZeroTrainMpiTest, OverlapCommFollowsTheCoresWhereTheConfigLeavesIt) {
  auto run = [](const std::string& overlap) {
    return zero::testing::run_command("cd " + std::string(ZE_SOURCE_DIR) + " && timeout 300 " + ZE_MPIEXEC +
                                      " --allow-run-as-root --oversubscribe -np 2 " + ZE_TRAIN_BIN +
                                      " --config configs/small-gpt.json --config configs/ds/zero3-bf16.json"
                                      " --steps 2 --set zero_optimization.overlap_comm=" + overlap);
  };
  auto r = run("auto");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("overlap_comm: off: the communication thread has no core of its own here"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("ZeRO stage 3 (overlap_comm)"), std::string::npos) << r.output;
  r = run("true");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("overlap_comm: on as configured, though"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ZeRO stage 3 (overlap_comm)"), std::string::npos) << r.output;
}

// The frozen peer resumed after rank 0 gave up on the collective (ZeRO-3,
// timeout 5 s): rank 0's collective is still running on its communication
// thread then, writing into the engine's buffers, so rank 0 must end without
// freeing them (no unwinding: runtime/tools/zero_train.cc,
// end_on_comm_timeout), with the timeout naming the collective and exit 1;
// the resumed rank 1 must not hang or crash either (mpirun ends it). The
// job ends within the bound, with no crash, sanitizer report, signal death
// or internal error on either rank.
TEST(ZeroTrainMpiTest, AFrozenPeerResumedAfterTheTimeoutEndsTheJobCleanly) {
  const std::string metrics = ::testing::TempDir() + "/ZeroTrainMpiTest.resumed.jsonl";
  const std::string log = ::testing::TempDir() + "/ZeroTrainMpiTest.resumed.log";
  std::remove(metrics.c_str());
  std::remove(log.c_str());
  // Freeze rank 1 once rank 0 has written a step; resume it once rank 0 has
  // reported the timeout.
  const std::string freezer = "( for i in $(seq 600); do [ -s " + metrics + " ] && break; sleep 0.1; done; " +
                              signal_ranks(metrics, "STOP", 1) + "; for i in $(seq 600); do grep -q 'did not finish "
                              "within' " + log + " 2>/dev/null && break; sleep 0.1; done; " +
                              signal_ranks(metrics, "CONT", 1) + " ) & ";
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = zero::testing::run_command(
      "( cd " + std::string(ZE_SOURCE_DIR) + " || exit 1; " + freezer + "timeout 60 " + ZE_MPIEXEC +
      " --allow-run-as-root --oversubscribe -np 2 -x ZE_COMM_TIMEOUT_S=5 " + ZE_TRAIN_BIN +
      " --config configs/small-gpt.json --set zero_optimization.stage=3 --set train_micro_batch_size_per_gpu=4"
      " --set gradient_accumulation_steps=1 --set steps_per_print=1 --steps 100000 --metrics " + metrics + " > " +
      log + " 2>&1; rc=$?; wait; cat " + log + "; " + signal_ranks(metrics, "CONT", -1) + "; " +
      signal_ranks(metrics, "KILL", -1) + "; exit $rc )");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(r.exit_code, 124) << "the job hung until timeout killed it:\n" << r.output;
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_LT(seconds, 60.0) << r.output;
  EXPECT_EQ(reported_exit_code(r.output), 1) << r.output;
  // Rank 0 names the collective it gave up on ("rank 0: all_gather of 1.0
  // KiB fp32 did not finish within 5 s", "rank 0: all_reduce (sum) of 1
  // scalar(s) ...": where rank 1 froze decides which, or the work queued
  // behind it), as
  // the wait's own error: it ended inside the wait, before the error went up
  // the stack (which would have prefixed "backward of micro-step N: " and
  // destroyed the Engine on the way).
  EXPECT_TRUE(std::regex_search(
      r.output,
      std::regex("zero-train \\(rank 0\\): rank 0: [a-z_]+( \\([a-z]+\\))? of [^\\n]*did not finish within 5 s")))
      << r.output;
  EXPECT_NE(r.output.find("a peer rank is not responding"), std::string::npos) << r.output;
  for (const char* bad : {"internal error", "AddressSanitizer", "Segmentation fault", "exited on signal",
                          "core dumped"}) {
    EXPECT_EQ(r.output.find(bad), std::string::npos) << bad << " in:\n" << r.output;
  }
}

}  // namespace
