// A config is user input: whatever it holds, zero-train answers with exit
// status 0, 1 or 2 and a message, never a signal, an abort, an uncaught
// exception or a hang. The corpus is generated from the schema itself: every
// key zero-train reads (the leaves of --print-config over several ready
// configs: every ZeRO stage, fp16, bf16, offload to CPU and NVMe, each
// scheduler) gets a value of the wrong type or an extreme number (0, -1,
// 0.5, 1e15, 1e308, 2^63, -2^63, a string, an object, a list, null), chosen
// deterministically per key, layered over the config it came from; then runs
// that change three keys at once; then the hostile files a parser must
// survive (100,000-deep nesting, a number past double, a 10 MB line). Each
// run is one step of a tiny GPT under a 60 s timeout.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "tests/testing/run_command.h"

namespace {

using nlohmann::json;
const std::string kSource = ZE_SOURCE_DIR;

// The configs whose keys make the schema (each layered on configs/small-gpt.json).
const std::vector<std::string> kBases = {
    "configs/ds/zero3-bf16.json",          "configs/ds/zero1-fp16.json",
    "configs/ds/zero2-cpu-offload.json",   "configs/ds/zero3-nvme-optimizer.json",
    "configs/ds/scheduler-warmup-cosine.json", "configs/ds/scheduler-onecycle-sgd.json",
    "configs/ds/scheduler-warmup-decay.json",  "configs/ds/scheduler-lr-range-test.json"};

const std::vector<json>& mutations() {
  static const std::vector<json> kAll = {
      json(0), json(-1), json(0.5), json(-0.5), json(1e15), json(-1e15), json(1e308),
      json(static_cast<uint64_t>(1) << 63), json(INT64_MIN), json("x"), json::object({{"a", 1}}),
      json::array({1, 2}), json(nullptr), json(true)};
  return kAll;
}

std::string tmp(const std::string& name) { return ::testing::TempDir() + "/config_fuzz." + name; }

// A swap directory, for the NVMe base.
std::string swap_dir() {
  const std::string d = tmp("swap");
  std::filesystem::create_directories(d);
  return d;
}

zero::testing::CommandResult train(const std::string& base, const std::string& extra_args) {
  return zero::testing::run_command("cd " + kSource + " && timeout 60 " + ZE_TRAIN_BIN +
                                    " --config configs/small-gpt.json --config " + base +
                                    " --set zero_optimization.offload_optimizer.nvme_path=" + swap_dir() + " " +
                                    extra_args);
}

// The leaves of a JSON object, as key paths.
void leaves(const json& j, const std::string& prefix, std::vector<std::string>& out) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string path = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (it.value().is_object() && !it.value().empty()) leaves(it.value(), path, out);
    else out.push_back(path);
  }
}

json overlay(const std::vector<std::pair<std::string, json>>& changes) {
  json o = json::object();
  for (const auto& [path, value] : changes) {
    json* node = &o;
    size_t start = 0;
    for (size_t dot; (dot = path.find('.', start)) != std::string::npos; start = dot + 1) {
      json& child = (*node)[path.substr(start, dot - start)];
      if (!child.is_object()) child = json::object();
      node = &child;
    }
    (*node)[path.substr(start)] = value;
  }
  return o;
}

// What a user must see: an exit status of 0, 1 or 2, and for 1 and 2 a
// message from zero-train; never a signal (the shell reports 128 + n), an
// abort, an uncaught exception or a timeout (124).
void expect_answer(const zero::testing::CommandResult& r, const std::string& what) {
  EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 1 || r.exit_code == 2)
      << what << ": exit " << r.exit_code << "\n" << r.output.substr(0, 2000);
  if (r.exit_code == 1 || r.exit_code == 2) {
    EXPECT_NE(r.output.find("zero-train"), std::string::npos) << what << ": no message\n" << r.output.substr(0, 2000);
  }
  EXPECT_EQ(r.output.find("internal error"), std::string::npos) << what << "\n" << r.output.substr(0, 2000);
  EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << what << "\n" << r.output.substr(0, 2000);
}

