// The 13 real DeepSpeed configs in tests/data/ds_configs (from DeepSpeed's
// and DeepSpeedExamples' repositories), each with its expected outcome: it
// loads, or it is refused with messages naming each offending key and the
// reason. Unknown keys are treated as DeepSpeed treats them (ignored at the
// top level with a warning, refused in its strict sections).
#include <gtest/gtest.h>

#include "runtime/config/run_config.h"

namespace zero {
namespace {

struct Expectation {
  const char* file;
  bool loads;
  std::vector<const char*> messages;  // substrings of the error (or of the warnings when it loads)
};

const std::vector<Expectation>& expectations() {
  static const std::vector<Expectation> kAll = {
      // DeepSpeed ignores the unknown top-level key; so do we, naming it.
      {"zero1_fp16_imagenet.json", true,
       {"unknown key \"cuda_visible_devices\" ignored (DeepSpeed ignores unknown keys at the top level)"}},
      {"zero1_fp16_megatron_gpt2.json", true, {}},
      {"zero2_bf16_cpu_offload_zenflow.json", false,
       {"zero_optimization.zenflow: {\"topk_ratio\"", "is not supported (ZenFlow is not implemented)"}},
      // partition_activations splits checkpoints across the tensor group (a no-op at T = 1).
      {"zero2_cpu_offload_legacy_actckpt_megatron_gpt2.json", true,
       {"zero_optimization.cpu_offload: is deprecated; treated as \"zero_optimization.offload_optimizer\""}},
      {"zero2_fp16_actckpt_megatron_gpt2.json", true, {}},
      {"zero2_fp16_warmuplr_megatron_gpt2.json", true, {}},
      {"zero3_bf16_adamw_warmuplr_sdma.json", true, {}},
      {"zero3_bf16_cpu_offload_superoffload_script.json", true, {}},
      // bf16 master weights and states are honoured; torch autocast has no equivalent.
      {"zero3_bf16_master_weights.json", false, {"invalid config: torch_autocast.enabled: true is not supported"}},
      // Refused as current DeepSpeed refuses them: the misspelt key.
      {"zero3_fp16_megatron_2021.json", false,
       {"unknown key \"zero_optimization.stage3_param_persitence_threshold\" (did you mean "
        "\"zero_optimization.stage3_param_persistence_threshold\"?)"}},
      {"zero3_infinity_nvme_fp16_megatron_2021.json", false,
       {"unknown key \"zero_optimization.stage3_param_persitence_threshold\" (did you mean",
        "(warning) aio.thread_count: ignored: DeepSpeed renamed it \"intra_op_parallelism\""}},
      {"zero3_offload_param_cpu_sglang.json", true, {}},
      {"zero3_offload_param_nvme_aio_sglang.json", true, {}},
  };
  return kAll;
}

void PrintTo(const Expectation& e, std::ostream* os) { *os << e.file; }

class DeepSpeedConfigsTest : public ::testing::TestWithParam<Expectation> {};

TEST_P(DeepSpeedConfigsTest, LoadsOrIsRefusedWithReasons) {
  const Expectation& e = GetParam();
  const std::string path = std::string(ZE_SOURCE_DIR) + "/tests/data/ds_configs/" + e.file;
  absl::StatusOr<Json> j = load_json_file(path);
  ASSERT_TRUE(j.ok()) << j.status();
  absl::StatusOr<RunConfig> c = parse_run_config(*j, {});
  EXPECT_EQ(c.ok(), e.loads) << c.status();
  std::string text;
  if (c.ok()) {
    for (const std::string& w : c->warnings) text += w + "\n";
  } else {
    text = std::string(c.status().message());
  }
  for (const char* m : e.messages) EXPECT_NE(text.find(m), std::string::npos) << "missing: " << m << "\nin:\n" << text;
}

INSTANTIATE_TEST_SUITE_P(All, DeepSpeedConfigsTest, ::testing::ValuesIn(expectations()),
                         [](const auto& info) {
                           std::string name = info.param.file;
                           name = name.substr(0, name.find('.'));
                           return name;
                         });

// The Megatron configs that partition checkpointed activations load at a
// tensor-parallel size too (world 4 = T 2 x D 2), with the split in effect.
TEST(DeepSpeedConfigsTest, MegatronActivationPartitioningLoadsGivenATensorSize) {
  for (const char* file : {"zero2_cpu_offload_legacy_actckpt_megatron_gpt2.json", "zero2_fp16_actckpt_megatron_gpt2.json"}) {
    absl::StatusOr<Json> j = load_json_file(std::string(ZE_SOURCE_DIR) + "/tests/data/ds_configs/" + file);
    ASSERT_TRUE(j.ok()) << j.status();
    (*j)["tensor_parallel"] = {{"autotp_size", 2}};
    absl::StatusOr<RunConfig> c = parse_run_config(*j, {.world_size = 4});
    ASSERT_TRUE(c.ok()) << file << ": " << c.status();
    EXPECT_EQ(c->tensor_size(), 2) << file;
    EXPECT_EQ(c->data_size(), 2) << file;
    EXPECT_TRUE(c->engine.activation_checkpointing.partition_activations) << file;
    EXPECT_EQ(c->engine.micro_batch_size * c->engine.gradient_accumulation_steps * 2, c->train_batch_size) << file;
  }
}

TEST(DeepSpeedConfigsTest, EveryFixtureHasAnExpectation) {
  EXPECT_EQ(expectations().size(), 13u);
}

TEST(DeepSpeedConfigsTest, AliasesAndDeprecations) {
  auto parse = [](const char* text) {
    absl::StatusOr<Json> j = parse_json_text(text, "x.json");
    return parse_run_config(*j, {});
  };
  // Field name and alias are both accepted, not both at once.
  auto c = parse(R"({"train_batch_size": 1, "zero_optimization": {"prefetch_bucket_size": 7}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->engine.zero.prefetch_bucket_size, 7);
  c = parse(R"({"train_batch_size": 1, "zero_optimization": {"stage3_prefetch_bucket_size": 9}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->engine.zero.prefetch_bucket_size, 9);
  c = parse(R"({"train_batch_size": 1, "zero_optimization": {"prefetch_bucket_size": 7, "stage3_prefetch_bucket_size": 9}})");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("give only one of them"), std::string::npos);
  // Deprecated stage3_gather_fp16_weights_on_model_save maps with a warning.
  c = parse(R"({"train_batch_size": 1, "zero_optimization": {"stage3_gather_fp16_weights_on_model_save": true}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->engine.zero.gather_16bit_weights_on_model_save);
  ASSERT_EQ(c->warnings.size(), 1u);
  // cpu_offload together with offload_optimizer is an error, as in DeepSpeed.
  c = parse(R"({"train_batch_size": 1, "zero_optimization": {"cpu_offload": true, "offload_optimizer": {"device": "cpu"}}})");
  ASSERT_FALSE(c.ok());
  // overlap_comm's default depends on the stage; "auto" in a section means default.
  c = parse(R"({"train_batch_size": 1, "zero_optimization": {"overlap_comm": "auto", "reduce_bucket_size": "auto"}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->engine.zero.overlap_comm);
  EXPECT_EQ(c->engine.zero.reduce_bucket_size, 500000000);
  // fp16 and bf16 together.
  c = parse(R"({"train_batch_size": 1, "fp16": {"enabled": true}, "bf16": {"enabled": true}})");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("bfloat16 and fp16 modes cannot be simultaneously enabled"),
            std::string::npos);
  // allgather_bucket_size must be even (DeepSpeed's TestIncorectAllgatherBucketSize).
  EXPECT_TRUE(parse(R"({"train_batch_size": 1, "zero_optimization": {"allgather_bucket_size": 1000}})").ok());
  c = parse(R"({"train_batch_size": 1, "zero_optimization": {"allgather_bucket_size": 1001}})");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("must be a multiple of nccl_start_alignment_factor"),
            std::string::npos);
}

}  // namespace
}  // namespace zero
