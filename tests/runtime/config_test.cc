// Config parsing: what a user sees when a config is wrong (the message names
// the key path, the value and what is expected, with a did-you-mean), and
// DeepSpeed's rules where we follow them ("auto", integral floats, duplicate
// keys, the batch-size triple and its messages, file layering, --set).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/strings.h"
#include "runtime/config/run_config.h"

namespace zero {
namespace {

absl::StatusOr<RunConfig> parse(std::string_view text, int world = 1) {
  absl::StatusOr<Json> j = parse_json_text(text, "test.json");
  if (!j.ok()) return j.status();
  return parse_run_config(*j, {.world_size = world});
}

std::string error_of(std::string_view text, int world = 1) {
  absl::StatusOr<RunConfig> c = parse(text, world);
  EXPECT_FALSE(c.ok()) << text;
  return c.ok() ? "" : std::string(c.status().message());
}

TEST(ConfigTest, MinimalConfigGetsDeepSpeedDefaults) {
  absl::StatusOr<RunConfig> c = parse(R"({"train_micro_batch_size_per_gpu": 4})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->engine.micro_batch_size, 4);
  EXPECT_EQ(c->engine.gradient_accumulation_steps, 1);
  EXPECT_EQ(c->train_batch_size, 4);
  EXPECT_FLOAT_EQ(c->engine.gradient_clipping, 1.0f);  // DeepSpeed HEAD default
  EXPECT_EQ(c->engine.param_dtype, DType::kF32);
  EXPECT_EQ(c->engine.optimizer.type, OptimizerType::kAdamW);
  EXPECT_EQ(c->effective["gradient_accumulation_steps"], 1);
  EXPECT_EQ(c->effective["model"]["n_layer"], 12);
}

TEST(ConfigTest, CommentsAreAccepted) {
  absl::StatusOr<RunConfig> c = parse(R"(// a comment
    { /* block */ "train_micro_batch_size_per_gpu": 2, // trailing
      "model": {"n_layer": 2} })");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.gpt.n_layer, 2);
}

TEST(ConfigTest, MalformedJsonNamesFileLineAndColumn) {
  const std::string msg = error_of("{\n  \"train_micro_batch_size_per_gpu\": 4,\n  \"model\": {\"n_layer\": }\n}");
  EXPECT_NE(msg.find("test.json:3:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("invalid JSON"), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"model\": {\"n_layer\": }"), std::string::npos) << msg;  // quotes the line
}

TEST(ConfigTest, DuplicateKeysAreRejected) {
  const std::string msg = error_of(R"({"train_micro_batch_size_per_gpu": 4, "train_micro_batch_size_per_gpu": 8})");
  EXPECT_NE(msg.find("duplicate key \"train_micro_batch_size_per_gpu\""), std::string::npos) << msg;
}

TEST(ConfigTest, TypoAtTopLevelGetsDidYouMean) {
  const std::string msg = error_of(R"({"train_micro_batch_size_per_gpu": 4, "gradient_clipp1ng": 1.0})");
  EXPECT_NE(msg.find("unknown key \"gradient_clipp1ng\" (did you mean \"gradient_clipping\"?)"), std::string::npos)
      << msg;
}

// Trainer-style names at the top level of a DeepSpeed config (which DeepSpeed
// ignores, training with another value) point to the key that sets them.
TEST(ConfigTest, TrainerNamesAtTopLevelPointToTheirSection) {
  for (const auto& [key, want] : std::vector<std::pair<std::string, std::string>>{
           {"learning_rate", "optimizer.params.lr"},
           {"weight_decay", "optimizer.params.weight_decay"},
           {"warmup_steps", "scheduler.params.warmup_num_steps"}}) {
    const std::string msg = error_of(cat(R"({"train_micro_batch_size_per_gpu": 4, ")", key, R"(": 1})"));
    EXPECT_NE(msg.find(cat("unknown key \"", key, "\" (did you mean \"", want, "\"?)")), std::string::npos) << msg;
  }
  // Inside a section the section's own keys are the candidates.
  const std::string in_optimizer =
      error_of(R"({"train_micro_batch_size_per_gpu": 4, "optimizer": {"type": "AdamW", "params": {"learning_rate": 1}}})");
  EXPECT_NE(in_optimizer.find("did you mean \"optimizer.params.lr\""), std::string::npos) << in_optimizer;
}

TEST(ConfigTest, TypoInSectionGetsDidYouMeanWithFullPath) {
  const std::string msg = error_of(R"({"train_micro_batch_size_per_gpu": 4, "model": {"n_layers": 2}})");
  EXPECT_NE(msg.find("unknown key \"model.n_layers\" (did you mean \"model.n_layer\"?)"), std::string::npos) << msg;
}

TEST(ConfigTest, AllErrorsAreReportedTogether) {
  const std::string msg =
      error_of(R"({"train_micro_batch_size_per_gpu": 4, "model": {"n_layer": "two", "seq_len": 0}})");
  EXPECT_NE(msg.find("2 errors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.n_layer: expected an integer, got \"two\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.seq_len: 0 is out of range (must be between 1 and 16777216)"), std::string::npos) << msg;
}

TEST(ConfigTest, DropoutIsAProbabilityBelowOne) {
  EXPECT_EQ(parse(R"({"train_micro_batch_size_per_gpu": 4})")->model.gpt.dropout, 0.0f);
  absl::StatusOr<RunConfig> c = parse(R"({"train_micro_batch_size_per_gpu": 4, "model": {"dropout": 0.1}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.gpt.dropout, 0.1f);
  for (const char* bad : {"1.5", "1", "-0.1"}) {
    const std::string msg =
        error_of(std::string(R"({"train_micro_batch_size_per_gpu": 4, "model": {"dropout": )") + bad + "}}");
    EXPECT_NE(msg.find(std::string("model.dropout: ") + bad), std::string::npos) << msg;
  }
  EXPECT_NE(error_of(R"({"train_micro_batch_size_per_gpu": 4, "model": {"dropout": "high"}})")
                .find("model.dropout: expected a number"),
            std::string::npos);
}

TEST(ConfigTest, AutoMeansDefaultInsideSections) {
  absl::StatusOr<RunConfig> c = parse(R"({"train_micro_batch_size_per_gpu": 4, "model": {"n_layer": "auto"}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.gpt.n_layer, 12);
}

TEST(ConfigTest, IntegralFloatsAreIntegersButFractionsAreNot) {
  absl::StatusOr<RunConfig> c = parse(R"({"train_micro_batch_size_per_gpu": 4, "model": {"d_model": 7.68e2}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.gpt.d_model, 768);
  EXPECT_NE(error_of(R"({"train_micro_batch_size_per_gpu": 4.5})").find("expected an integer, got 4.5"),
            std::string::npos);
}

// DeepSpeed's TestBatchConfig cases at world size 2.
TEST(ConfigTest, BatchTripleFollowsDeepSpeed) {
  struct Case {
    int64_t tb, mb, gas;
    bool ok;
  };
  for (const Case& k : {Case{32, 16, 1, true}, Case{32, 8, 2, true}, Case{33, 17, 2, false}, Case{32, 18, 1, false}}) {
    const std::string text = "{\"train_batch_size\": " + std::to_string(k.tb) +
                             ", \"train_micro_batch_size_per_gpu\": " + std::to_string(k.mb) +
                             ", \"gradient_accumulation_steps\": " + std::to_string(k.gas) + "}";
    absl::StatusOr<RunConfig> c = parse(text, 2);
    EXPECT_EQ(c.ok(), k.ok) << text << " " << c.status();
    if (!k.ok) {
      EXPECT_NE(std::string(c.status().message())
                    .find("train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size"),
                std::string::npos)
          << c.status();
    }
  }
  // Derivations, as in DeepSpeed's table (floor division).
  absl::StatusOr<RunConfig> c = parse(R"({"train_batch_size": 64})", 1);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->engine.micro_batch_size, 64);
  EXPECT_EQ(c->engine.gradient_accumulation_steps, 1);
  c = parse(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4})", 2);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->engine.gradient_accumulation_steps, 4);
  EXPECT_EQ(c->derived_keys, std::vector<std::string>{"gradient_accumulation_steps"});
  // tb=33, mb=17 at world 2 derives gas=0: the message shows the division
  // and what to change.
  EXPECT_NE(error_of(R"({"train_batch_size": 33, "train_micro_batch_size_per_gpu": 17})", 2)
                .find("gradient_accumulation_steps: train_batch_size 33 / (train_micro_batch_size_per_gpu 17 x 2 "
                      "ranks) is 0 micro-batches per step: raise train_batch_size to at least 34"),
            std::string::npos);
  // A batch smaller than the ranks leaves each of them nothing: 2 / (1 x 4) is 0.
  EXPECT_NE(error_of(R"({"train_batch_size": 2})", 4)
                .find("train_micro_batch_size_per_gpu: train_batch_size 2 / (gradient_accumulation_steps 1 x 4 "
                      "ranks) is 0 samples per rank: raise train_batch_size to at least 4"),
            std::string::npos)
      << error_of(R"({"train_batch_size": 2})", 4);
  // Upper limits: a typo such as 1e15 is a config error naming the key, not
  // a run that never ends or an allocation that cannot succeed.
  EXPECT_NE(error_of(R"({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1e15})")
                .find("gradient_accumulation_steps: 1000000000000000 is above the limit 1048576"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"train_batch_size": 1e18})").find("train_batch_size: 1000000000000000000 is above the limit"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"train_batch_size": 1e9, "train_micro_batch_size_per_gpu": 1})")
                .find("gradient_accumulation_steps: 1000000000 is above the limit 1048576 micro-batches per optimizer "
                      "step (derived from train_batch_size 1000000000"),
            std::string::npos)
      << error_of(R"({"train_batch_size": 1e9, "train_micro_batch_size_per_gpu": 1})");
  EXPECT_NE(error_of(R"({"gradient_accumulation_steps": 2})")
                .find("either train_batch_size or train_micro_batch_size_per_gpu needs to be provided"),
            std::string::npos);
}

TEST(ConfigTest, TopLevelAutoBatchIsDerivedOrExplained) {
  const std::string msg = error_of(R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto"})");
  EXPECT_NE(msg.find("train_batch_size: is \"auto\" and nothing to derive it from: set "
                     "train_micro_batch_size_per_gpu"),
            std::string::npos)
      << msg;
  // "auto" with a value to derive it from is derived, as DeepSpeed's rule would.
  absl::StatusOr<RunConfig> c =
      parse(R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": "auto"})", 2);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->train_batch_size, 8);
  EXPECT_EQ(c->engine.gradient_accumulation_steps, 1);
}

TEST(ConfigTest, OptimizerKeysFollowDeepSpeed) {
  absl::StatusOr<RunConfig> c = parse(R"({"train_micro_batch_size_per_gpu": 1,
      "optimizer": {"type": "Adam", "params": {"lr": 0.01, "betas": [0.8, 0.9], "weight_decay": 0.1}}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->engine.optimizer.adam_w_mode);  // "Adam" is AdamW unless adam_w_mode is false
  EXPECT_FLOAT_EQ(c->engine.optimizer.beta1, 0.8f);
  EXPECT_NE(error_of(R"({"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "Adam", "params": {"max_grad_norm": 1}}})")
                .find("optimizer.params.max_grad_norm: is not supported as an optimizer parameter; use the top-level "
                      "\"gradient_clipping\""),
            std::string::npos);
  EXPECT_NE(error_of(R"({"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "Lamb"}})")
                .find("optimizer.type: \"Lamb\" is not supported (supported: Adam, AdamW, Lion, SGD)"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "SGD", "params": {"betas": [0.9, 0.99]}}})")
                .find("unknown key \"optimizer.params.betas\""),
            std::string::npos);
}

