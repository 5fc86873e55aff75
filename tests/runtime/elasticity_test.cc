// DeepSpeed's elastic batch (runtime/config/elasticity.h), checked against
// the figures DeepSpeed's own tests assert for the same configs
// (tests/unit/elasticity/test_elastic.py: 9792 over 23 GPU counts, micro 17
// at 64 GPUs, 128 GPUs refused) and against the rule itself for every size
// it calls valid. Its test_proper_mbsz (micro 3 at 7 GPUs for a batch of at
// most 32) holds only under the older candidate rule, which scaled a base
// above max_train_batch_size to 720720 x 42; DeepSpeed's current
// elasticity.py drops such a base, as this engine does, and the batch is 24.
#include "runtime/config/elasticity.h"

#include <gtest/gtest.h>

namespace zero {
namespace {

ElasticityConfig ds_test_config() {
  ElasticityConfig c;
  c.enabled = true;
  c.max_train_batch_size = 10000;
  c.micro_batch_sizes = {8, 12, 16, 17};
  c.min_gpus = 32;
  c.max_gpus = 1500;
  c.min_time = 20;
  c.version = 0.1;
  return c;
}

TEST(ElasticityTest, TheBatchAndValidSizesAreDeepSpeeds) {
  absl::StatusOr<ElasticBatch> b = elastic_batch_candidates(ds_test_config());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->train_batch_size, 9792);
  EXPECT_EQ(b->valid_sizes.size(), 23u);
  for (const int64_t g : b->valid_sizes) {
    ASSERT_EQ(b->train_batch_size % g, 0) << g;
    bool some_micro = false;
    for (const int64_t m : ds_test_config().micro_batch_sizes) some_micro |= (b->train_batch_size / g) % m == 0;
    EXPECT_TRUE(some_micro) << g;
    EXPECT_GE(g, 32);
    EXPECT_LE(g, 1500);
  }
}

TEST(ElasticityTest, AValidSizeGetsTheLargestMicroBatchThatDivides) {
  absl::StatusOr<ElasticBatch> b = elastic_batch_for(ds_test_config(), 64, 64);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->micro_batch_size, 17);
  EXPECT_EQ(b->gradient_accumulation_steps, 9792 / (17 * 64));
  EXPECT_EQ(b->micro_batch_size * b->gradient_accumulation_steps * 64, b->train_batch_size);

  ElasticityConfig c = ds_test_config();
  c.max_train_batch_size = 32;
  c.micro_batch_sizes = {1, 2, 3, 7};
  c.min_gpus = 1;
  b = elastic_batch_for(c, 6, 6);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->train_batch_size, 24);
  EXPECT_EQ(b->valid_sizes, (std::vector<int64_t>{1, 2, 3, 4, 6, 8, 12, 24}));
  EXPECT_EQ(b->micro_batch_size, 2);  // 24 / 6 = 4: 2 divides it, 3 and 7 do not
  EXPECT_EQ(b->gradient_accumulation_steps, 2);
  EXPECT_FALSE(elastic_batch_for(c, 7, 7).ok());
}

TEST(ElasticityTest, TheGlobalBatchStaysWhenTheWorldShrinks) {
  ElasticityConfig c;
  c.enabled = true;
  c.version = 0.1;
  c.max_train_batch_size = 16;
  c.micro_batch_sizes = {2, 4};
  c.min_gpus = 1;
  c.max_gpus = 4;
  for (const int64_t ranks : {1, 2, 4}) {
    absl::StatusOr<ElasticBatch> b = elastic_batch_for(c, ranks, ranks);
    ASSERT_TRUE(b.ok()) << ranks << ": " << b.status();
    EXPECT_EQ(b->train_batch_size, 16) << ranks;
    EXPECT_EQ(b->micro_batch_size, 4) << ranks;
    EXPECT_EQ(b->gradient_accumulation_steps, 4 / ranks) << ranks;
  }
}

TEST(ElasticityTest, AnInvalidSizeIsRefusedWithTheValidOnes) {
  absl::StatusOr<ElasticBatch> b = elastic_batch_for(ds_test_config(), 128, 128);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("128 data-parallel ranks"), std::string::npos) << b.status();
  EXPECT_NE(b.status().message().find("9792"), std::string::npos) << b.status();
  EXPECT_NE(b.status().message().find("[32, "), std::string::npos) << b.status();
}

TEST(ElasticityTest, BadSettingsNameTheirKey) {
  auto message = [](ElasticityConfig c) {
    absl::StatusOr<ElasticBatch> b = elastic_batch_candidates(c);
    return b.ok() ? std::string("ok") : std::string(b.status().message());
  };
  ElasticityConfig c = ds_test_config();
  c.version = 0.3;
  EXPECT_NE(message(c).find("elasticity.version: 0.3"), std::string::npos) << message(c);
  c = ds_test_config();
  c.micro_batch_sizes = {1, 4, -1};
  EXPECT_NE(message(c).find("elasticity.micro_batch_sizes: -1"), std::string::npos) << message(c);
  c = ds_test_config();
  c.micro_batch_sizes = {};
  EXPECT_NE(message(c).find("elasticity.micro_batch_sizes"), std::string::npos) << message(c);
  c = ds_test_config();
  c.min_gpus = -1;
  EXPECT_NE(message(c).find("elasticity.min_gpus"), std::string::npos) << message(c);
  c = ds_test_config();
  c.model_parallel_size = 4;
  c.num_gpus_per_node = 8;
  EXPECT_NE(message(c).find("elasticity.model_parallel_size: 4 needs elasticity.version 0.2"), std::string::npos)
      << message(c);
  c.version = 0.2;
  c.model_parallel_size = 16;
  EXPECT_NE(message(c).find("elasticity.num_gpus_per_node"), std::string::npos) << message(c);
}

TEST(ElasticityTest, VersionTwoCountsDataParallelRanksPerNode) {
  ElasticityConfig c = ds_test_config();
  c.version = 0.2;
  c.model_parallel_size = 4;
  c.num_gpus_per_node = 8;
  // 16 ranks = 2 nodes of 8, model parallel 4: 4 data-parallel ranks.
  absl::StatusOr<ElasticBatch> b = elastic_batch_for(c, 4, 16);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->train_batch_size % (b->micro_batch_size * 4), 0);
  EXPECT_EQ(b->micro_batch_size * b->gradient_accumulation_steps * 4, b->train_batch_size);
  EXPECT_LE(b->train_batch_size, c.max_train_batch_size);
  // The run's own model-parallel size must be the config's.
  b = elastic_batch_for(c, 8, 16);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("elasticity.model_parallel_size: 4 is not this run's model-parallel size 2"),
            std::string::npos)
      << b.status();
}

}  // namespace
}  // namespace zero
