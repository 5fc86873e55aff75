// zero-estimate as a user runs it: exit codes, the table's numbers are the
// planner's (runtime/engine/memory_plan.h, itself held to the engine's
// measured peaks by memory_plan_test.cc), --init-from plans the directory's
// model, errors name the bad argument.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "core/strings.h"
#include "kernels/cpu/bf16_gemm_policy.h"
#include "runtime/config/hf_config.h"
#include "runtime/config/memory_preflight.h"
#include "runtime/config/run_config.h"
#include "tests/testing/run_command.h"

namespace zero {
namespace {


#ifdef ZE_ESTIMATE_BIN
using testing::CommandResult;

// zero-estimate in a process of its own, with this process's bf16 GEMM
// precision (kernels/cpu/bf16_gemm_policy.h: measured per process, and a
// loaded machine may measure differently): the plans compared here are then
// of the same workspace.
CommandResult estimate(const std::string& args) {
  const char* bf16 = cpu::bf16_gemm_choice().gemm == DType::kBF16 ? "bf16" : "fp32";
  return testing::run_command(cat("ZE_CPU_BF16_GEMM=", bf16, " ", ZE_ESTIMATE_BIN, " ", args));
}

std::string write_config(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/zero_estimate_cli_test." + name;
  std::ofstream(path) << text;
  return path;
}

const char* kRunConfig = R"({
  "model": {"n_layer": 4, "n_head": 2, "d_model": 32, "vocab_size": 97, "seq_len": 16},
  "train_micro_batch_size_per_gpu": 2,
  "bf16": {"enabled": true},
  "zero_optimization": {"stage": 2, "reduce_bucket_size": 3000},
  "activation_checkpointing": {"number_checkpoints": 2}
})";

