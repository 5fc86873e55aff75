// The programs' shared command line (runtime/tools/cli.h) as a user meets it:
// --help on stdout with exit 0 (subcommands too), --version with the
// version, revision and build features, and a usage error on stderr with
// exit 2 naming the argument; zero-train's repeated --config and --set
// layering in the documented order.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/testing/run_command.h"

namespace {

using zero::testing::CommandResult;
using zero::testing::run_command;

CommandResult stdout_of(const std::string& command) { return run_command("( " + command + " 2>/dev/null )"); }
CommandResult stderr_of(const std::string& command) { return run_command("( " + command + " >/dev/null )"); }

struct Program {
  std::string command, name;  // what to run ("zero-ckpt consolidate"), and its usage's name
};

const Program kPrograms[] = {
    {ZE_TRAIN_BIN, "zero-train"},
    {ZE_ESTIMATE_BIN, "zero-estimate"},
    {ZE_CKPT_BIN, "zero-ckpt"},
    {std::string(ZE_CKPT_BIN) + " inspect", "zero-ckpt inspect"},
    {std::string(ZE_CKPT_BIN) + " consolidate", "zero-ckpt consolidate"},
    {ZE_DATA_BIN, "zero-data"},
    {std::string(ZE_DATA_BIN) + " bytes-to-llmc", "zero-data bytes-to-llmc"},
    {ZE_REPORT_BIN, "zero-report"},
};

TEST(CliTest, HelpIsOnStdoutWithExitZero) {
  for (const Program& p : kPrograms) {
    for (const char* flag : {"--help", "-h"}) {
      const CommandResult out = stdout_of(p.command + " " + flag);
      EXPECT_EQ(out.exit_code, 0) << p.name << " " << flag << "\n" << out.output;
      EXPECT_EQ(out.output.rfind("usage: " + p.name, 0), 0u) << p.name << " " << flag << "\n" << out.output;
      EXPECT_NE(out.output.find("--help"), std::string::npos) << out.output;
      EXPECT_EQ(stderr_of(p.command + " " + flag).output, "") << p.name << " " << flag;
    }
  }
  // Each subcommand's own options.
  EXPECT_NE(stdout_of(std::string(ZE_CKPT_BIN) + " consolidate --help").output.find("--max-shard-size"),
            std::string::npos);
  EXPECT_NE(stdout_of(std::string(ZE_DATA_BIN) + " bytes-to-llmc --help").output.find("--input"), std::string::npos);
  EXPECT_NE(stdout_of(std::string(ZE_CKPT_BIN) + " --help").output.find("consolidate"), std::string::npos);
  // --init-from takes a Hugging Face directory as well as a file, and says so.
  EXPECT_NE(stdout_of(std::string(ZE_TRAIN_BIN) + " --help").output.find("--init-from DIR|FILE"), std::string::npos)
      << stdout_of(std::string(ZE_TRAIN_BIN) + " --help").output;
}

TEST(CliTest, VersionSaysVersionRevisionAndFeatures) {
  for (const Program& p : kPrograms) {
    if (p.name.find(' ') != std::string::npos) continue;  // subcommands share their program's
    const CommandResult out = stdout_of(p.command + " --version");
    EXPECT_EQ(out.exit_code, 0) << p.name << "\n" << out.output;
    EXPECT_EQ(out.output.rfind(p.name + " (ZeroEngine) " + ZE_VERSION + "\n", 0), 0u) << out.output;
    EXPECT_NE(out.output.find("\nrevision: "), std::string::npos) << out.output;
    EXPECT_NE(out.output.find("\nfeatures: cuda o"), std::string::npos) << out.output;
    EXPECT_NE(out.output.find("simd avx512 avx2"), std::string::npos) << out.output;
  }
}

TEST(CliTest, UsageErrorsGoToStderrWithExitTwo) {
  struct Bad {
    std::string command, message;
  };
  const Bad bad[] = {
      {std::string(ZE_TRAIN_BIN) + " --frobnicate", "zero-train: unknown argument --frobnicate"},
      {std::string(ZE_TRAIN_BIN) + " --config", "--config"},
      {std::string(ZE_ESTIMATE_BIN) + " --world", "--world"},
      {std::string(ZE_CKPT_BIN), "zero-ckpt: "},
      {std::string(ZE_CKPT_BIN) + " frobnicate", "frobnicate"},
      {std::string(ZE_CKPT_BIN) + " consolidate", "DIR"},
      {std::string(ZE_CKPT_BIN) + " consolidate /tmp --format onnx --out x", "--format onnx"},
      {std::string(ZE_CKPT_BIN) + " consolidate /tmp --max-shard-size 5XB --out x", "--max-shard-size 5XB"},
      {std::string(ZE_CKPT_BIN) + " consolidate /tmp", "consolidate needs --out FILE"},
      {std::string(ZE_CKPT_BIN) + " inspect /tmp --out x", "unknown argument"},
      {std::string(ZE_DATA_BIN), "zero-data: "},
      {std::string(ZE_DATA_BIN) + " bytes-to-llmc --input x", "--out"},
      {std::string(ZE_REPORT_BIN) + " --frobnicate", "unknown argument --frobnicate"},
  };
  for (const Bad& b : bad) {
    const CommandResult err = stderr_of(b.command);
    EXPECT_EQ(err.exit_code, 2) << b.command << "\n" << err.output;
    EXPECT_NE(err.output.find(b.message), std::string::npos) << b.command << "\n" << err.output;
    EXPECT_NE(err.output.find("usage: "), std::string::npos) << b.command << "\n" << err.output;
    EXPECT_EQ(stdout_of(b.command).output, "") << b.command;
  }
}

// ---- zero-train's layering.

std::string write(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/CliTest." + name;
  std::ofstream(path) << text;
  return path;
}

const char* kBase = R"({
  "model": {"n_layer": 2, "n_head": 2, "d_model": 32, "vocab_size": 256, "seq_len": 16},
  "data": {"format": "text", "path": "/usr/share/common-licenses"},
  "run": {"steps": 30},
  "train_micro_batch_size_per_gpu": 8
})";