// Lion: DeepSpeed's name in any case, its betas defaulting to (0.9, 0.99),
// weight_decay shared with the others, Adam's and SGD's keys unknown.
TEST(ConfigTest, LionFollowsDeepSpeed) {
  for (const char* type : {"lion", "Lion", "LION"}) {
    absl::StatusOr<RunConfig> c =
        parse(cat(R"({"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": ")", type, R"("}})"));
    ASSERT_TRUE(c.ok()) << type << ": " << c.status();
    EXPECT_EQ(c->engine.optimizer.type, OptimizerType::kLion) << type;
    EXPECT_FLOAT_EQ(c->engine.optimizer.beta1, 0.9f) << type;
    EXPECT_FLOAT_EQ(c->engine.optimizer.beta2, 0.99f) << type;
    EXPECT_EQ(c->engine.optimizer.weight_decay, 0.0f) << type;
  }
  absl::StatusOr<RunConfig> c = parse(R"({"train_micro_batch_size_per_gpu": 1,
      "optimizer": {"type": "Lion", "params": {"lr": 1e-4, "betas": [0.95, 0.98], "weight_decay": 0.1}}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FLOAT_EQ(c->engine.optimizer.lr, 1e-4f);
  EXPECT_FLOAT_EQ(c->engine.optimizer.beta1, 0.95f);
  EXPECT_FLOAT_EQ(c->engine.optimizer.beta2, 0.98f);
  EXPECT_FLOAT_EQ(c->engine.optimizer.weight_decay, 0.1f);
  // "auto" inside the section is Lion's default, not Adam's.
  c = parse(R"({"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "lion", "params": {"betas": "auto"}}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FLOAT_EQ(c->engine.optimizer.beta2, 0.99f);
  for (const char* key : {"eps", "adam_w_mode", "bias_correction", "amsgrad", "torch_adam", "momentum", "nesterov"}) {
    EXPECT_NE(error_of(cat(R"({"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "Lion", "params": {")", key,
                           R"(": 0}}})"))
                  .find(cat("unknown key \"optimizer.params.", key, "\"")),
              std::string::npos)
        << key;
  }
  // Adam keeps its own default.
  c = parse(R"({"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "Adam"}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FLOAT_EQ(c->engine.optimizer.beta2, 0.999f);
}

