// What zero-train says at start-up under mpirun (2 ranks, one step of a tiny
// model), as a user reads it:
//  * the OpenMP threads per rank: OMP_NUM_THREADS when set (and the backend
//    line runs that many), else the cores shared among the node's ranks,
//    and one line on rank 0 saying which (comm/mpi_communicator.h);
//  * the pipeline line mentions a tied copy of the token table on the last
//    stage only for a model whose head is tied (GPT-2), not an untied Llama.
// And the thread rule itself, for the values a user may set.
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <string>

#include "comm/mpi_communicator.h"
#include "tests/testing/run_command.h"

namespace {

// One step of `config` on 2 ranks; `env` goes before mpirun (the ranks
// inherit it), e.g. "env -u OMP_NUM_THREADS".
zero::testing::CommandResult two_ranks(const std::string& env, const std::string& config, const std::string& set = "") {
  return zero::testing::run_command("cd " + std::string(ZE_SOURCE_DIR) + " && " + env + " timeout 300 " + ZE_MPIEXEC +
                                    " --allow-run-as-root --oversubscribe -np 2 " + ZE_TRAIN_BIN + " --config " +
                                    config + " --steps 1 " + set);
}

// configs/small-gpt.json with a DeepSpeed config for its batch and optimizer.
const char* kGpt = "configs/small-gpt.json --config configs/ds/fp32-adamw.json";

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(ZeroTrainStartupTest, ThreadsPerRankFollowOmpNumThreads) {
  for (const char* n : {"1", "2"}) {
    const auto r = two_ranks(std::string("env OMP_NUM_THREADS=") + n, kGpt);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string threads = std::string(n) + (n == std::string("1") ? " OpenMP thread" : " OpenMP threads");
    EXPECT_EQ(count(r.output, "threads: " + threads + " per rank, from OMP_NUM_THREADS=" + n), 1u)
        << "rank 0 alone says it\n" << r.output;
    EXPECT_NE(r.output.find(std::string("backend: cpu, ") + n + " threads per rank"), std::string::npos) << r.output;
  }
}

TEST(ZeroTrainStartupTest, ThreadsPerRankShareTheCoresWithoutOmpNumThreads) {
  const auto r = two_ranks("env -u OMP_NUM_THREADS", kGpt);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch m;
  const std::regex line(R"(threads: (\d+) OpenMP threads? per rank, from cores / ranks on this node \((\d+) cores? )"
                        R"(this rank can run on / 2 ranks; set OMP_NUM_THREADS to choose\))");
  ASSERT_TRUE(std::regex_search(r.output, m, line)) << r.output;
  const int threads = std::stoi(m[1]), cores = std::stoi(m[2]);
  EXPECT_EQ(threads, std::max(1, cores / 2)) << r.output;
  EXPECT_NE(r.output.find("backend: cpu, " + std::to_string(threads) + " threads per rank"), std::string::npos)
      << r.output;
  EXPECT_EQ(count(r.output, "threads: "), 1u) << r.output;
}

TEST(ZeroTrainStartupTest, PipelineLineNamesATiedCopyOnlyForATiedHead) {
  const std::string set = "--set pipeline.stages=2 --set gradient_accumulation_steps=2";
  auto r = two_ranks("env OMP_NUM_THREADS=1", "configs/llama-tiny.json", set);  // untied
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("(embeddings on the first, the head (untied: its own weights, no copy of the token table) "
                          "on the last)"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("tied copy"), std::string::npos) << r.output;

  r = two_ranks("env OMP_NUM_THREADS=1", kGpt, set);  // GPT-2: always tied
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("(embeddings on the first, the head and a tied copy of the token table on the last)"),
            std::string::npos)
      << r.output;
}

TEST(RankThreadsTest, OmpNumThreadsWinsElseCoresOverRanks) {
  using zero::choose_rank_threads;
  // Unset or empty: the cores this rank can run on, over the node's ranks, at least one.
  EXPECT_EQ(choose_rank_threads(nullptr, 8, 8, 2).threads, 4);
  EXPECT_EQ(choose_rank_threads("", 8, 8, 3).threads, 2);
  EXPECT_EQ(choose_rank_threads(nullptr, 2, 2, 4).threads, 1);
  EXPECT_FALSE(choose_rank_threads(nullptr, 8, 8, 2).from_environment);
  // Set: kept as given (its first nesting level), oversubscribed or not.
  EXPECT_EQ(choose_rank_threads("3", 8, 8, 2).threads, 3);
  EXPECT_TRUE(choose_rank_threads("3", 8, 8, 2).from_environment);
  EXPECT_EQ(choose_rank_threads("4,2", 8, 8, 2).threads, 4);
  const zero::RankThreads over = choose_rank_threads("4", 2, 2, 2);
  EXPECT_EQ(over.threads, 4);
  EXPECT_NE(over.description.find("more than the 2 cores this rank can run on: oversubscribed"), std::string::npos)
      << over.description;
  EXPECT_NE(choose_rank_threads("2", 2, 2, 2).description.find("2 ranks x 2 threads on this node's 2 cores: "
                                                                "oversubscribed"),
            std::string::npos);
  EXPECT_EQ(choose_rank_threads("1", 2, 2, 2).description, "1 OpenMP thread per rank, from OMP_NUM_THREADS=1");
  // Not a positive number: ignored, and the line says so.
  for (const char* bad : {"0", "-2", "abc", "2x"}) {
    const zero::RankThreads r = choose_rank_threads(bad, 8, 8, 2);
    EXPECT_EQ(r.threads, 4) << bad;
    EXPECT_FALSE(r.from_environment) << bad;
    EXPECT_NE(r.description.find(std::string("OMP_NUM_THREADS=\"") + bad + "\" is not a positive number of threads, "
                                 "ignored"),
              std::string::npos)
        << r.description;
  }
}

}  // namespace
