// Evaluation (data.val_path, run.eval_every, run.eval_steps) as a user sees
// it: the val loss is the mean of the K fixed batches' losses computed one by
// one, the same at every evaluation, identical on 1 and 2 ranks (data,
// tensor or pipeline parallel), and evaluating does not change the training
// losses by a bit; bad keys are refused by name. Also: --resume auto on a finished run says it is complete
// and exits 0, and --peak-tflops puts MFU on the progress line.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "graph/gpt.h"
#include "kernels/cpu/cpu_backend.h"
#include "runtime/config/run_config.h"
#include "runtime/data/data_loader.h"
#include "runtime/tools/evaluation.h"
#include "tests/testing/run_command.h"
#include "tests/testing/test_files.h"

namespace zero {
namespace {

using Result = testing::CommandResult;

std::string tmp(const std::string& name) { return zero::testing::test_path(name); }
std::string write(const std::string& name, const std::string& text) {
  return zero::testing::write_test_file(name, text);
}

// Validation text unlike the training licences.
std::string val_file() {
  std::string text;
  for (int i = 0; i < 400; ++i) text += "validation line " + std::to_string(i * 7919 % 1000) + " of held-out text.\n";
  return write("val.txt", text);
}

const char* kTinyRun = R"({
  "model": {"n_layer": 2, "n_head": 2, "d_model": 32, "vocab_size": 256, "seq_len": 16, "dropout": 0.1},
  "data": {"format": "text", "path": "/usr/share/common-licenses"},
  "run": {"steps": 12},
  "train_batch_size": 8,
  "gradient_accumulation_steps": 2,
  "steps_per_print": 4,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}
})";

Result run(const std::string& args, int ranks = 1) {
  const std::string launcher =
      ranks == 1 ? "" : std::string(ZE_MPIEXEC) + " --allow-run-as-root --oversubscribe -np " + std::to_string(ranks) + " ";
  return testing::run_command("timeout 300 " + launcher + ZE_TRAIN_BIN + " " + args);
}