TEST(ConfigTest, LaterFilesAndSetOverridesWin) {
  const std::string dir = ::testing::TempDir();
  const std::string a = dir + "/ConfigTest.layers.a.json", b = dir + "/ConfigTest.layers.b.json";
  std::ofstream(a) << R"({"model": {"n_layer": 2, "n_head": 2}, "train_micro_batch_size_per_gpu": 4})";
  std::ofstream(b) << R"({"model": {"n_layer": 3}, "bf16": {"enabled": true}})";
  absl::StatusOr<Json> j = load_merged_config({a, b}, {"model.d_model=64", "run.metrics=m.jsonl"});
  ASSERT_TRUE(j.ok()) << j.status();
  absl::StatusOr<RunConfig> c = parse_run_config(*j, {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.gpt.n_layer, 3);  // b overrides a
  EXPECT_EQ(c->model.gpt.n_head, 2);   // a's other keys stay
  EXPECT_EQ(c->model.gpt.d_model, 64);
  EXPECT_EQ(c->run.metrics, "m.jsonl");
  EXPECT_EQ(c->engine.param_dtype, DType::kBF16);
  const absl::StatusOr<Json> missing = load_merged_config({dir + "/nope.json"}, {});
  EXPECT_NE(std::string(missing.status().message()).find("nope.json: cannot open"), std::string::npos);
}

TEST(ConfigTest, UnsupportedFeatureIsRefusedByName) {
  EXPECT_NE(error_of(R"({"train_micro_batch_size_per_gpu": 1, "wandb": {"enabled": true}})")
                .find("wandb: \"enabled\": true is not supported (no Weights & Biases client: it needs its network service"),
            std::string::npos);
  // The disabled default is accepted, with its other options.
  EXPECT_TRUE(parse(R"({"train_micro_batch_size_per_gpu": 1, "tensorboard": {"enabled": false, "output_path": "x"}})").ok());
  EXPECT_NE(error_of(R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"zero_quantized_weights": true}})")
                .find("zero_optimization.zero_quantized_weights: true is not supported"),
            std::string::npos);
  // A section without a switch is wanted when present, even empty: DeepSpeed
  // turns sparse attention on with its defaults for {}.
  EXPECT_NE(error_of(R"({"train_micro_batch_size_per_gpu": 1, "sparse_attention": {}})")
                .find("sparse_attention: is not supported (no block-sparse attention)"),
            std::string::npos);
}

