// Fine-tuning from a Hugging Face directory with the programs, as a user
// does it: `zero-train --init-from DIR` (config.json read from DIR) on two
// ranks at ZeRO stage 3 with the optimizer state on NVMe, and with tensor
// parallelism (each rank reads its slices), one step at lr 0, then
// `zero-ckpt consolidate --format hf`: the exported directory holds the
// source's tensors bit for bit, under the source's names, with a config.json
// that reads back as the same model. And what a user gets wrong is named.
// The export is a whole model directory (tokenizer files byte for byte,
// generation_config.json, a Mistral still a Mistral with its token ids),
// even after the source is gone; one launch command (--init-from X
// --resume auto) starts a job from X and, run again after a stop, resumes
// it from its checkpoint with the uninterrupted run's losses; a resumed run
// takes its model from the checkpoint.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
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

// ---------------------------------------------------------------- a complete directory back

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// A Mistral directory as transformers writes one (the golden Llama's
// weights: Mistral's layers are Llama's), with its token ids, tokenizer
// files (tokenizer.model binary, every byte value) and chat template, and
// no generation_config.json.
std::string mistral_dir(const std::string& name) {
  const std::string dir = fresh(name);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(golden("llama")))
    if (e.path().extension() == ".safetensors" || e.path().filename() == "model.safetensors.index.json")
      if (e.path().filename() != "golden.safetensors") {
        fs::copy_file(e.path(), dir + "/" + e.path().filename().string());
      }
  Json c = load_json_file(golden("llama") + "/config.json").value();
  c["model_type"] = "mistral";
  c["architectures"] = {"MistralForCausalLM"};
  c.erase("attention_bias");
  c.erase("mlp_bias");
  c.erase("pretraining_tp");
  c["sliding_window"] = nullptr;
  c["bos_token_id"] = 1;
  c["eos_token_id"] = 2;
  write_bytes(dir + "/config.json", c.dump(2));
  std::string model;
  for (int i = 0; i < 1024; ++i) model += static_cast<char>(i * 131 % 256);
  write_bytes(dir + "/tokenizer.model", model);
  write_bytes(dir + "/tokenizer.json", R"({"version": "1.0", "added_tokens": [{"id": 1, "content": "<s>"}]})");
  write_bytes(dir + "/tokenizer_config.json", R"({"bos_token": "<s>", "eos_token": "</s>", "legacy": false})");
  write_bytes(dir + "/special_tokens_map.json", R"({"bos_token": "<s>", "eos_token": "</s>"})");
  write_bytes(dir + "/chat_template.jinja", "{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}\n");
  return dir;
}

