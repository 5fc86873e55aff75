// zero-train as a user runs it: exit status and message for each kind of bad
// input (no config, a missing or malformed config, a missing or corrupt data
// file, a backend this binary or machine cannot give), and a short real run
// whose --metrics file has one JSON object per step with falling loss and
// memory figures that agree with the OS; the same run learns with dropout,
// and a dropout of 1.5 is refused by its key.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/testing/run_command.h"
#include "tests/testing/test_files.h"

namespace {

using Result = zero::testing::CommandResult;

Result run(const std::string& args) { return zero::testing::run_command(std::string(ZE_TRAIN_BIN) + " " + args); }

std::string tmp(const std::string& name) { return zero::testing::test_path(name); }
std::string write(const std::string& name, const std::string& text) {
  return zero::testing::write_test_file(name, text);
}

const char* kTinyRun = R"({
  "model": {"n_layer": 2, "n_head": 2, "d_model": 32, "vocab_size": 256, "seq_len": 16},
  "data": {"format": "text", "path": "/usr/share/common-licenses"},
  "run": {"steps": 30},
  "train_micro_batch_size_per_gpu": 8,
  "steps_per_print": 10,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}
})";

TEST(ZeroTrainCliTest, NoConfigIsAUsageError) {
  Result r = run("");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("no config given"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("usage: zero-train"), std::string::npos);
}

TEST(ZeroTrainCliTest, MissingConfigFileIsNamed) {
  Result r = run("--config " + tmp("absent.json"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("absent.json: cannot open"), std::string::npos) << r.output;
}

TEST(ZeroTrainCliTest, MalformedConfigIsLocated) {
  Result r = run("--config " + write("bad.json", "{\n \"run\": {\"steps\": 3,}\n}"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("bad.json:2:"), std::string::npos) << r.output;
}

// Bad input, so a usage error (exit 2) naming the key, before anything is built.
TEST(ZeroTrainCliTest, MissingDataFileIsNamed) {
  Result r = run("--config " + write("run.json", kTinyRun) + " --set data.path=" + tmp("no-such-data.bin"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("data.path: " + tmp("no-such-data.bin") + " does not exist"), std::string::npos) << r.output;
  r = run("--config " + write("run.json", kTinyRun) + " --set data.val_path=" + tmp("no-such-*.bin") +
          " --set run.eval_every=5");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("data.val_path: the pattern " + tmp("no-such-*.bin") + " matches no file"), std::string::npos)
      << r.output;
}

TEST(ZeroTrainCliTest, CorruptDataFileIsExplained) {
  const std::string data = write("corrupt.bin", std::string(2000, 'x'));
  Result r = run("--config " + write("run.json", kTinyRun) + " --set data.format=llmc --set data.path=" + data);
  EXPECT_EQ(r.exit_code, 2) << r.output;  // bad input, found before anything is built
  EXPECT_NE(r.output.find("corrupt.bin: bad magic"), std::string::npos) << r.output;
}

// Paths are checked before anything is built: each bad one is a usage error
// (exit 2) naming its key and the path.
TEST(ZeroTrainCliTest, BadPathsAreUsageErrorsNamingTheirKeys) {
  const std::string config = write("run.json", kTinyRun);
  const std::string a_file = write("a-file", "x");
  const std::string missing = tmp("missing");
  for (const auto& [args, want] : std::vector<std::pair<std::string, std::string>>{
           {"--resume " + missing, "run.resume (--resume): " + missing + " does not exist"},
           {"--init-from " + missing, "run.init_from (--init-from): " + missing + " does not exist"},
           {"--metrics " + missing + "/m.jsonl", "run.metrics (--metrics): cannot create " + missing + "/m.jsonl"},
           {"--save-dir " + a_file, "run.save_dir (--save-dir): " + a_file + " exists and is not a directory"},
           // Under a directory nothing can be created in (root passes access() there).
           {"--save-dir /proc/zero-train-x", "run.save_dir (--save-dir): /proc/zero-train-x does not exist and cannot be "
                                             "created"},
           {"--set tensorboard.enabled=true --set tensorboard.output_path=/proc/zero-train-x",
            "tensorboard.output_path: /proc/zero-train-x does not exist and cannot be created"},
           {"--set csv_monitor.enabled=true --set csv_monitor.output_path=" + a_file,
            "csv_monitor.output_path: " + a_file + " exists and is not a directory"},
           {"--set zero_optimization.stage=1 --set zero_optimization.offload_optimizer.device=nvme "
            "--set zero_optimization.offload_optimizer.nvme_path=" + missing,
            "zero_optimization.offload_optimizer.nvme_path: " + missing + " does not exist"},
           {"--set zero_optimization.stage=3 --set zero_optimization.offload_param.device=nvme "
            "--set zero_optimization.offload_param.nvme_path=" + a_file,
            "zero_optimization.offload_param.nvme_path: " + a_file + " exists and is not a directory"}}) {
    Result r = run("--config " + config + " " + args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(want), std::string::npos) << r.output;
  }
}

// What cannot fit is refused before anything is allocated: sizes that
// overflow by the key (exit 2), a plan larger than the machine with its
// numbers (exit 1); bounds name their keys.
TEST(ZeroTrainCliTest, WhatCannotFitIsRefusedBeforeAllocating) {
  const std::string config = write("run.json", kTinyRun);
  Result r = run("--config " + config + " --set train_micro_batch_size_per_gpu=1e15");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("train_micro_batch_size_per_gpu: 1000000000000000 is above the limit 2147483648"),
            std::string::npos)
      << r.output;
  // Within the key's limit, activations whose size overflows 64 bits.
  r = run("--config " + config + " --set train_micro_batch_size_per_gpu=2e9 --set model.vocab_size=1000000000");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("train_micro_batch_size_per_gpu: 2000000000 sequences of 16 tokens"), std::string::npos)
      << r.output;
  // Accumulation steps (given, or derived from a huge train_batch_size)
  // past their limit: the run would never end.
  for (const char* set : {"gradient_accumulation_steps=1e15", "train_batch_size=1e18"}) {
    r = run("--config " + config + " --set " + set);
    EXPECT_EQ(r.exit_code, 2) << set << "\n" << r.output;
    EXPECT_NE(r.output.find("is above the limit"), std::string::npos) << set << "\n" << r.output;
  }
  // 39B parameters: 16 bytes each is far beyond any machine this runs on.
  r = run("--config " + config + " --set model.n_layer=48 --set model.d_model=8192 --set model.n_head=64");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("this rank needs"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("of host memory at its peak by the plan (parameters"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("it cannot fit"), std::string::npos) << r.output;
  r = run("--config " + config + " --set model.n_layer=1000000000");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("model.n_layer: 1000000000 is out of range (must be between 1 and 100000)"),
            std::string::npos)
      << r.output;
}