TEST(ZeroEstimateCliTest, TableHoldsThePlannersNumbers) {
  const std::string config = write_config("run.json", kRunConfig);
  CommandResult r = estimate("--config " + config + " --world 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  RunConfig parsed;
  {
    absl::StatusOr<Json> merged = load_merged_config({config}, {});
    ASSERT_TRUE(merged.ok());
    parsed = parse_run_config(*merged, {.world_size = 3}).value();
  }
  int64_t max_total = -1;
  int max_rank = -1;
  for (int rank = 0; rank < 3; ++rank) {
    const MemoryPlan p = plan_memory(parsed, 3, rank).value();
    if (p.total(Tier::kHost) > max_total) max_total = p.total(Tier::kHost), max_rank = rank;
  }
  const MemoryPlan plan = plan_memory(parsed, 3, max_rank).value();
  EXPECT_NE(r.output.find(cat("rank ", max_rank, " of 3")), std::string::npos) << r.output;
  for (int c = 0; c < kNumMemCategories; ++c) {
    const int64_t b = plan.at(Tier::kHost, static_cast<MemCategory>(c));
    if (b > 0) {
      EXPECT_NE(r.output.find(cat(b, " (")), std::string::npos) << b << "\n" << r.output;
    }
  }
  EXPECT_NE(r.output.find(cat(plan.total(Tier::kHost), " (")), std::string::npos) << r.output;

  // --json carries the same numbers for every rank.
  r = estimate("--config " + config + " --world 3 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  ASSERT_EQ(j["ranks"].size(), 3u);
  EXPECT_EQ(j["max_rank"], max_rank);
  EXPECT_EQ(j["ranks"][max_rank]["peak"]["host"]["activations"].get<int64_t>(),
            plan.at(Tier::kHost, MemCategory::kActivations));
  EXPECT_EQ(j["ranks"][max_rank]["total"]["host"].get<int64_t>(), plan.total(Tier::kHost));

  // --set overrides a key as zero-train's does.
  r = estimate("--config " + config + " --world 1 --set zero_optimization.stage=0 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(r.output)["stage"], 0);
}

TEST(ZeroEstimateCliTest, ParamsModePrintsTheZeroFormulas) {
  CommandResult r = estimate("--params 7.5e9 --world 64");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Table 1, 7.5B at DP 64: 120 / 31.4 / 16.6 / 1.88 GB.
  for (const char* gb : {"120.00", "31.41", "16.64", "1.88"}) {
    EXPECT_NE(r.output.find(gb), std::string::npos) << gb << "\n" << r.output;
  }
  r = estimate("--params 1e12 --world 1,4,1024");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("16000.00"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("15.62"), std::string::npos) << r.output;
}

// The model line names the family and its shape: a Llama (configs/llama-tiny.json's
// model) is called a Llama with its key/value heads and MLP width, never a
// GPT, and a GPT-2 is still a GPT-2.
TEST(ZeroEstimateCliTest, ModelLineNamesTheFamily) {
  const std::string llama = write_config("llama.json", R"({
    "model": {"arch": "llama", "n_layer": 4, "n_head": 4, "n_kv_head": 2, "d_model": 128, "d_ff": 352,
              "vocab_size": 256, "seq_len": 64},
    "train_micro_batch_size_per_gpu": 16
  })");
  CommandResult r = estimate("--config " + llama + " --world 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("model: Llama n_layer=4 n_head=4 n_kv_head=2 d_model=128 d_ff=352 vocab=256 seq_len=64, "),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("GPT"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("h."), std::string::npos) << r.output;

  r = estimate("--config " + write_config("gpt.json", kRunConfig) + " --world 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("model: GPT-2 n_layer=4 n_head=2 d_model=32 vocab=97 seq_len=16, "), std::string::npos)
      << r.output;
}

// --init-from DIR plans DIR's model (its config.json), as zero-train builds
// it: the golden Llama, not the default GPT-2; the same plan as the config
// naming that file. A directory that is not there is refused, never planned
// as the default model.
TEST(ZeroEstimateCliTest, InitFromPlansTheDirectorysModel) {
  const std::string llama = std::string(ZE_SOURCE_DIR) + "/tests/data/hf/llama";
  const std::string config = write_config("batch.json", R"({
    "train_micro_batch_size_per_gpu": 2,
    "zero_optimization": {"stage": 3}
  })");
  CommandResult r = estimate("--config " + config + " --init-from " + llama + " --world 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("model: Llama n_layer=2 n_head=4 n_kv_head=2 d_model=64 d_ff=96 vocab=96 seq_len=32, "),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("GPT"), std::string::npos) << r.output;
  r = estimate("--config " + config + " --init-from " + llama + " --world 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json planned = nlohmann::json::parse(r.output);
  const GptConfig model = gpt_config_from_hf(load_json_file(llama + "/config.json").value(), "llama").value();
  EXPECT_EQ(planned["num_parameters"].get<int64_t>(), model.num_parameters());
  const CommandResult named =
      estimate("--config " + config + " --set model.hf_config=" + llama + "/config.json --world 2 --json");
  ASSERT_EQ(named.exit_code, 0) << named.output;
  EXPECT_EQ(nlohmann::json::parse(named.output), planned);

  r = estimate("--config " + config + " --init-from /no/such/model --world 2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("run.init_from (--init-from): /no/such/model does not exist"), std::string::npos)
      << r.output;
  r = estimate("--params 7e9 --world 2 --init-from " + llama);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--init-from plans a run's model: give it with --config FILE"), std::string::npos)
      << r.output;
}

// SmolLM-135M (configs/smollm-135m.json) at T = 2, as DeepSpeed's AutoTP
// splits it: 3 key/value heads as 2 + 1, each with its 3 query heads, the
// MLP's 1536 as 768 + 768, the tied table's 49152 rows as 24576 + 24576, the
// norms whole. Rank 0's 30 layers hold 6 query heads' q/o_proj (576 x 384
// each), 2 key/value heads' k/v_proj (576 x 128), the MLP (3 x 576 x 768) and
// 2 norms (1152); rank 1's 3, 1 and the same MLP; both the table's half and
// the final norm. The slices and the replicas sum to the model's 134515008.
TEST(ZeroEstimateCliTest, SmolLmSplitsItsNineHeadsUnevenlyOverTwoTensorRanks) {
  const CommandResult r = estimate("--config " + std::string(ZE_SOURCE_DIR) +
                                   "/configs/smollm-135m.json --world 2 --set tensor_parallel.autotp_size=2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["num_parameters"].get<int64_t>(), 134515008);
  ASSERT_EQ(j["ranks"].size(), 2u);
  const int64_t table = 24576 * 576 + 576, mlp = 3 * 576 * 768 + 1152;
  EXPECT_EQ(j["ranks"][0]["num_parameters"].get<int64_t>(), 30 * (2 * 576 * 384 + 2 * 576 * 128 + mlp) + table);
  EXPECT_EQ(j["ranks"][1]["num_parameters"].get<int64_t>(), 30 * (2 * 576 * 192 + 2 * 576 * 64 + mlp) + table);
  EXPECT_EQ(j["max_rank"], 0) << "the rank with more heads";

  const CommandResult four = estimate("--config " + std::string(ZE_SOURCE_DIR) +
                                      "/configs/smollm-135m.json --world 4 --set tensor_parallel.autotp_size=4");
  EXPECT_EQ(four.exit_code, 2) << four.output;
  EXPECT_NE(four.output.find("tensor_parallel.autotp_size: 4 is more than the model's 3 key/value heads"),
            std::string::npos)
      << four.output;
}

// The peak tracked memory of GPT-2 124M's step in docs/benchmarks.md (the
// "GPT-2 124M step" table: bench/gpt_step_bench's peak_GiB, which the planner
// predicts to the byte; and the "bf16 on CPUs without fast bf16 GEMMs" table,
// the bf16 step with its GEMMs in bf16 and widened to fp32) is in GiB, 2^30
// bytes: the fp32 row's 2094.65 MiB is 2.05 GiB, not 2.09 (MiB / 1000).
TEST(ZeroEstimateCliTest, BenchmarksPageStepPeaksAreThePlannersInGiB) {
  std::ifstream in(std::string(ZE_SOURCE_DIR) + "/docs/benchmarks.md");
  std::string page((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(page.empty());
  const std::string config = write_config("gpt2-124m.json", R"({
    "model": {"n_layer": 12, "n_head": 12, "d_model": 768, "vocab_size": 50304, "seq_len": 64},
    "train_micro_batch_size_per_gpu": 4,
    "optimizer": {"type": "AdamW", "params": {"lr": 6e-4, "betas": [0.9, 0.95], "weight_decay": 0.1}}
  })");
  // The planned peak in GiB, with the bf16 GEMMs in bf16 or widened to fp32.
  auto planned_gib = [&](const std::string& set, const char* bf16_gemm) {
    const CommandResult r = testing::run_command(cat("ZE_CPU_BF16_GEMM=", bf16_gemm, " ", ZE_ESTIMATE_BIN, " --config ",
                                                     config, " --world 1 --json ", set));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return nlohmann::json::parse(r.output)["ranks"][0]["total"]["host"].get<double>() / (1 << 30);
  };
  const double fp32 = planned_gib("", "bf16"), bf16 = planned_gib("--set bf16.enabled=true", "bf16"),
               widened = planned_gib("--set bf16.enabled=true", "fp32");
  // The last "N GiB" cell of the table row that starts "| ROW | ", e.g.
  // "| fp32 | 1.17 s | ... | 2.05 GiB |".
  auto row_gib = [&](const std::string& row) {
    const size_t at = page.find("\n| " + row + " | ");
    if (at == std::string::npos) {
      ADD_FAILURE() << "docs/benchmarks.md has no table row \"| " << row << " |\"";
      return -1.0;
    }
    const std::string line = page.substr(at + 1, page.find('\n', at + 1) - at - 1);
    const size_t gib = line.rfind(" GiB |");
    if (gib == std::string::npos) {
      ADD_FAILURE() << "no GiB cell in: " << line;
      return -1.0;
    }
    const size_t cell = line.rfind("| ", gib);
    return std::stod(line.substr(cell + 2, gib - cell - 2));
  };
  EXPECT_NEAR(row_gib("fp32"), fp32, 0.005);
  EXPECT_NEAR(row_gib("bf16 (bf16 GEMMs)"), bf16, 0.005);
  EXPECT_NEAR(row_gib("bf16 GEMMs in bf16"), bf16, 0.005);
  EXPECT_NEAR(row_gib("bf16 GEMMs widened to fp32 (`ZE_CPU_BF16_GEMM=fp32`)"), widened, 0.005);
}

TEST(ZeroEstimateCliTest, BadArgumentsAreNamed) {
  struct Bad {
    std::string args, message;
    int code;
  };
  const std::string config = write_config("run2.json", kRunConfig);
  const Bad bad[] = {
      {"", "give --config FILE", 2},
      {"--params 7.5e9", "--world", 2},
      {"--params abc --world 4", "--params: \"abc\"", 2},
      {"--params 7.5e9 --world 0", "--world: \"0\"", 2},
      {"--params 7.5e9 --world 4 --config " + config, "not both", 2},
      {"--config " + config + " --world 2 --rank 2", "--rank 2", 2},
      {"--config /no/such/file.json --world 2", "/no/such/file.json", 2},
      {"--config " + config + " --world 2 --set zero_optimization.stage=7", "zero_optimization.stage", 2},
      {"--config " + config + " --world 2 --set activation_checkpointing.number_checkpoints=9",
       "number_checkpoints", 2},
      {"--frobnicate", "unknown argument --frobnicate", 2},
  };
  for (const Bad& b : bad) {
    const CommandResult r = estimate(b.args);
    EXPECT_EQ(r.exit_code, b.code) << b.args << "\n" << r.output;
    EXPECT_NE(r.output.find(b.message), std::string::npos) << b.args << "\n" << r.output;
  }
  EXPECT_EQ(estimate("--help").exit_code, 0);
}
#endif

}  // namespace
}  // namespace zero