std::vector<nlohmann::json> metrics(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

// Evaluator against engine.evaluate() on each batch drawn by hand.
TEST(EvaluationTest, ValLossIsTheMeanOfTheFixedBatchesLosses) {
  nlohmann::json j = nlohmann::json::parse(kTinyRun);
  j["data"]["val_path"] = val_file();
  j["run"]["eval_every"] = 4;
  j["run"]["eval_steps"] = 3;
  absl::StatusOr<RunConfig> c = parse_run_config(j, {});
  ASSERT_TRUE(c.ok()) << c.status();
  CpuBackend backend;
  auto engine = Engine::create(std::make_unique<Gpt>(c->model.gpt), c->engine, backend).value();
  auto evaluator = Evaluator::create(*c).value();
  EXPECT_EQ(evaluator->batches(), 3);
  EXPECT_EQ(evaluator->rows_per_batch(), 4);  // micro 4 x 1 rank
  const double val = evaluator->evaluate(*engine).value();

  auto loader = DataLoader::create(open_text_bytes(c->data.val_path).value(), 16, c->data.seed).value();
  std::vector<int32_t> in(4 * 16), tg(4 * 16);
  double sum = 0;
  for (int k = 0; k < 3; ++k) {
    ASSERT_TRUE(loader->fill(k * 4, 4, in.data(), tg.data()).ok());
    sum += engine->evaluate({Tensor::wrap(in.data(), {4, 16}, DType::kI32),
                             Tensor::wrap(tg.data(), {4, 16}, DType::kI32)}).value();
  }
  EXPECT_NEAR(val, sum / 3, 1e-6);
  EXPECT_GT(val, 1.0);  // an untrained byte model: about ln 256
  // Fixed batches, dropout off: the same value again.
  EXPECT_EQ(evaluator->evaluate(*engine).value(), val);
}

TEST(EvaluationTest, EvaluatingDoesNotChangeTrainingAndReportsEverywhere) {
  const std::string config = write("run.json", kTinyRun);
  const std::string plain = tmp("plain.jsonl"), evaluated = tmp("eval.jsonl");
  Result a = run("--config " + config + " --metrics " + plain);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  Result b = run("--config " + config + " --metrics " + evaluated + " --set data.val_path=" + val_file() +
                 " --set run.eval_every=5 --set run.eval_steps=2");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const auto ma = metrics(plain), mb = metrics(evaluated);
  ASSERT_EQ(ma.size(), 12u);
  ASSERT_EQ(mb.size(), 12u);
  for (size_t i = 0; i < ma.size(); ++i) {
    EXPECT_EQ(ma[i]["loss"].get<double>(), mb[i]["loss"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(ma[i]["grad_norm"].get<double>(), mb[i]["grad_norm"].get<double>()) << "step " << i + 1;
    const bool evaluates = (i + 1) % 5 == 0 || i + 1 == 12;
    EXPECT_EQ(mb[i].contains("val_loss"), evaluates) << "step " << i + 1;
    EXPECT_FALSE(ma[i].contains("val_loss"));
  }
  // Steps 5, 10 and the end; the val loss falls as the model learns.
  for (int step : {5, 10, 12}) {
    const double v = mb[step - 1]["val_loss"].get<double>();
    char line[64];
    std::snprintf(line, sizeof(line), "eval: step %d | val loss %.4f", step, v);
    EXPECT_NE(b.output.find(line), std::string::npos) << line << "\n" << b.output;
  }
  EXPECT_LT(mb[11]["val_loss"].get<double>(), mb[4]["val_loss"].get<double>());
  EXPECT_NE(b.output.find("eval: every 5 steps and at the end, the mean loss over 2 fixed batches of 4 sequences"),
            std::string::npos)
      << b.output;
}

// One global micro-batch of 4 rows: 1 rank x micro 4, 2 data-parallel ranks x
// micro 2 (ZeRO stages 0 and 3) and a tensor group of 2 at micro 4 evaluate
// the same rows (each data-parallel rank its half).
TEST(EvaluationTest, ValLossIsTheSameOnOneAndTwoRanks) {
  const std::string config = write("run.json", kTinyRun);
  const std::string val = val_file();
  auto val_loss = [&](int ranks, const std::string& layout) {
    const std::string m = tmp("m.jsonl");
    Result r = run("--config " + config + " --metrics " + m + " --set data.val_path=" + val +
                       " --set run.eval_every=6 --set run.steps=6 " + layout,
                   ranks);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    // Evaluation is not training: stage 3's recorded module order stays.
    EXPECT_EQ(r.output.find("re-recording the trace"), std::string::npos) << layout << "\n" << r.output;
    std::vector<double> losses;
    for (const auto& line : metrics(m)) {
      if (line.contains("val_loss")) losses.push_back(line["val_loss"].get<double>());
    }
    EXPECT_EQ(losses.size(), 1u) << layout;
    return losses.empty() ? -1.0 : losses[0];
  };
  const double one = val_loss(1, "");
  for (const std::string layout : {"--set zero_optimization.stage=0", "--set zero_optimization.stage=3",
                                   "--set tensor_parallel.autotp_size=2"}) {
    EXPECT_NEAR(val_loss(2, layout), one, 1e-6) << layout;
  }
}

TEST(EvaluationTest, BadKeysAreRefusedByName) {
  const std::string config = write("run.json", kTinyRun);
  Result no_val = run("--config " + config + " --set run.eval_every=5");
  EXPECT_EQ(no_val.exit_code, 2);
  EXPECT_NE(no_val.output.find("run.eval_every"), std::string::npos) << no_val.output;
  EXPECT_NE(no_val.output.find("needs data.val_path"), std::string::npos) << no_val.output;

  Result missing = run("--config " + config + " --set run.eval_every=5 --set data.val_path=" + tmp("absent.txt"));
  EXPECT_EQ(missing.exit_code, 2) << missing.output;  // a bad path is bad input, found before anything is built
  EXPECT_NE(missing.output.find("data.val_path: " + tmp("absent.txt") + " does not exist"), std::string::npos)
      << missing.output;

  Result zero_steps = run("--config " + config + " --set run.eval_steps=0 --set data.val_path=" + val_file());
  EXPECT_EQ(zero_steps.exit_code, 2);
  EXPECT_NE(zero_steps.output.find("eval_steps"), std::string::npos) << zero_steps.output;
}

// pipeline.stages 2 on 2 ranks (ZeRO 0 under 1F1B, ZeRO 1 under GPipe): the
// val loss in --metrics is the one-rank run's without stages within 1e-5
// relative, rank 0 (the first stage, which never sees the logits) prints
// it, and the training losses and gradient norms are bit for bit those of
// the same pipelined run without evaluation.
TEST(EvaluationTest, ValLossWithTwoPipelineStagesIsOneRanks) {
  const std::string config = write("run.json", kTinyRun);
  const std::string evaluate = " --set data.val_path=" + val_file() + " --set run.eval_every=3";
  auto run_metrics = [&](int ranks, const std::string& args, std::string* output = nullptr) {
    const std::string m = tmp("pp.jsonl");
    std::filesystem::remove(m);
    Result r = run("--config " + config + " --metrics " + m + " --set run.steps=6" + args, ranks);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    if (output != nullptr) *output = r.output;
    return metrics(m);
  };
  const auto one = run_metrics(1, evaluate);
  ASSERT_EQ(one.size(), 6u);
  for (const std::string layout : {" --set pipeline.stages=2",
                                   " --set pipeline.stages=2 --set pipeline.schedule=gpipe "
                                   "--set zero_optimization.stage=1"}) {
    std::string printed;
    const auto two = run_metrics(2, evaluate + layout, &printed);
    const auto plain = run_metrics(2, layout);
    ASSERT_EQ(two.size(), 6u) << layout << "\n" << printed;
    ASSERT_EQ(plain.size(), 6u) << layout;
    for (size_t i = 0; i < 6; ++i) {
      const bool evaluates = (i + 1) % 3 == 0;
      ASSERT_EQ(two[i].contains("val_loss"), evaluates) << layout << " step " << i + 1;
      EXPECT_EQ(two[i]["loss"].get<double>(), plain[i]["loss"].get<double>()) << layout << " step " << i + 1;
      EXPECT_EQ(two[i]["grad_norm"].get<double>(), plain[i]["grad_norm"].get<double>()) << layout << " step " << i + 1;
      if (!evaluates) continue;
      const double want = one[i]["val_loss"].get<double>(), got = two[i]["val_loss"].get<double>();
      EXPECT_NEAR(got, want, 1e-5 * want) << layout << " step " << i + 1;
      char line[64];
      std::snprintf(line, sizeof(line), "eval: step %d | val loss %.4f", static_cast<int>(i + 1), got);
      EXPECT_NE(printed.find(line), std::string::npos) << line << "\n" << printed;
    }
    EXPECT_LT(two[5]["val_loss"].get<double>(), two[2]["val_loss"].get<double>()) << layout;
  }
}

TEST(EvaluationTest, ResumeAutoOnAFinishedRunSaysItIsComplete) {
  const std::string config = write("run.json", kTinyRun);
  const std::string dir = tmp("ckpt");
  std::filesystem::remove_all(dir);
  Result first = run("--config " + config + " --steps 3 --save-dir " + dir);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  Result again = run("--config " + config + " --steps 3 --save-dir " + dir + " --resume auto");
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("run already complete: " + dir + "/"), std::string::npos) << again.output;
  EXPECT_NE(again.output.find("is at step 3 and run.steps is 3; nothing to do"), std::string::npos) << again.output;
  EXPECT_EQ(again.output.find("done:"), std::string::npos) << again.output;
  EXPECT_EQ(again.output.find("0.0000 -> 0.0000"), std::string::npos) << again.output;
}

TEST(EvaluationTest, PeakTflopsGivesMfu) {
  const std::string config = write("run.json", kTinyRun);
  Result r = run("--config " + config + " --steps 4 --peak-tflops 0.5");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("MFU against 0.5 TFLOP/s per rank"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("TFLOP/s MFU "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("samples/s"), std::string::npos) << r.output;
  Result bad = run("--config " + config + " --steps 4 --peak-tflops -1");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("run.peak_tflops"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace zero