nlohmann::json print_config(const std::string& args) {
  const CommandResult r = stdout_of(std::string(ZE_TRAIN_BIN) + " " + args + " --print-config");
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
  return nlohmann::json::parse(r.output);  // strict JSON: no comments
}

// Files merge in order; every --set and key option applies after all files,
// in the order given (as zero-train always has).
TEST(CliTest, RepeatedConfigAndSetKeepTheirOrder) {
  const std::string base = write("base.json", kBase);
  const std::string three = write("three.json", R"({"model": {"n_layer": 3}})");
  const std::string four = write("four.json", R"({"model": {"n_layer": 4}})");
  EXPECT_EQ(print_config("--config " + base + " --config " + three)["model"]["n_layer"], 3);
  EXPECT_EQ(print_config("--config " + base + " --config " + three + " --config " + four)["model"]["n_layer"], 4);
  EXPECT_EQ(print_config("--config " + base + " --config " + four + " --config " + three)["model"]["n_layer"], 3);
  EXPECT_EQ(print_config("--set model.n_layer=5 --config " + base + " --config " + four)["model"]["n_layer"], 5);
  EXPECT_EQ(print_config("--config " + base + " --set run.steps=5 --steps 7")["run"]["steps"], 7);
  EXPECT_EQ(print_config("--config " + base + " --steps 7 --set run.steps=5")["run"]["steps"], 5);
  EXPECT_EQ(print_config("--config=" + base + " --steps=9")["run"]["steps"], 9);
}

