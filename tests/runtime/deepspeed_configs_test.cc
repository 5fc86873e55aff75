// The 15 real DeepSpeed configs in tests/data/ds_configs (from DeepSpeed's
// and DeepSpeedExamples' repositories), each with its expected outcome: it
// loads, or it is refused with messages naming each offending key and the
// reason. Unknown keys are treated as DeepSpeed treats them (ignored at the
// top level with a warning, refused in its strict sections).
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "runtime/config/config_reader.h"
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
      // The HF Trainer's own configs: alone, nothing fills in their "auto" batch.
      {"hf_trainer_zero2.json", false, {"train_batch_size: is \"auto\" and nothing to derive it from"}},
      {"hf_trainer_zero3.json", false, {"train_batch_size: is \"auto\" and nothing to derive it from"}},
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
  EXPECT_EQ(expectations().size(), 15u);
}

// The Hugging Face Trainer's ZeRO-2 and ZeRO-3 configs from transformers'
// docs, every Trainer-filled value "auto", layered over a run file as a user
// layers them: "auto" takes the run file's lr, batch and clipping; the
// warm-up's peak follows the optimizer's lr; ZeRO-3's buckets follow the
// hidden size; what nothing gives keeps its default; --print-config lists
// every "auto" under __derived__ with what it became.
TEST(DeepSpeedConfigsTest, HfTrainerAutoValuesTakeTheOtherLayersValues) {
  const std::string dir = ::testing::TempDir();
  const std::string run_file = dir + "/hf_auto_run.json";
  std::ofstream(run_file) << R"({"model": {"n_layer": 2, "n_head": 4, "d_model": 64, "vocab_size": 256, "seq_len": 32},
                                  "run": {"steps": 40},
                                  "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
                                  "gradient_clipping": 0.5,
                                  "optimizer": {"type": "AdamW", "params": {"lr": 0.003}}})";
  for (const std::string file : {"hf_trainer_zero2.json", "hf_trainer_zero3.json"}) {
    SCOPED_TRACE(file);
    ConfigSources sources;
    absl::StatusOr<Json> merged = load_layered_config(
        {run_file, std::string(ZE_SOURCE_DIR) + "/tests/data/ds_configs/" + file}, {}, &sources);
    ASSERT_TRUE(merged.ok()) << merged.status();
    absl::StatusOr<RunConfig> c = parse_run_config(*merged, {.world_size = 2, .auto_filled = sources.auto_filled()});
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_FLOAT_EQ(c->engine.optimizer.lr, 0.003f) << "the run file's lr, not the default 0.001";
    ASSERT_TRUE(c->engine.scheduler.warmup_max_lr.has_value());
    EXPECT_FLOAT_EQ(static_cast<float>(*c->engine.scheduler.warmup_max_lr), 0.003f)
        << "the warm-up's peak is the optimizer's lr";
    EXPECT_EQ(c->engine.micro_batch_size, 4);
    EXPECT_EQ(c->engine.gradient_accumulation_steps, 2);
    EXPECT_EQ(c->train_batch_size, 16) << "4 x 2 x 2 ranks";
    EXPECT_FLOAT_EQ(c->engine.gradient_clipping, 0.5f);
    EXPECT_FLOAT_EQ(c->engine.optimizer.eps, 1e-8f) << "nothing gives eps: the default";
    const std::string printed = format_effective_config(*c);
    const Json j = Json::parse(printed);
    std::set<std::string> derived;
    for (const Json& k : j["__derived__"]) derived.insert(k.get<std::string>());
    for (const char* key : {"optimizer.params.lr", "optimizer.params.eps", "optimizer.params.betas",
                            "optimizer.params.weight_decay", "scheduler.params.warmup_max_lr",
                            "scheduler.params.warmup_min_lr", "scheduler.params.warmup_num_steps",
                            "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size",
                            "gradient_clipping", "fp16.enabled"}) {
      EXPECT_TRUE(derived.count(key)) << key << " was \"auto\" and is not listed as derived:\n" << printed;
    }
    EXPECT_EQ(j["optimizer"]["params"]["lr"].get<double>(), j["scheduler"]["params"]["warmup_max_lr"].get<double>());
    if (file == "hf_trainer_zero3.json") {
      EXPECT_EQ(c->engine.zero.reduce_bucket_size, 64 * 64);
      EXPECT_EQ(c->engine.zero.prefetch_bucket_size, static_cast<int64_t>(0.9 * 64 * 64));
      EXPECT_EQ(c->engine.zero.param_persistence_threshold, 10 * 64);
      EXPECT_TRUE(derived.count("zero_optimization.reduce_bucket_size")) << printed;
    }
  }
  // Alone, nothing gives the batch: refused by name, not a silent default.
  absl::StatusOr<Json> alone = load_json_file(std::string(ZE_SOURCE_DIR) + "/tests/data/ds_configs/hf_trainer_zero3.json");
  ASSERT_TRUE(alone.ok());
  absl::StatusOr<RunConfig> c = parse_run_config(*alone, {});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("is \"auto\" and nothing to derive it from"), std::string::npos)
      << c.status();
  // A scheduler's total_num_steps "auto" follows run.steps; OneCycle's bounds
  // have nothing to follow and are refused by name.
  c = parse_run_config(Json::parse(R"({"train_batch_size": 2, "run": {"steps": 40},
      "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 4, "total_num_steps": "auto"}}})"), {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->engine.scheduler.total_num_steps, 40);
  c = parse_run_config(Json::parse(R"({"train_batch_size": 2,
      "scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": "auto", "cycle_max_lr": 0.1}}})"), {});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("scheduler.params.cycle_min_lr: is \"auto\" and nothing fills it in"),
            std::string::npos)
      << c.status();
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
  // reduce_bucket_size "auto" is what the HF Trainer fills in: hidden size squared.
  EXPECT_EQ(c->engine.zero.reduce_bucket_size, c->model.gpt.d_model * c->model.gpt.d_model);
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
