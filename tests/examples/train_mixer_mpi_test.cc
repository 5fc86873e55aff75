// examples/train_mixer under mpirun, as a user launches it: on 2 ranks
// (ZeRO-3, checkpointed blocks, optimizer on the CPU) every rank reports
// the same loss at every step, the loss falls well below its start (ln 4
// for 4 classes), and the losses are those of one process training the same
// global batches (2 x 8 images per step against 1 x 16), to fp32 rounding.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <string>
#include <vector>

#include "tests/testing/run_command.h"

namespace {

// Losses by rank, in step order, from lines "rank R step S loss L".
std::map<int, std::vector<double>> run_losses(int ranks, int steps, int micro_batch) {
  const std::string launcher =
      ranks == 1 ? "" : std::string(ZE_MPIEXEC) + " --allow-run-as-root --oversubscribe -np " + std::to_string(ranks) + " ";
  const auto r = zero::testing::run_command("timeout 300 " + launcher + ZE_MIXER_BIN + " " + std::to_string(steps) +
                                            " " + std::to_string(micro_batch));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::map<int, std::vector<double>> losses;
  const std::regex line(R"(rank (\d+) step +(\d+) loss ([0-9.]+))");
  for (std::sregex_iterator it(r.output.begin(), r.output.end(), line), end; it != end; ++it) {
    const int rank = std::stoi((*it)[1]);
    std::vector<double>& mine = losses[rank];
    EXPECT_EQ(std::stoi((*it)[2]), static_cast<int>(mine.size()) + 1) << "rank " << rank << "'s steps in order";
    mine.push_back(std::stod((*it)[3]));
  }
  EXPECT_EQ(losses.size(), static_cast<size_t>(ranks)) << r.output;
  for (const auto& [rank, l] : losses) EXPECT_EQ(l.size(), static_cast<size_t>(steps)) << "rank " << rank;
  return losses;
}

TEST(TrainMixerMpiTest, TwoRanksReportTheSameFallingLoss) {
  const auto two = run_losses(2, 30, 8);
  ASSERT_EQ(two.size(), 2u);
  const std::vector<double>& l = two.at(0);
  ASSERT_EQ(l.size(), 30u);
  EXPECT_EQ(two.at(1), l) << "every rank reports the global batch's mean loss";
  EXPECT_NEAR(l.front(), 1.386, 0.1) << "it starts near ln 4";
  EXPECT_LT(l.back(), 0.5 * l.front()) << "it learns";
}

TEST(TrainMixerMpiTest, TwoRanksTrainWhatOneProcessTrains) {
  const auto one = run_losses(1, 10, 16);
  const auto two = run_losses(2, 10, 8);
  ASSERT_TRUE(one.contains(0) && two.contains(0));
  ASSERT_EQ(one.at(0).size(), two.at(0).size());
  for (size_t i = 0; i < one.at(0).size(); ++i)
    EXPECT_NEAR(two.at(0)[i], one.at(0)[i], 1e-5 * one.at(0)[i] + 2e-6) << "step " << i + 1;
}

}  // namespace