// Experts that cannot route: exit 2 and a message naming the key and both numbers.
TEST(CliTest, ExpertsThatCannotRouteExitTwoNamingBothNumbers) {
  const std::string moe = write("moe.json", R"({
  "model": {"arch": "mixtral", "n_layer": 2, "n_head": 2, "d_model": 32, "vocab_size": 256, "seq_len": 16,
            "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16},
  "data": {"format": "text", "path": "/usr/share/common-licenses"},
  "run": {"steps": 30},
  "train_micro_batch_size_per_gpu": 8
})");
  CommandResult r = stderr_of(std::string(ZE_TRAIN_BIN) + " --config " + moe + " --set model.num_experts_per_tok=5");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("model.num_experts_per_tok: 5 must be between 1 and model.num_experts (4)"),
            std::string::npos)
      << r.output;
  r = stderr_of(std::string(ZE_TRAIN_BIN) + " --config " + moe + " --set model.num_experts=0");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("model.num_experts: the Mixtral family is a mixture of experts"), std::string::npos)
      << r.output;
  r = stderr_of(std::string(ZE_TRAIN_BIN) + " --config " + moe + " --set model.arch=\"gpt2\"");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("model.num_experts: 4 experts need a family with a SwiGLU MLP"), std::string::npos)
      << r.output;
  // A Hugging Face config.json with more experts per token than experts: its key and both numbers.
  const std::string hf_dir = ::testing::TempDir() + "/CliTest.hf_moe";
  std::filesystem::create_directories(hf_dir);
  std::ofstream(hf_dir + "/config.json") << R"({"model_type": "mixtral", "hidden_size": 32, "intermediate_size": 16,
    "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2, "vocab_size": 256,
    "max_position_embeddings": 64, "num_local_experts": 4, "num_experts_per_tok": 6})";
  const std::string from_hf = write("moe_hf.json", R"({"model": {"hf_config": ")" + hf_dir + R"(/config.json", "seq_len": 16},
  "data": {"format": "text", "path": "/usr/share/common-licenses"}, "train_micro_batch_size_per_gpu": 8})");
  r = stderr_of(std::string(ZE_TRAIN_BIN) + " --config " + from_hf);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("num_experts_per_tok"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("num_local_experts (4)"), std::string::npos) << r.output;
  // The run stops before training: nothing printed a step.
  EXPECT_EQ(r.output.find("step 1/"), std::string::npos) << r.output;
  // Expert parallelism: ep_size must divide the experts and the data-parallel ranks (here 1).
  r = stderr_of(std::string(ZE_TRAIN_BIN) + " --config " + moe + " --set model.ep_size=3");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("model.ep_size: 3 does not divide model.num_experts (4)"), std::string::npos) << r.output;
  r = stderr_of(std::string(ZE_TRAIN_BIN) + " --config " + moe + " --set model.ep_size=2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("mesh.order"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ep model.ep_size"), std::string::npos) << r.output;
  r = stderr_of(std::string(ZE_TRAIN_BIN) + " --config " + moe + " --set model.arch=\"llama\" --set model.num_experts=0 "
                "--set model.ep_size=2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("model.ep_size: 2 expert-parallel ranks for a model without experts"), std::string::npos)
      << r.output;
}

// With several layers, an error about a key says which file or option gave it.
TEST(CliTest, LayeredConfigErrorNamesTheSource) {
  const std::string base = write("errbase.json", kBase);
  const std::string stage = write("stage7.json", R"({"zero_optimization": {"stage": 7}})");
  CommandResult r = stderr_of(std::string(ZE_TRAIN_BIN) + " --config " + base + " --config " + stage);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(stage + ": zero_optimization.stage: 7 is out of range"), std::string::npos) << r.output;
  r = stderr_of(std::string(ZE_TRAIN_BIN) + " --config " + base + " --set zero_optimization.stage=9");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--set: zero_optimization.stage: 9"), std::string::npos) << r.output;
  r = stderr_of(std::string(ZE_TRAIN_BIN) + " --config " + base + " --steps many");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--steps: run.steps: expected an integer"), std::string::npos) << r.output;
  // The earlier file's key, when a later file overrides another.
  const std::string bad_layer = write("badlayer.json", R"({"model": {"n_layer": -1, "n_head": 2}})");
  EXPECT_EQ(print_config("--config " + bad_layer + " --config " + base)["model"]["n_layer"], 2);  // overridden
  r = stderr_of(std::string(ZE_TRAIN_BIN) + " --config " + base + " --config " + bad_layer + " --set model.n_head=2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(bad_layer + ": model.n_layer:"), std::string::npos) << r.output;
  const std::string typo = write("typo.json", R"({"zero_optimization": {"stag": 1}})");
  r = stderr_of(std::string(ZE_TRAIN_BIN) + " --config " + base + " --config " + typo);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(typo + ": unknown key \"zero_optimization.stag\""), std::string::npos) << r.output;
  // One file: the key alone, as before.
  r = stderr_of(std::string(ZE_TRAIN_BIN) + " --config " + stage);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("zero_optimization.stage: 7"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(stage + ": zero_optimization"), std::string::npos) << r.output;
}

}  // namespace