// Numbers have ranges, named with the key: torch.optim's for the optimizer,
// probabilities and ratios in [0, 1], integers that fit 64 bits, model
// dimensions far beyond today's models (so derived sizes fit 64 bits).
TEST(ConfigTest, NumbersOutsideTheirRangesAreRefusedByKey) {
  for (const auto& [extra, want] : std::vector<std::pair<std::string, std::string>>{
           {R"("optimizer": {"type": "AdamW", "params": {"lr": -0.1}})",
            "optimizer.params.lr: -0.1 is out of range (must be >= 0)"},
           {R"("optimizer": {"type": "AdamW", "params": {"eps": -1e-8}})", "optimizer.params.eps: -1e-08 is out of range"},
           {R"("optimizer": {"type": "AdamW", "params": {"weight_decay": -1}})",
            "optimizer.params.weight_decay: -1 is out of range"},
           {R"("optimizer": {"type": "AdamW", "params": {"betas": [1.5, 0.999]}})",
            "optimizer.params.betas: [1.5,0.999] is out of range (each must be [0, 1))"},
           {R"("optimizer": {"type": "AdamW", "params": {"betas": [0.9, -0.5]}})", "optimizer.params.betas"},
           {R"("scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": -1}})",
            "scheduler.params.warmup_max_lr: -1 is out of range (must be >= 0)"},
           {R"("scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 10, "cos_min_ratio": 7}})",
            "scheduler.params.cos_min_ratio: 7 is out of range (must be [0, 1])"},
           {R"("gradient_clipping": -2)", "gradient_clipping: -2 is out of range (must be >= 0)"},
           {R"("fp16": {"enabled": true, "initial_scale_power": 100000})",
            "fp16.initial_scale_power: 100000 is out of range (must be between 0 and 64)"},
           {R"("model": {"d_model": 4000000000000000000, "n_head": 1})",
            "model.d_model: 4000000000000000000 is out of range (must be between 1 and 1048576)"},
           {R"("model": {"vocab_size": 3000000000})", "model.vocab_size: 3000000000 is out of range"},
           {R"("data": {"seed": 9223372036854775808})",
            "data.seed: 9223372036854775808 is out of range (must be >= 0 and below 2^63)"},
           {R"("train_batch_size": 9223372036854775808)",
            "train_batch_size: 9223372036854775808 is out of range (must be a 64-bit integer)"},
           {R"("gradient_accumulation_steps": 0)",
            "gradient_accumulation_steps: Gradient accumulation steps: 0 has to be greater than 0"}}) {
    const std::string msg = error_of(R"({"train_micro_batch_size_per_gpu": 4, )" + extra + "}");
    EXPECT_NE(msg.find(want), std::string::npos) << extra << "\n" << msg;
    EXPECT_EQ(msg.find("-9223372036854775808"), std::string::npos) << msg;
  }
  // A micro-batch of 0 or -4 is reported as itself, not as train_batch_size.
  for (const char* mb : {"0", "-4"}) {
    const std::string msg = error_of(std::string(R"({"train_micro_batch_size_per_gpu": )") + mb + "}");
    EXPECT_NE(msg.find(std::string("train_micro_batch_size_per_gpu: Micro batch size per gpu: ") + mb +
                       " has to be greater than 0"),
              std::string::npos)
        << msg;
    EXPECT_EQ(msg.find("train_batch_size:"), std::string::npos) << msg;
  }
}