// An allocation that fails inside an op (here under a 3 GB address-space
// limit, with a batch the machine's memory would hold): a clean error, exit
// 1, naming the tier, the size and the category, not an abort.
TEST(ZeroTrainCliTest, AnAllocationThatFailsIsACleanErrorNamingSizeAndCategory) {
  const std::string config = write("run.json", kTinyRun);
  const Result r = zero::testing::run_command("bash -c 'ulimit -v 3000000 && exec " + std::string(ZE_TRAIN_BIN) +
                                              " --config " + config +
                                              " --set train_micro_batch_size_per_gpu=32768 --steps 1'");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("out of host memory allocating "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" MiB for "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("check failed"), std::string::npos) << r.output;
}

// A diverging run (SGD at lr 1e6, no clipping) stops at the first step whose gradients or loss
// are inf/NaN, exit 1, naming the step and the last checkpoint; that
// checkpoint holds the finite weights before it. run.nonfinite_steps_allowed
// lets it skip that many first.
TEST(ZeroTrainCliTest, ADivergedRunStopsBeforeApplyingOrSavingNonFiniteWeights) {
  const std::string config = write("run.json", kTinyRun);
  const std::string ckpt = tmp("ckpt");
  std::filesystem::remove_all(ckpt);
  const std::string sgd = " --set optimizer.type=SGD --set gradient_clipping=0 --set optimizer.params.lr=";
  Result r = run("--config " + config + sgd + "1e6 --save-dir " + ckpt + " --save-every 1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("the run has diverged (1 step in a row; run.nonfinite_steps_allowed is 0). Nothing "
                          "non-finite was applied or saved; the last checkpoint is " + ckpt + "/global_step"),
            std::string::npos)
      << r.output;
  // Nothing was saved at the diverged step; the newest checkpoint holds the
  // finite weights before it: resumed, the same step diverges the same way
  // (its loss is a finite number, computed from finite weights).
  const size_t at = r.output.find("zero-train: step ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::string step_and_loss = r.output.substr(at + 12, r.output.find(" and inf/NaN", at) - at - 12);
  const int diverged = std::stoi(step_and_loss.substr(5));
  EXPECT_FALSE(std::filesystem::exists(ckpt + "/global_step" + std::to_string(diverged)));
  EXPECT_TRUE(std::filesystem::exists(ckpt + "/global_step" + std::to_string(diverged - 1)));
  r = run("--config " + config + sgd + "1e6 --resume " + ckpt);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("resumed from " + ckpt + "/global_step" + std::to_string(diverged - 1)), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(step_and_loss + " and inf/NaN"), std::string::npos) << step_and_loss << "\n" << r.output;
  // Allowed to skip two: the message counts three in a row (or the run recovers).
  r = run("--config " + config + sgd + "1e6 --set run.nonfinite_steps_allowed=2");
  if (r.exit_code != 0) {
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("(3 steps in a row; run.nonfinite_steps_allowed is 2)"), std::string::npos) << r.output;
  }
}

