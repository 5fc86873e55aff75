// model.freeze from the command line: zero-train freezes the parameters the
// patterns name (the parameters line counts them, and the checkpoint's frozen
// tensors are the initial ones after steps at lr > 0), a pattern that matches
// nothing is a usage error naming it, and zero-estimate plans no optimizer
// state for what is frozen.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/testing/run_command.h"
#include "tests/testing/test_files.h"

namespace {

using Result = zero::testing::CommandResult;

Result train(const std::string& args) { return zero::testing::run_command(std::string(ZE_TRAIN_BIN) + " " + args); }
Result estimate(const std::string& args) {
  return zero::testing::run_command(std::string(ZE_ESTIMATE_BIN) + " " + args);
}

// GPT-2 shaped, 2 blocks of width 32, 256 tokens, 16 positions.
const char* kTinyRun = R"({
  "model": {"n_layer": 2, "n_head": 2, "d_model": 32, "vocab_size": 256, "seq_len": 16},
  "data": {"format": "text", "path": "/usr/share/common-licenses"},
  "run": {"steps": 3},
  "train_micro_batch_size_per_gpu": 4,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0}}
})";

const std::string kFreeze = R"( --set 'model.freeze=["wte\\.weight","h\\.0\\..*"]')";

// The tensors of a safetensors file, by name, as their raw bytes.
std::map<std::string, std::string> read_safetensors(const std::string& path) {
  const std::string bytes = zero::testing::read_file(path);
  std::map<std::string, std::string> out;
  if (bytes.size() < 8) return out;
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, header_size));
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    const uint64_t begin = info["data_offsets"][0], end = info["data_offsets"][1];
    out[name] = bytes.substr(8 + header_size + begin, end - begin);
  }
  return out;
}

// Trains `steps` steps at `lr` with the freeze, saves, and exports the
// checkpoint as a Hugging Face directory; returns its tensors.
std::map<std::string, std::string> trained_tensors(const std::string& name, int steps, const std::string& lr,
                                                   std::string* output) {
  const std::string ckpt = zero::testing::fresh_test_path(name + ".ckpt");
  const std::string out = zero::testing::fresh_test_path(name + ".export");
  const Result r = train("--config " + zero::testing::write_test_file("freeze.json", kTinyRun) + kFreeze +
                         " --steps " + std::to_string(steps) + " --set optimizer.params.lr=" + lr + " --save-dir " +
                         ckpt);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  *output = r.output;
  const Result c = zero::testing::run_command(std::string(ZE_CKPT_BIN) + " consolidate " + ckpt +
                                              " --format hf --out " + out);
  EXPECT_EQ(c.exit_code, 0) << c.output;
  return read_safetensors(out + "/model.safetensors");
}

TEST(FreezeCliTest, FrozenParametersKeepTheirInitialWeights) {
  std::string untrained_output, trained_output;
  const auto initial = trained_tensors("freeze_lr0", 1, "0", &untrained_output);
  const auto trained = trained_tensors("freeze_lr", 3, "0.01", &trained_output);
  // Frozen: the token table (8192) and block 0 (ln_1 64, c_attn 3168,
  // attn c_proj 1056, ln_2 64, c_fc 4224, mlp c_proj 4128: 12704).
  std::smatch m;
  ASSERT_TRUE(std::regex_search(trained_output, m, std::regex(R"(parameters: (\d+) \((\d+) trainable, (\d+) frozen\))")))
      << trained_output;
  const int64_t total = std::stoll(m[1]), trainable = std::stoll(m[2]), frozen = std::stoll(m[3]);
  EXPECT_EQ(frozen, 8192 + 12704) << trained_output;
  EXPECT_EQ(total, trainable + frozen);
  EXPECT_EQ(trainable, 512 + 12704 + 64) << trained_output;  // wpe, block 1, ln_f
  ASSERT_FALSE(initial.empty());
  ASSERT_EQ(initial.size(), trained.size());
  const std::regex frozen_name(R"((^|.*\.)(wte\.weight|h\.0\..*))");
  int frozen_seen = 0, changed = 0;
  for (const auto& [name, bytes] : initial) {
    ASSERT_TRUE(trained.count(name)) << name;
    if (std::regex_match(name, frozen_name)) {
      EXPECT_EQ(bytes, trained.at(name)) << name << " is frozen and changed";
      ++frozen_seen;
    } else if (bytes != trained.at(name)) {
      ++changed;
    }
  }
  EXPECT_GE(frozen_seen, 2);
  EXPECT_GT(changed, 0) << "nothing trained";
}

