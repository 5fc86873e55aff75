// Pipeline stage partitions (graph/pipeline_partition.h): uniform splits by
// layer count, "parameters" minimises the largest stage counting what the
// first and last stages hold beside their layers, and fewer layers than
// stages is an error naming both.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "graph/gpt.h"
#include "graph/pipeline_partition.h"

namespace zero {
namespace {

std::vector<int64_t> sizes(const std::vector<SplitRange>& parts) {
  std::vector<int64_t> out;
  int64_t next = 0;
  for (const SplitRange& r : parts) {
    EXPECT_EQ(r.offset, next) << "stages must be contiguous";
    next = r.offset + r.size;
    out.push_back(r.size);
  }
  return out;
}

TEST(PipelinePartitionTest, UniformSplitsByCount) {
  EXPECT_EQ(sizes(partition_layers(std::vector<int64_t>(12, 1), 4, PartitionMethod::kUniform).value()),
            (std::vector<int64_t>{3, 3, 3, 3}));
  EXPECT_EQ(sizes(partition_layers(std::vector<int64_t>(5, 1), 2, PartitionMethod::kUniform).value()),
            (std::vector<int64_t>{3, 2}));
}

TEST(PipelinePartitionTest, ParametersBalanceTheLargestStage) {
  // One heavy layer at the end: it stands alone.
  EXPECT_EQ(sizes(partition_layers({1, 1, 1, 1, 10}, 2, PartitionMethod::kParameters).value()),
            (std::vector<int64_t>{4, 1}));
  // GPT-2 124M on 4 stages: the token table (38.6M) on the first and last
  // stages outweighs five blocks (7.1M each), so the end stages take one
  // block each and the middle ones five: the largest stage holds 46.5M
  // parameters instead of uniform's 60.6M.
  const GptConfig gpt2{.n_layer = 12, .n_head = 12, .d_model = 768, .vocab_size = 50304, .seq_len = 1024};
  std::vector<int64_t> blocks;
  for (int s = 0; s < 4; ++s) blocks.push_back(gpt_pipeline_stage(gpt2, s, 4, PartitionMethod::kParameters)->layers.size);
  EXPECT_EQ(blocks, (std::vector<int64_t>{1, 5, 5, 1}));
  EXPECT_EQ(gpt_pipeline_stage(gpt2, 3, 4, PartitionMethod::kUniform)->layers.offset, 9);
  // Two stages: six blocks each either way.
  EXPECT_EQ(gpt_pipeline_stage(gpt2, 1, 2, PartitionMethod::kParameters)->layers.offset, 6);
}

TEST(PipelinePartitionTest, FewerLayersThanStagesIsAnError) {
  const absl::StatusOr<std::vector<SplitRange>> r = partition_layers({1, 1}, 3, PartitionMethod::kUniform);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("2 layers cannot fill 3 pipeline stages"), std::string_view::npos) << r.status();
}

}  // namespace
}  // namespace zero