// Every key of the schema, with the base config it was read from.
std::map<std::string, std::string> schema() {
  std::map<std::string, std::string> keys;
  for (const std::string& base : kBases) {
    const auto r = train(base, "--print-config");
    EXPECT_EQ(r.exit_code, 0) << base << "\n" << r.output;
    const size_t open = r.output.find('{');
    if (r.exit_code != 0 || open == std::string::npos) continue;
    const json printed = json::parse(r.output.substr(open), nullptr, /*allow_exceptions=*/false,
                                     /*ignore_comments=*/true);
    EXPECT_FALSE(printed.is_discarded()) << base;
    std::vector<std::string> paths;
    leaves(printed, "", paths);
    std::erase(paths, "__derived__");  // --print-config's list of derived keys, not a key
    for (const std::string& p : paths) keys.emplace(p, base);
  }
  return keys;
}

TEST(ConfigFuzzTest, EveryKeyWithABadValueGetsAnAnswer) {
  const std::map<std::string, std::string> keys = schema();
  EXPECT_GT(keys.size(), 100u) << "the schema has more keys than that";
  const std::string file = tmp("one.json");
  size_t i = 0, refused = 0;
  for (const auto& [path, base] : keys) {
    if (path == "run.steps" || path == "run.backend") continue;  // --steps 1 overrides it; cuda is its own test
    const json& value = mutations()[std::hash<std::string>{}(path) % mutations().size()];
    std::ofstream(file) << overlay({{path, value}}).dump();
    const auto r = train(base, "--config " + file + " --steps 1");
    expect_answer(r, path + " = " + value.dump());
    refused += r.exit_code != 0;
    ++i;
  }
  EXPECT_GT(refused, i / 2) << "most of these values are wrong for their keys";
}

TEST(ConfigFuzzTest, ThreeBadKeysAtOnceGetAnAnswer) {
  const std::map<std::string, std::string> keys = schema();
  std::vector<std::pair<std::string, std::string>> all(keys.begin(), keys.end());
  std::mt19937 rng(20261201);
  const std::string file = tmp("three.json");
  for (int run = 0; run < 30; ++run) {
    const std::string base = kBases[rng() % kBases.size()];
    std::vector<std::pair<std::string, json>> changes;
    for (int k = 0; k < 3; ++k) {
      const std::string& path = all[rng() % all.size()].first;
      if (path == "run.steps" || path == "run.backend") continue;
      changes.emplace_back(path, mutations()[rng() % mutations().size()]);
    }
    const json o = overlay(changes);
    std::ofstream(file) << o.dump();
    expect_answer(train(base, "--config " + file + " --steps 1"), o.dump());
  }
}

TEST(ConfigFuzzTest, HostileFilesAreRefusedByName) {
  const std::string deep = tmp("deep.json"), huge = tmp("huge.json"), big_number = tmp("number.json");
  {
    std::ofstream f(deep);
    for (int i = 0; i < 100000; ++i) f << "{\"a\":";
    f << 1;
    for (int i = 0; i < 100000; ++i) f << '}';
  }
  std::ofstream(big_number) << R"({"gradient_clipping": 1e999})";
  std::ofstream(huge) << R"({"x": ")" << std::string(10 << 20, 'a') << R"(", ,})";
  for (const auto& [file, want] : std::vector<std::pair<std::string, std::string>>{
           {deep, "nested more than 64 levels deep"},
           {big_number, "number overflow parsing '1e999'"},
           {huge, "invalid JSON"}}) {
    const auto r = train("configs/ds/zero3-bf16.json", "--config " + file + " --steps 1");
    EXPECT_EQ(r.exit_code, 2) << file << "\n" << r.output.substr(0, 2000);
    EXPECT_NE(r.output.find(want), std::string::npos) << r.output.substr(0, 2000);
    EXPECT_LT(r.output.size(), 4096u) << "a message quotes a window of the line, not 10 MB";
  }
}

}  // namespace