// DeepSpeed's 16-bit master weights: the keys set the optimizer's precision,
// and DeepSpeed's rules (stages 1-3; states only with the master; the two
// master keys exclusive) and ours (the model in that dtype) name their keys.
TEST(ConfigTest, SixteenBitMasterWeightsFollowDeepSpeedsRules) {
  auto run = [](const std::string& extra) {
    absl::StatusOr<Json> j = parse_json_text(R"({"train_micro_batch_size_per_gpu": 1, )" + extra + "}", "x");
    EXPECT_TRUE(j.ok()) << j.status();
    return parse_run_config(*j, {});
  };
  absl::StatusOr<RunConfig> c = run(R"("zero_optimization": {"stage": 2},
      "bf16": {"enabled": true, "bf16_master_weights_and_grads": true, "bf16_optimizer_states": true})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->engine.optimizer_precision.master, DType::kBF16);
  EXPECT_EQ(c->engine.optimizer_precision.states, DType::kBF16);
  c = run(R"("zero_optimization": {"stage": 1}, "fp16": {"enabled": true, "fp16_master_weights_and_grads": true})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->engine.optimizer_precision.master, DType::kF16);
  EXPECT_EQ(c->engine.optimizer_precision.states, DType::kF32);
  for (const auto& [extra, want] : std::vector<std::pair<std::string, std::string>>{
           {R"("bf16": {"enabled": true, "bf16_master_weights_and_grads": true})",
            "bf16.bf16_master_weights_and_grads: Bf16_master_weights_and_grads is only supported with ZeRO Stage 1, 2, "
            "or 3"},
           {R"("zero_optimization": {"stage": 3}, "bf16": {"enabled": true, "bf16_optimizer_states": true})",
            "bf16.bf16_optimizer_states: bf16_optimizer_states requires bf16_master_weights_and_grads"},
           {R"("zero_optimization": {"stage": 3}, "bf16": {"bf16_master_weights_and_grads": true})",
            "bf16.bf16_master_weights_and_grads: needs bf16.enabled true"},
           {R"("zero_optimization": {"stage": 3}, "bf16": {"enabled": true, "bf16_master_weights_and_grads": true},
               "data_types": {"grad_accum_dtype": "fp32"})",
            "data_types.grad_accum_dtype asks for fp32"}}) {
    c = run(extra);
    ASSERT_FALSE(c.ok()) << extra;
    EXPECT_NE(std::string(c.status().message()).find(want), std::string::npos) << c.status();
  }
}