TEST(ZeroTrainCliTest, PrintConfigShowsDefaults) {
  Result r = run("--config " + write("run.json", kTinyRun) + " --print-config");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Plain JSON; the derived keys listed under "__derived__".
  nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_NE(std::find(j["__derived__"].begin(), j["__derived__"].end(), "gradient_accumulation_steps"),
            j["__derived__"].end())
      << r.output;
  EXPECT_EQ(j["gradient_clipping"], 1.0);
  EXPECT_EQ(j["gradient_accumulation_steps"], 1);
  EXPECT_EQ(j["optimizer"]["params"]["betas"][1], 0.999);
}

TEST(ZeroTrainCliTest, BackendIsCpuOrCuda) {
  Result r = run("--config " + write("run.json", kTinyRun) + " --backend tpu");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("run.backend: \"tpu\" is not one of \"cpu\", \"cuda\""), std::string::npos) << r.output;
  r = run("--config " + write("run.json", kTinyRun) + " --print-config");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json j = nlohmann::json::parse(r.output, nullptr, true, /*ignore_comments=*/true);
  EXPECT_EQ(j["run"]["backend"], "cpu");
}

// Without a GPU (or in a build without CUDA) --backend cuda stops before
// training with exit 1 and says which; on a GPU machine the same run trains
// on the device.
TEST(ZeroTrainCliTest, BackendCudaSaysWhatIsMissing) {
  Result r = run("--config " + write("run.json", kTinyRun) + " --backend cuda --steps 3");
  if (r.exit_code == 0) {
    EXPECT_NE(r.output.find("backend: cuda:0 ("), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("device memory (driver"), std::string::npos) << r.output;
    return;
  }
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const bool no_device = r.output.find("zero-train: --backend cuda (device 0): ") != std::string::npos &&
                         r.output.find("cudaGetDeviceCount failed") != std::string::npos;
  const bool not_built = r.output.find("built without the CUDA backend") != std::string::npos;
  EXPECT_TRUE(no_device || not_built) << r.output;
  EXPECT_EQ(r.output.find("model:"), std::string::npos) << "nothing should start: " << r.output;
}