// A Mistral fine-tuned and given back: the run started from the directory
// saves its tokenizer files in the checkpoint; the directory is then gone,
// and the same launch command resumes from the checkpoint alone (its
// config.json is the model; --init-from is not read) and carries them into
// its own checkpoint, the first one deleted (--keep 1). The export is a complete
// directory: the tokenizer files byte for byte, config.json still a
// "mistral" (MistralForCausalLM) with the source's bos/eos ids,
// generation_config.json with those ids, and the weights (lr 0) the
// source's bit for bit.
TEST(HfCliTest, AMistralComesBackAsACompleteMistralDirectory) {
  const std::string source = mistral_dir("mistral"), kept = fresh("mistral.kept");
  fs::copy(source, kept);
  const std::string ckpt = fresh("mistral.ckpt"), out = fresh("mistral.export");
  const std::string common = "--config configs/ds/fp32-adamw.json --set model.seq_len=16 --set data.format=llmc"
                             " --set data.path=" + token_file(96) + " --set optimizer.params.lr=0"
                             " --set optimizer.params.weight_decay=0 --save-dir " + ckpt + " --keep 1" +
                             " --init-from " + source + " --resume auto";
  testing::CommandResult r = run(1, common + " --steps 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("model: Mistral n_layer=2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("model files: tokenizer.json, tokenizer.model, tokenizer_config.json, "
                          "special_tokens_map.json, chat_template.jinja (from " + source + ")"),
            std::string::npos)
      << r.output;
  fs::remove_all(source);
  r = run(1, common + " --steps 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("model: Mistral n_layer=2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("resumed from " + ckpt + "/global_step1 at step 1 (its weights, optimizer state and step; "
                          "--init-from " + source + " is not read, and is gone)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("model files: tokenizer.json, tokenizer.model, tokenizer_config.json, "
                          "special_tokens_map.json, chat_template.jinja (from " + ckpt + "/global_step1)"),
            std::string::npos)
      << r.output;
  ASSERT_FALSE(fs::exists(ckpt + "/global_step1")) << "--keep 1 removed it";
  const testing::CommandResult c =
      testing::run_command(std::string(ZE_CKPT_BIN) + " consolidate " + ckpt + " --format hf --out " + out);
  ASSERT_EQ(c.exit_code, 0) << c.output;

  for (const char* f : {"tokenizer.model", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                        "chat_template.jinja"}) {
    ASSERT_TRUE(fs::exists(out + "/" + f)) << f;
    EXPECT_EQ(read_bytes(out + "/" + f), read_bytes(kept + "/" + f)) << f << " is not the source's, byte for byte";
  }
  const Json config = load_json_file(out + "/config.json").value();
  EXPECT_EQ(config["model_type"], "mistral");
  EXPECT_EQ(config["architectures"], Json::array({"MistralForCausalLM"}));
  EXPECT_EQ(config["bos_token_id"], 1);
  EXPECT_EQ(config["eos_token_id"], 2);
  EXPECT_EQ(config["tie_word_embeddings"], false);
  EXPECT_EQ(config["torch_dtype"], "float32");
  EXPECT_EQ(config["dtype"], "float32");
  const Json generation = load_json_file(out + "/generation_config.json").value();
  EXPECT_EQ(generation["bos_token_id"], 1);
  EXPECT_EQ(generation["eos_token_id"], 2);
  absl::StatusOr<HfWeights> exported = HfWeights::open(out), original = HfWeights::open(kept);
  ASSERT_TRUE(exported.ok()) << exported.status();
  ASSERT_TRUE(original.ok()) << original.status();
  testing::expect_same_hf_tensors(*exported, *original, "mistral");
}

// ---------------------------------------------------------------- one launch command

std::vector<Json> metrics_lines(const std::string& path) {
  std::vector<Json> out;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) out.push_back(Json::parse(line));
  return out;
}