// Unknown keys follow DeepSpeed's strictness where it has one: ignored (here a
// warning naming the key) at the top level and in its dict-read sections,
// unless the key is a near miss of a known one; errors in its pydantic
// sections (extra="forbid"), in optimizer/scheduler params (constructor
// kwargs) and in ZeroEngine's own sections. --allow-unknown-keys turns every
// error of this kind into a warning.
TEST(ConfigTest, UnknownKeysFollowDeepSpeedsStrictnessPerSection) {
  auto run = [](const std::string& extra, bool allow = false) {
    absl::StatusOr<Json> j = parse_json_text(R"({"train_micro_batch_size_per_gpu": 1, )" + extra + "}", "x");
    EXPECT_TRUE(j.ok()) << j.status();
    return parse_run_config(*j, {.allow_unknown_keys = allow});
  };
  auto warnings_of = [](const absl::StatusOr<RunConfig>& c) {
    std::string all;
    for (const std::string& w : c->warnings) all += w + "\n";
    return all;
  };
  // Ignored with a warning: not close to any key, where DeepSpeed ignores it.
  for (const char* extra : {R"("cuda_visible_devices": "0")", R"("aio": {"my_own_note": 1})",
                            R"("activation_checkpointing": {"comment": "x"})", R"("optimizer": {"legacy_note": 1})"}) {
    absl::StatusOr<RunConfig> c = run(extra);
    ASSERT_TRUE(c.ok()) << extra << ": " << c.status();
    EXPECT_NE(warnings_of(c).find("ignored (DeepSpeed ignores unknown keys"), std::string::npos) << extra;
  }
  absl::StatusOr<RunConfig> c = run(R"("cuda_visible_devices": "0")");
  EXPECT_NE(warnings_of(c).find("unknown key \"cuda_visible_devices\" ignored (DeepSpeed ignores unknown keys at the "
                                "top level)"),
            std::string::npos)
      << warnings_of(c);
  // A near miss there is still an error, with the fix.
  for (const auto& [extra, want] : std::vector<std::pair<std::string, std::string>>{
           {R"("gradient_clipp1ng": 1.0)", "unknown key \"gradient_clipp1ng\" (did you mean \"gradient_clipping\"?); "
                                           "fix it, or pass --allow-unknown-keys"},
           {R"("aio": {"queue_dept": 4})", "unknown key \"aio.queue_dept\" (did you mean \"aio.queue_depth\"?)"}}) {
    c = run(extra);
    ASSERT_FALSE(c.ok()) << extra;
    EXPECT_NE(std::string(c.status().message()).find(want), std::string::npos) << c.status();
    c = run(extra, /*allow=*/true);
    ASSERT_TRUE(c.ok()) << extra << ": " << c.status();
    EXPECT_NE(warnings_of(c).find("ignored because of --allow-unknown-keys"), std::string::npos) << warnings_of(c);
  }
  // Errors wherever DeepSpeed forbids extra keys, close to a known one or not.
  for (const auto& [extra, want] : std::vector<std::pair<std::string, std::string>>{
           {R"("zero_optimization": {"stage": 1, "my_own_note": 1})", "unknown key \"zero_optimization.my_own_note\""},
           {R"("zero_optimization": {"offload_param": {"comment": 1}})",
            "unknown key \"zero_optimization.offload_param.comment\""},
           {R"("bf16": {"enabled": true, "comment": 1})", "unknown key \"bf16.comment\""},
           {R"("optimizer": {"type": "AdamW", "params": {"comment": 1}})", "unknown key \"optimizer.params.comment\""},
           {R"("model": {"comment": 1})", "unknown key \"model.comment\""}}) {
    c = run(extra);
    ASSERT_FALSE(c.ok()) << extra;
    EXPECT_NE(std::string(c.status().message()).find(want), std::string::npos) << c.status();
    EXPECT_TRUE(run(extra, /*allow=*/true).ok()) << extra;
  }
}

}  // namespace
}  // namespace zero

namespace zero {
namespace {

// DeepSpeed's AutoTP section: T splits every tensor group off the world, the
// batch triple and gradient averaging count the data-parallel ranks only,
// and a T the world or the heads do not divide is an error with the numbers.
TEST(ConfigTest, TensorParallelSizeSplitsTheWorldIntoDataAndTensorGroups) {
  absl::StatusOr<RunConfig> c =
      parse(R"({"train_batch_size": 16, "gradient_accumulation_steps": 2, "tensor_parallel": {"autotp_size": 2}})", 8);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->tensor_size(), 2);
  EXPECT_EQ(c->data_size(), 4);
  EXPECT_EQ(c->engine.micro_batch_size, 2) << "16 = micro x 2 accumulation x 4 data-parallel ranks";
  EXPECT_EQ(c->engine.pre_divide, 4.0) << "gradients average over the data-parallel group";
  absl::StatusOr<RunConfig> off = parse(R"({"train_batch_size": 16, "tensor_parallel": {"autotp_size": 0}})", 8);
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->tensor_size(), 1);
  EXPECT_EQ(off->data_size(), 8);

  EXPECT_EQ(error_of(R"({"train_batch_size": 12, "tensor_parallel": {"autotp_size": 4}})", 6),
            "invalid config: tensor_parallel.autotp_size: 4 does not divide the world of 6 ranks (world = tensor x "
            "data: launch a multiple of 4 ranks)");
  const std::string heads = error_of(R"({"train_batch_size": 12, "tensor_parallel": {"autotp_size": 3},
                                        "model": {"n_head": 4, "d_model": 64}})",
                                     3);
  EXPECT_NE(heads.find("tensor_parallel.autotp_size: 3 does not divide model.n_head 4"), std::string::npos) << heads;
  const std::string refused = error_of(R"({"train_batch_size": 2, "tensor_parallel": {"autotp_size": 2,
                                          "preset_model": "llama"}})",
                                       2);
  EXPECT_NE(refused.find("tensor_parallel.preset_model"), std::string::npos) << refused;
  const std::string typo = error_of(R"({"train_batch_size": 2, "tensor_parallel": {"autotp_sise": 2}})", 2);
  EXPECT_NE(typo.find("did you mean \"tensor_parallel.autotp_size\""), std::string::npos) << typo;
}

// tensor_parallel.tp_overlap_comm is a boolean, false by default (DeepSpeed's).
TEST(ConfigTest, TensorParallelOverlapCommIsABooleanOffByDefault) {
  absl::StatusOr<RunConfig> off = parse(R"({"train_batch_size": 4, "tensor_parallel": {"autotp_size": 2}})", 2);
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->tp_overlap_comm);
  absl::StatusOr<RunConfig> on =
      parse(R"({"train_batch_size": 4, "tensor_parallel": {"autotp_size": 2, "tp_overlap_comm": true}})", 2);
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_TRUE(on->tp_overlap_comm);
  const std::string bad = error_of(R"({"train_batch_size": 4, "tensor_parallel": {"tp_overlap_comm": 3}})", 2);
  EXPECT_NE(bad.find("tensor_parallel.tp_overlap_comm"), std::string::npos) << bad;
}

