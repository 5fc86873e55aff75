// Fine-tuning from a Hugging Face directory with the programs, as a user
// does it: `zero-train --init-from DIR` (config.json read from DIR) on two
// ranks at ZeRO stage 3 with the optimizer state on NVMe, and with tensor
// parallelism (each rank reads its slices), one step at lr 0, then
// `zero-ckpt consolidate --format hf`: the exported directory holds the
// source's tensors bit for bit, under the source's names, with a config.json
// that reads back as the same model. And what a user gets wrong is named.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/checkpoint/hf_weights.h"
#include "runtime/config/hf_config.h"
#include "runtime/config/json_file.h"
#include "runtime/data/token_source.h"
#include "tests/testing/hf_files.h"
#include "tests/testing/run_command.h"

namespace zero {
namespace {

namespace fs = std::filesystem;
const std::string kSource = ZE_SOURCE_DIR;

std::string golden(const std::string& name) { return kSource + "/tests/data/hf/" + name; }

std::string fresh(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/HfCliTest." + name;
  fs::remove_all(dir);
  return dir;
}

// An llm.c shard of `count` tokens below `vocab` (the golden models' vocabularies are small).
std::string token_file(int64_t vocab) {
  const std::string path = ::testing::TempDir() + "/HfCliTest.tokens" + std::to_string(vocab) + ".bin";
  std::vector<uint16_t> tokens(20000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>((i * 7 + i / 16 * 3) % vocab);
  EXPECT_TRUE(write_llmc_shard(path, tokens).ok());
  return path;
}

testing::CommandResult run(int ranks, const std::string& args) {
  const std::string launcher = ranks == 1 ? "" : std::string(ZE_MPIEXEC) + " --allow-run-as-root --oversubscribe -np " +
                                                     std::to_string(ranks) + " ";
  return testing::run_command("cd " + kSource + " && timeout 300 " + launcher + ZE_TRAIN_BIN + " " + args);
}

// Trains one step at lr 0 from `model` with `extra`, exports the checkpoint
// as a Hugging Face directory in `dtype` and compares it with the source.
void expect_round_trip(const std::string& model, int ranks, const std::string& extra, const std::string& dtype) {
  const std::string dir = golden(model), ckpt = fresh(model + ".ckpt"), out = fresh(model + ".export");
  absl::StatusOr<Json> source_json = load_json_file(dir + "/config.json");
  ASSERT_TRUE(source_json.ok()) << source_json.status();
  absl::StatusOr<GptConfig> source_config = gpt_config_from_hf(*source_json, dir);
  ASSERT_TRUE(source_config.ok()) << source_config.status();
  const std::string data = token_file(source_config->vocab_size);
  const testing::CommandResult r =
      run(ranks, "--config configs/ds/fp32-adamw.json --init-from " + dir + " --set model.seq_len=16" +
                     " --set data.format=llmc --set data.path=" + data + " --set optimizer.params.lr=0" +
                     " --set optimizer.params.weight_decay=0 --steps 1 --save-dir " + ckpt + " " + extra);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("weights initialised from " + dir), std::string::npos) << r.output;
  const testing::CommandResult c = testing::run_command(std::string(ZE_CKPT_BIN) + " consolidate " + ckpt +
                                                        " --format hf --dtype " + dtype + " --out " + out);
  ASSERT_EQ(c.exit_code, 0) << c.output;
  absl::StatusOr<HfWeights> exported = HfWeights::open(out), source = HfWeights::open(dir);
  ASSERT_TRUE(exported.ok()) << exported.status();
  ASSERT_TRUE(source.ok()) << source.status();
  testing::expect_same_hf_tensors(*exported, *source, model + " " + extra);
  absl::StatusOr<Json> written = load_json_file(out + "/config.json");
  ASSERT_TRUE(written.ok()) << written.status();
  absl::StatusOr<GptConfig> back = gpt_config_from_hf(*written, out);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(hf_config_json(*back, DType::kF32), hf_config_json(*source_config, DType::kF32)) << model;
  EXPECT_EQ((*written)["model_type"], (*source_json)["model_type"]) << model;
}

TEST(HfCliTest, StageThreeWithNvmeOffloadOnTwoRanksExportsTheSourceBitForBit) {
  const std::string swap = fresh("swap");
  fs::create_directories(swap);
  // The sharded fp32 Llama; the model computes in bf16, the master stays the file's fp32.
  expect_round_trip("llama", 2,
                    "--config configs/ds/zero3-nvme-optimizer.json --set zero_optimization.offload_optimizer.nvme_path=" +
                        swap,
                    "fp32");
}

TEST(HfCliTest, TensorParallelRanksReadTheirSlicesAndExportTheWhole) {
  // GPT-2's Conv1D weights transposed, its vocabulary split unevenly (80 rows
  // over 2), the fused QKV by heads; the bf16 Llama 3 with its tied table.
  expect_round_trip("gpt2", 2, "--set tensor_parallel.autotp_size=2", "fp32");
  expect_round_trip("llama3", 2, "--set tensor_parallel.autotp_size=1 --set zero_optimization.stage=2", "bf16");
}

// Qwen2's q/k/v biases and Qwen3's q/k norms (whole on each rank) split over
// two tensor ranks, Gemma's (1 + w) norms sharded at stage 3: each exports
// the source bit for bit with its own model_type.
TEST(HfCliTest, QwenAndGemmaExportTheSourceWithTheirModelType) {
  expect_round_trip("qwen2", 2, "--set tensor_parallel.autotp_size=2", "fp32");
  expect_round_trip("qwen3", 2, "--set tensor_parallel.autotp_size=2", "fp32");
  expect_round_trip("gemma", 2, "--set zero_optimization.stage=3", "fp32");
}

TEST(HfCliTest, WhatDoesNotFitIsNamed) {
  const std::string data = token_file(96);
  const std::string base = "--config configs/ds/fp32-adamw.json --set data.format=llmc --set data.path=" + data +
                           " --set model.seq_len=16 --steps 1";
  // A directory without weights.
  const std::string empty = fresh("empty");
  fs::create_directories(empty);
  testing::CommandResult r = run(1, base + " --init-from " + empty);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("has neither model.safetensors nor model.safetensors.index.json"), std::string::npos)
      << r.output;
  // A model_type we do not build, named.
  const std::string other = fresh("gemma2");
  fs::create_directories(other);
  std::ofstream(other + "/config.json") << R"({"model_type": "gemma2", "hidden_size": 64})";
  r = run(1, base + " --set model.hf_config=" + other + "/config.json");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("\"model_type\" is \"gemma2\""), std::string::npos) << r.output;
  // Architecture keys beside the file that says them.
  r = run(1, base + " --set model.hf_config=" + golden("llama") + "/config.json --set model.n_layer=3");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("model.n_layer: comes from model.hf_config"), std::string::npos) << r.output;
  // Weights of another shape: the model the section describes (3 layers of
  // 32) is not the file's, and the tensor is named with both shapes.
  r = run(1, base + " --set model.arch=llama --set model.n_layer=2 --set model.n_head=4 --set model.n_kv_head=2" +
                 " --set model.d_model=32 --set model.d_ff=96 --set model.vocab_size=96 --init-from " + golden("llama"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("embed_tokens.weight"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace zero