// The command a job scheduler runs, the first time and after a preemption:
// `--init-from X --resume auto`. The first run starts from X (no checkpoint
// yet, said so) and is stopped by SIGTERM a few steps in, after some of its
// saves (every 5 steps); the same command again resumes from the newest
// checkpoint, at its step, and its losses from there on are those of the
// same command run once without a stop, bit for bit.
TEST(HfCliTest, OneLaunchCommandStartsFromTheSourceAndRestartsFromItsCheckpoint) {
  const std::string ckpt = fresh("launch.ckpt"), metrics = fresh("launch.metrics.jsonl");
  const std::string straight_ckpt = fresh("straight.ckpt"), straight = fresh("straight.metrics.jsonl");
  const std::string launch = "--config configs/ds/fp32-adamw.json --init-from " +
                             golden("llama") + " --set model.seq_len=16 --set data.format=llmc --set data.path=" +
                             token_file(96) + " --steps 1000 --save-every 5 --resume auto";
  const std::string first_log = fresh("launch.first.log");
  // Preempted: SIGTERM once 8 steps are in the metrics (it stops at the end of a step). The
  // poll races the run: 1000 steps (a few seconds) leave room for a shell the suite's load
  // keeps off the CPU; with 300 the run once finished before the kill.
  testing::CommandResult r = testing::run_command(
      "cd " + kSource + " && { " + ZE_TRAIN_BIN + " " + launch + " --save-dir " + ckpt + " --metrics " + metrics +
      " > " + first_log + " 2>&1 & pid=$!; for i in $(seq 6000); do [ -f " + metrics + " ] && [ $(wc -l < " + metrics +
      ") -ge 8 ] && break; sleep 0.01; done; kill -TERM $pid; wait $pid; }");
  const std::string first = read_bytes(first_log);
  ASSERT_EQ(r.exit_code, 143) << "the first run was to be stopped by SIGTERM before step 1000\n" << r.output << first;
  EXPECT_NE(first.find("resume: auto, no checkpoint in " + ckpt + " yet; starting from " + golden("llama")),
            std::string::npos)
      << first;
  EXPECT_NE(first.find("weights initialised from " + golden("llama")), std::string::npos) << first;
  const size_t at = first.find("stopped by signal 15 after step ");
  ASSERT_NE(at, std::string::npos) << first;
  const int stopped = std::stoi(first.substr(at + 32));
  const int saved = stopped / 5 * 5;
  ASSERT_GE(saved, 5) << first;

  r = run(1, launch + " --save-dir " + ckpt + " --metrics " + metrics);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from " + ckpt + "/global_step" + std::to_string(saved) + " at step " +
                          std::to_string(saved) + " (its weights, optimizer state and step; --init-from " +
                          golden("llama") + " is not read)"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("weights initialised"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("model: Llama n_layer=2 n_head=4 n_kv_head=2 d_model=64"), std::string::npos) << r.output;

  r = run(1, launch + " --save-dir " + straight_ckpt + " --metrics " + straight);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<Json> once = metrics_lines(straight), twice = metrics_lines(metrics);
  ASSERT_EQ(once.size(), 1000u);
  // The first run's steps, then the resumed run's (appended), from saved + 1.
  ASSERT_EQ(twice.size(), static_cast<size_t>(stopped + 1000 - saved));
  for (int i = 0; i < stopped; ++i) {
    EXPECT_EQ(twice[i]["step"], i + 1);
    EXPECT_EQ(twice[i]["loss"], once[i]["loss"]) << "step " << i + 1;
  }
  for (int step = saved + 1; step <= 1000; ++step) {
    const Json& resumed = twice[static_cast<size_t>(stopped + step - saved - 1)];
    ASSERT_EQ(resumed["step"], step);
    EXPECT_EQ(resumed["loss"], once[static_cast<size_t>(step - 1)]["loss"]) << "step " << step;
  }
}

// A run resumed with no --init-from and no model keys builds the model the
// checkpoint describes (a Llama, not the default GPT-2), at the checkpoint's
// step; a config that names another model is refused naming both, and so is
// an --init-from of another family.
TEST(HfCliTest, AResumedRunTakesItsModelFromTheCheckpoint) {
  const std::string ckpt = fresh("resume.ckpt");
  const std::string base = "--config configs/ds/fp32-adamw.json --set model.seq_len=16 --set data.format=llmc"
                           " --set data.path=" + token_file(96);
  testing::CommandResult r = run(1, base + " --init-from " + golden("llama") + " --steps 2 --save-dir " + ckpt);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run(1, base + " --resume " + ckpt + " --steps 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("model: Llama n_layer=2 n_head=4 n_kv_head=2 d_model=64 d_ff=96 vocab=96 seq_len=16"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("resumed from " + ckpt + "/global_step2 at step 2\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("step 3/3"), std::string::npos) << r.output;

  r = run(1, base + " --resume " + ckpt + " --steps 3 --set model.arch=llama --set model.n_layer=3"
                    " --set model.n_head=4 --set model.n_kv_head=2 --set model.d_model=64 --set model.d_ff=96"
                    " --set model.vocab_size=96");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("run.resume: checkpoint " + ckpt + "/global_step2 holds a Llama model and the run's "
                          "config (the model section) describes a Llama model that differs from it: "
                          "num_hidden_layers 2 vs 3"),
            std::string::npos)
      << r.output;
  r = run(1, base + " --resume " + ckpt + " --steps 3 --init-from " + golden("qwen2"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("describes a Qwen2 model that differs from it: model_type \"llama\" vs \"qwen2\""),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("model.hf_config " + golden("qwen2") + "/config.json"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace zero