// For GPU ranks, offload "cpu" is ZeRO-Offload and "nvme" ZeRO-Infinity: the
// config passes, and the run goes on to look for a device (here: none, or a
// build without CUDA; on a GPU machine it trains), and so does
// cpu_checkpointing. What the host path does not run is refused as a config
// error, before any device is looked for.
TEST(ZeroTrainCliTest, BackendCudaTakesCpuOffloadAndRefusesWhatIsNotBuilt) {
  const std::string config = "--config " + write("run.json", kTinyRun) + " --backend cuda --steps 3";
  const std::pair<std::string, std::string> accepted[] = {
      {" --set zero_optimization.stage=2 --set zero_optimization.offload_optimizer.device=cpu",
       "optimizer state: host memory (ZeRO-Offload)"},
      {" --set zero_optimization.stage=3 --set zero_optimization.offload_optimizer.device=nvme"
       " --set zero_optimization.offload_optimizer.nvme_path=/tmp --set zero_optimization.offload_param.device=nvme"
       " --set zero_optimization.offload_param.nvme_path=/tmp",
       "optimizer step: NVMe, swapped through host memory (ZeRO-Infinity)"},
      {" --set activation_checkpointing.cpu_checkpointing=true --set activation_checkpointing.number_checkpoints=1",
       "cpu_checkpointing: segment inputs in pinned host memory"},
  };
  Result r;
  for (const auto& [args, message] : accepted) {
    r = run(config + args);
    if (r.exit_code == 0) {
      EXPECT_NE(r.output.find(message), std::string::npos) << args << "\n" << r.output;
    } else {
      EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.output;
      EXPECT_EQ(r.output.find("offload_"), std::string::npos) << args << "\n" << r.output;
      EXPECT_EQ(r.output.find("not supported"), std::string::npos) << args << "\n" << r.output;
    }
  }
  const std::pair<std::string, std::string> refused[] = {
      {" --set zero_optimization.stage=0 --set zero_optimization.offload_optimizer.device=cpu",
       "zero_optimization.offload_optimizer.device \"cpu\" needs ZeRO stage 1, 2 or 3 on a device backend"},
      {" --set zero_optimization.stage=3 --set zero_optimization.offload_param.device=cpu",
       "zero_optimization.offload_param.device \"cpu\" needs offload_optimizer.device \"cpu\" too"},
  };
  for (const auto& [args, message] : refused) {
    r = run(config + args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << args << "\n" << r.output;
  }
}

TEST(ZeroTrainCliTest, DropoutRunLearnsAndBadDropoutIsNamed) {
  const std::string metrics = tmp("metrics.jsonl");
  Result r = run("--config " + write("run.json", kTinyRun) + " --set model.dropout=0.1 --metrics " + metrics);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(metrics);
  std::vector<double> losses;
  for (std::string line; std::getline(in, line);) losses.push_back(nlohmann::json::parse(line)["loss"].get<double>());
  ASSERT_EQ(losses.size(), 30u);
  EXPECT_LT(losses.back(), losses.front() - 1.0);

  Result bad = run("--config " + write("run.json", kTinyRun) + " --set model.dropout=1.5");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("model.dropout: 1.5"), std::string::npos) << bad.output;
}

TEST(ZeroTrainCliTest, ShortRunWritesMetricsAndLearns) {
  const std::string metrics = tmp("metrics.jsonl");
  Result r = run("--config " + write("run.json", kTinyRun) + " --metrics " + metrics);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step 10/30 | loss"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("done: 30 steps"), std::string::npos) << r.output;

  std::ifstream in(metrics);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 30u);
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i]["step"], i + 1);
    EXPECT_GT(lines[i]["tokens_per_s"].get<double>(), 0.0);
    EXPECT_GT(lines[i]["grad_norm"].get<double>(), 0.0);
  }
  EXPECT_LT(lines.back()["loss"].get<double>(), lines.front()["loss"].get<double>() - 1.0);
  // Parameters of this model: the exact count times 4 bytes (fp32).
  const int64_t n_params = 256 * 32 + 16 * 32 + 2 * (12 * 32 * 32 + 13 * 32) + 2 * 32;
  const nlohmann::json& host = lines.back()["memory"]["host"];
  EXPECT_EQ(host["parameters"]["current"], 4 * n_params);
  EXPECT_EQ(host["gradients"]["current"], 4 * n_params);
  EXPECT_EQ(host["optimizer_state"]["current"], 8 * n_params);
  EXPECT_GT(host["activations"]["peak"].get<int64_t>(), 0);
  // RSS growth since start vs the bytes our allocators hold: they differ by the
  // text corpus (~300 KB), oneDNN's JIT code and glibc's small-object heap.
  const double growth = lines.back()["rss"].get<double>() - lines.back()["rss_start"].get<double>();
  const double reserved = host["reserved"]["current"].get<double>();
  EXPECT_NEAR(growth, reserved, 0.05 * reserved + 8.0 * 1024 * 1024) << "rss growth " << growth;
}

}  // namespace