TEST(FreezeCliTest, APatternThatMatchesNothingIsAUsageErrorNamingIt) {
  const std::string config = zero::testing::write_test_file("freeze.json", kTinyRun);
  Result r = train("--config " + config + R"( --set 'model.freeze=["wte\\.weight","h\\.9\\..*"]')");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(R"(model.freeze: freeze pattern "h\.9\..*" matches no parameter)"), std::string::npos)
      << r.output;
  // Not a list, or not strings: the key is named.
  r = train("--config " + config + R"( --set 'model.freeze="wte"')");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("model.freeze: expected a list of strings"), std::string::npos) << r.output;
  r = train("--config " + config + R"( --set 'model.freeze=[1]')");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("model.freeze: expected a list of strings"), std::string::npos) << r.output;
  r = train("--config " + config + R"( --set 'model.freeze=["h\\.0\\.("]')");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("is not a regular expression"), std::string::npos) << r.output;
}

// Hugging Face's q_proj (and gate_proj, up_proj) are fused in the Llama
// family here: a pattern naming them gets the fused name to freeze instead.
TEST(FreezeCliTest, APatternOnAFusedProjectionNamesTheFusedOne) {
  const std::string config = zero::testing::write_test_file("freeze-llama.json", R"({
    "model": {"arch": "llama", "n_layer": 2, "n_head": 4, "n_kv_head": 2, "d_model": 32, "d_ff": 64,
              "vocab_size": 256, "seq_len": 16},
    "data": {"format": "text", "path": "/usr/share/common-licenses"},
    "run": {"steps": 1}, "train_micro_batch_size_per_gpu": 2})");
  Result r = train("--config " + config + R"( --set 'model.freeze=["layers\\.0\\.self_attn\\.q_proj\\.weight"]')");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("are one fused self_attn.qkv_proj here"), std::string::npos) << r.output;
  r = train("--config " + config + R"( --set 'model.freeze=[".*\\.up_proj\\..*"]')");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("are one fused mlp.gate_up_proj here"), std::string::npos) << r.output;
  // The fused name freezes.
  r = train("--config " + config + R"( --set 'model.freeze=[".*\\.qkv_proj\\..*"]')");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(FreezeCliTest, EstimatePlansOptimizerStateForTrainableParametersOnly) {
  const std::string config = zero::testing::write_test_file("freeze.json", kTinyRun);
  const Result all = estimate("--config " + config + " --world 1 --json");
  const Result some = estimate("--config " + config + kFreeze + " --world 1 --json");
  ASSERT_EQ(all.exit_code, 0) << all.output;
  ASSERT_EQ(some.exit_code, 0) << some.output;
  const nlohmann::json a = nlohmann::json::parse(all.output)["ranks"][0];
  const nlohmann::json s = nlohmann::json::parse(some.output)["ranks"][0];
  const int64_t a_opt = a["after_init"]["host"]["optimizer_state"], s_opt = s["after_init"]["host"]["optimizer_state"];
  EXPECT_GT(a_opt, 0);
  EXPECT_LT(s_opt, a_opt);
  EXPECT_EQ(s["trainable_parameters"], 512 + 12704 + 64);
  EXPECT_EQ(a["trainable_parameters"], a["num_parameters"]);
  const Result bad = estimate("--config " + config + R"( --set 'model.freeze=["h\\.9\\..*"]' --world 1)");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find(R"(model.freeze: freeze pattern "h\.9\..*" matches no parameter)"), std::string::npos) << bad.output;
}

}  // namespace
