// Every ready config in configs/ runs: quickstart and gpt2-124m on their own,
// each DeepSpeed config in configs/ds/ layered on configs/small-gpt.json (the
// --config layering a DeepSpeed user keeps their ds_config.json unchanged
// with). A run must exit 0, finish its steps, and (where it runs long
// enough) lower the loss.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>

#include <nlohmann/json.hpp>

#include "tests/testing/run_command.h"

namespace {

namespace fs = std::filesystem;
const std::string kSource = ZE_SOURCE_DIR;

struct Losses {
  double first = 0, last = 0;
};

// Parses "done: N steps in ..., loss A -> B".
bool parse_done(const std::string& out, int steps, Losses& l) {
  std::smatch m;
  const std::regex re("done: " + std::to_string(steps) + " steps in [^,]*, loss ([0-9.]+) -> ([0-9.]+)");
  if (!std::regex_search(out, m, re)) return false;
  l.first = std::stod(m[1]);
  l.last = std::stod(m[2]);
  return true;
}

zero::testing::CommandResult train(const std::string& args) {
  return zero::testing::run_command("cd " + kSource + " && " + ZE_TRAIN_BIN + " " + args);
}

TEST(ConfigsTest, Quickstart) {
  auto r = train("--config configs/quickstart.json --steps 40");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Losses l;
  ASSERT_TRUE(parse_done(r.output, 40, l)) << r.output;
  EXPECT_LT(l.last, l.first - 1.0) << r.output;
}

TEST(ConfigsTest, LlamaTiny) {
  auto r = train("--config configs/llama-tiny.json --steps 40");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("model: Llama n_layer=4 n_head=4 n_kv_head=2 d_model=128 d_ff=352"), std::string::npos)
      << r.output;
  Losses l;
  ASSERT_TRUE(parse_done(r.output, 40, l)) << r.output;
  EXPECT_LT(l.last, l.first - 1.0) << r.output;
}

TEST(ConfigsTest, MixtralTiny) {
  const std::string metrics = ::testing::TempDir() + "/ConfigsTest.mixtral.jsonl";
  auto r = train("--config configs/mixtral-tiny.json --steps 40 --metrics " + metrics);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("model: Mixtral n_layer=4 n_head=4 n_kv_head=2 d_model=128 d_ff=512 experts=8 top_k=2 "
                          "expert_d_ff=128 dropless"),
            std::string::npos)
      << r.output;
  Losses l;
  ASSERT_TRUE(parse_done(r.output, 40, l)) << r.output;
  EXPECT_LT(l.last, l.first - 1.0) << r.output;
  // Each step's metrics carry the routing: every sparse layer's tokens per expert add up to the
  // step's 16 x 64 tokens times 2 choices.
  std::ifstream in(metrics);
  std::string line, last;
  while (std::getline(in, line)) last = line;
  const nlohmann::json j = nlohmann::json::parse(last);
  ASSERT_TRUE(j.contains("moe")) << last;
  EXPECT_GT(j["moe"]["aux_loss"].get<double>(), 0.0);
  ASSERT_EQ(j["moe"]["expert_tokens"].size(), 4u) << last;
  for (const auto& [layer, counts] : j["moe"]["expert_tokens"].items()) {
    int64_t sum = 0;
    for (const auto& c : counts) sum += c.get<int64_t>();
    EXPECT_EQ(sum, 16 * 64 * 2) << "layer " << layer;
  }
}

// The shards of a GPT-2-style tokenizer (tests/data/tokenizers/: the real
// vocabularies cannot be downloaded here; their ids fit the models' tables),
// as scripts/make_gpt2_data.sh makes them: byte shards would be refused.
std::string tokenize(const std::string& tokenizer, const std::string& name) {
  const std::string prefix = ::testing::TempDir() + "/ConfigsTest." + name;
  auto prep = zero::testing::run_command(std::string(ZE_DATA_BIN) + " tokenize --tokenizer " + kSource +
                                         "/tests/data/tokenizers/" + tokenizer + " --input /usr/share/common-licenses"
                                         " --val-fraction 0 --out " + prefix);
  EXPECT_EQ(prep.exit_code, 0) << prep.output;
  return prefix + "_train_000000.bin";
}

TEST(ConfigsTest, Gpt2_124M) {
  const std::string data = tokenize("gpt2", "gpt2");
  auto r = train("--config configs/gpt2-124m.json --steps 2 --set data.path=" + data);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("123.74M parameters (fp32)"), std::string::npos) << r.output;
  Losses l;
  ASSERT_TRUE(parse_done(r.output, 2, l)) << r.output;
  EXPECT_NEAR(l.first, std::log(50304.0), 0.5);  // a freshly initialised model is near-uniform
}

TEST(ConfigsTest, SmolLm135M) {
  const std::string data = tokenize("smollm", "smollm");
  auto r = train("--config configs/smollm-135m.json --steps 1 --set model.seq_len=32 --set gradient_accumulation_steps=1"
                 " --set train_micro_batch_size_per_gpu=2 --set data.path=" + data);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Hugging Face's count for HuggingFaceTB/SmolLM-135M: 134,515,008.
  EXPECT_NE(r.output.find("vocab=49152 seq_len=32, 134.52M parameters (bf16)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("n_layer=30 n_head=9 n_kv_head=3 d_model=576 d_ff=1536 tied head"), std::string::npos)
      << r.output;
  Losses l;
  ASSERT_TRUE(parse_done(r.output, 1, l)) << r.output;
  EXPECT_NEAR(l.first, std::log(49152.0), 0.5);  // a freshly initialised model is near-uniform
}

TEST(ConfigsTest, EveryDeepSpeedConfigLayeredOnTheSmallModel) {
  int ran = 0;
  for (const auto& entry : fs::directory_iterator(kSource + "/configs/ds")) {
    const std::string file = entry.path().filename().string();
    SCOPED_TRACE(file);
    auto r = train("--config configs/small-gpt.json --config configs/ds/" + file + " --steps 40");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    Losses l;
    ASSERT_TRUE(parse_done(r.output, 40, l)) << r.output;
    EXPECT_LT(l.last, l.first) << r.output;
    if (file.find("cpu-offload") != std::string::npos) {
      // ZeRO-Offload on the CPU backend: the state is in host memory already.
      EXPECT_NE(r.output.find("offload: device \"cpu\" requested; on the CPU backend"), std::string::npos)
          << r.output;
    }
    ++ran;
  }
  EXPECT_GE(ran, 14);
}

// The Llama family through every ZeRO stage, precision and offload path the
// DeepSpeed configs set: the small model as a Llama (RMSNorm, RoPE, SwiGLU, 4
// query heads over 2 key/value heads), 12 steps, that each runs and learns.
TEST(ConfigsTest, EveryDeepSpeedConfigLayeredOnASmallLlama) {
  int ran = 0;
  for (const auto& entry : fs::directory_iterator(kSource + "/configs/ds")) {
    const std::string file = entry.path().filename().string();
    SCOPED_TRACE(file);
    auto r = train("--config configs/small-gpt.json --config configs/ds/" + file +
                   " --set model.arch=llama --set model.n_kv_head=2 --steps 12 --set steps_per_print=12");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    Losses l;
    ASSERT_TRUE(parse_done(r.output, 12, l)) << r.output;
    EXPECT_LT(l.last, l.first) << r.output;
    ++ran;
  }
  EXPECT_GE(ran, 14);
}

}  // namespace