// Heads T does not divide split unevenly for the families with separate
// q/k/v projections, as DeepSpeed's AutoTP does: SmolLM-135M's 9 query / 3
// key/value heads (configs/smollm-135m.json's shape) at T = 2 are accepted.
// Fewer key/value heads than T (AutoTP would replicate them; we do not), and
// GPT-2's fused c_attn at a T its heads do not divide, are refused by key.
TEST(ConfigTest, UnevenHeadSplitsAreAcceptedAndFewerKeyValueHeadsThanTheTensorSizeRefused) {
  const std::string smollm = R"("model": {"arch": "llama", "n_layer": 30, "n_head": 9, "n_kv_head": 3,
                                          "d_model": 576, "d_ff": 1536, "vocab_size": 49152, "seq_len": 256,
                                          "tie_word_embeddings": true})";
  absl::StatusOr<RunConfig> c =
      parse(cat(R"({"train_batch_size": 8, "tensor_parallel": {"autotp_size": 2}, )", smollm, "}"), 2);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->tensor_size(), 2);
  const std::string kv =
      error_of(cat(R"({"train_batch_size": 4, "tensor_parallel": {"autotp_size": 4}, )", smollm, "}"), 4);
  EXPECT_NE(kv.find("tensor_parallel.autotp_size: 4 is more than the model's 3 key/value heads (model.n_kv_head"),
            std::string::npos)
      << kv;
  const std::string fused = error_of(R"({"train_batch_size": 4, "tensor_parallel": {"autotp_size": 2},
                                         "model": {"arch": "gpt2", "n_head": 3, "d_model": 48}})",
                                     2);
  EXPECT_NE(fused.find("tensor_parallel.autotp_size: 2 does not divide model.n_head 3"), std::string::npos) << fused;
  EXPECT_NE(fused.find("c_attn"), std::string::npos) << fused;
}

// Hugging Face's and PyTorch's names for DeepSpeed's keys get the key's name
// as the hint, though no edit distance finds it.
TEST(ConfigTest, OtherFrameworksNamesGetTheKeysName) {
  EXPECT_NE(error_of(R"({"train_batch_size": 2, "optimizer": {"type": "AdamW", "params": {"learning_rate": 0.01}}})")
                .find("unknown key \"optimizer.params.learning_rate\" (did you mean \"optimizer.params.lr\"?)"),
            std::string::npos)
      << error_of(R"({"train_batch_size": 2, "optimizer": {"type": "AdamW", "params": {"learning_rate": 0.01}}})");
  EXPECT_NE(error_of(R"({"train_batch_size": 2, "max_grad_norm": 1.0})")
                .find("unknown key \"max_grad_norm\" (did you mean \"gradient_clipping\"?)"),
            std::string::npos);
}

// A vocabulary smaller than the tensor group leaves a rank no rows of the
// token table: a config error naming the key (it was an internal check in
// the vocabulary-parallel embedding), for GPT and Llama alike.
TEST(ConfigTest, AVocabularySmallerThanTheTensorGroupIsAConfigError) {
  for (const char* type : {"gpt2", "llama"}) {
    const std::string e = error_of(cat(R"({"train_batch_size": 2, "tensor_parallel": {"autotp_size": 2},
                                           "model": {"arch": ")", type, R"(", "vocab_size": 1}})"),
                                   2);
    EXPECT_NE(e.find("tensor_parallel.autotp_size: 2 is more than model.vocab_size 1"), std::string::npos)
        << type << ": " << e;
  }
}

// Every family is a model.arch: its features follow from it, head_dim is a
// key of the families with RoPE, and what a family's layers cannot be is
// named by key.
TEST(ConfigTest, EveryFamilyIsAnArch) {
  for (const char* arch : {"llama", "mistral", "qwen2", "qwen3", "gemma"}) {
    absl::StatusOr<RunConfig> c = parse(cat(R"({"train_batch_size": 2, "model": {"arch": ")", arch,
                                            R"(", "n_layer": 2, "n_head": 4, "d_model": 32, "head_dim": 16,
                                                  "d_ff": 64}})"));
    ASSERT_TRUE(c.ok()) << arch << ": " << c.status();
    EXPECT_EQ(c->model.gpt.family_name(), arch);
    EXPECT_EQ(c->model.gpt.attention_width(), 64) << arch;
    EXPECT_EQ(c->effective["model"]["arch"], arch);
  }
  std::string e = error_of(R"({"train_batch_size": 2, "model": {"arch": "gpt2", "head_dim": 16}})");
  EXPECT_NE(e.find("model.head_dim"), std::string::npos) << e;
  EXPECT_NE(e.find("is a setting of the families with RoPE"), std::string::npos) << e;
  e = error_of(R"({"train_batch_size": 2, "model": {"arch": "qwen4"}})");
  EXPECT_NE(e.find("model.arch"), std::string::npos) << e;
  EXPECT_NE(e.find("qwen3"), std::string::npos) << e;
  e = error_of(R"({"train_batch_size": 2, "model": {"arch": "qwen3", "n_head": 4, "d_model": 30}})");
  EXPECT_NE(e.find("model.d_model"), std::string::npos) << e;
  EXPECT_NE(e.find("(or set model.head_dim)"), std::string::npos) << e;
  e = error_of(R"({"train_batch_size": 2, "model": {"arch": "gemma", "head_dim": 7}})");
  EXPECT_NE(e.find("model.head_dim"), std::string::npos) << e;
  e = error_of(R"({"train_batch_size": 2, "model": {"arch": "gemma", "dropout": 0.1}})");
  EXPECT_NE(e.find("the Gemma family has no dropout sites"), std::string::npos) << e;
}

// data.tokenizer comes from run.init_from when that directory has tokenizer
// files and the format reads text; a data key given for a format it does
// not apply to is refused by name.
TEST(ConfigTest, TheDataSectionsKeysFollowItsFormat) {
  const std::string dir = ::testing::TempDir() + "/ConfigTest.model_with_tokenizer";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/tokenizer.json") << "{}";
  const std::string init = cat(R"({"train_batch_size": 2, "run": {"init_from": ")", dir, R"("}, "data": )");
  absl::StatusOr<RunConfig> c = parse(init + R"({"format": "sft"}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->data.tokenizer, dir);
  EXPECT_NE(std::find(c->derived_keys.begin(), c->derived_keys.end(), "data.tokenizer"), c->derived_keys.end());
  c = parse(init + R"({"format": "text", "tokenizer": "elsewhere"}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->data.tokenizer, "elsewhere");  // another tokenizer than init_from's is the user's to choose
  c = parse(init + R"({"format": "llmc"}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->data.tokenizer, "");  // shards are tokens already
  c = parse(R"({"train_batch_size": 2, "data": {"format": "text"}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->data.tokenized());  // bytes (a vocabulary-256 model's), decided when the data is opened
  for (const auto& [data, want] : std::vector<std::pair<std::string, std::string>>{
           {R"({"format": "llmc", "tokenizer": "x"})", "data.tokenizer: applies to data.format \"text\", \"jsonl\" "
                                                     "and \"sft\"; \"llmc\" shards hold token ids already"},
           {R"({"format": "bytes", "tokenizer": "x"})", "\"bytes\" trains on bytes, vocabulary 256"},
           {R"({"format": "text", "jsonl_field": "body"})", "data.jsonl_field: applies to data.format \"jsonl\" only"},
           {R"({"format": "jsonl", "packing": true})", "data.packing: applies to data.format \"sft\" only"},
           {R"({"format": "csv"})", "data.format"}}) {
    const std::string msg = error_of(R"({"train_batch_size": 2, "data": )" + data + "}");
    EXPECT_NE(msg.find(want), std::string::npos) << data << "\n" << msg;
  }
}

// More checkpoint segments than a rank has blocks is the config's error (exit
// 2 in zero-train), naming the key: the model's blocks, or with pipeline
// stages the smallest stage's (each stage splits its own blocks).
TEST(ConfigTest, MoreCheckpointSegmentsThanBlocksAreRefusedByKey) {
  const std::string model = R"("model": {"n_layer": 5, "n_head": 2, "d_model": 16, "vocab_size": 64, "seq_len": 8})";
  EXPECT_TRUE(parse(cat(R"({"train_micro_batch_size_per_gpu": 1, "activation_checkpointing": {"number_checkpoints": 5}, )",
                        model, "}"))
                  .ok());
  EXPECT_NE(error_of(cat(R"({"train_micro_batch_size_per_gpu": 1, "activation_checkpointing": {"number_checkpoints": 6}, )",
                         model, "}"))
                .find("activation_checkpointing.number_checkpoints: 6 must be between 1 and the model's 5 blocks"),
            std::string::npos);
  // Five blocks over two stages: 3 and 2 (or 2 and 3), so at most 2 segments.
  const std::string staged = cat(R"({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2,
                                     "pipeline": {"stages": 2}, "activation_checkpointing": {"number_checkpoints": )");
  EXPECT_TRUE(parse(cat(staged, "2}, ", model, "}"), 2).ok()) << error_of(cat(staged, "2}, ", model, "}"), 2);
  EXPECT_NE(error_of(cat(staged, "3}, ", model, "}"), 2)
                .find("activation_checkpointing.number_checkpoints: 3 must be between 1 and the smallest pipeline "
                      "stage's 2 blocks"),
            std::string::npos);
}

}  // namespace
}  // namespace zero
