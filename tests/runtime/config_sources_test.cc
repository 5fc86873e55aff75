// Where a layered config's keys came from (ConfigSources, config_reader.h):
// the last file or option that set a key, a whole value set above it, a
// section whose keys share one source; and error messages annotated with it
// only when the config has more than one layer.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "runtime/config/config_reader.h"
#include "runtime/config/run_config.h"

namespace zero {
namespace {

TEST(ConfigSourcesTest, LastLayerThatSetAKeyIsItsSource) {
  ConfigSources s;
  s.record_layer(Json::parse(R"({"model": {"n_layer": 2, "n_head": 2}, "optimizer": {"params": {"lr": 1}}})"), "a.json");
  s.record_layer(Json::parse(R"({"model": {"n_layer": 3}, "optimizer": 5})"), "b.json");
  s.record_override("model.n_head", "--set");
  EXPECT_TRUE(s.layered());
  EXPECT_EQ(s.source_of("model.n_layer"), "b.json");
  EXPECT_EQ(s.source_of("model.n_head"), "--set");
  EXPECT_EQ(s.source_of("model"), "");                   // its keys came from two places
  EXPECT_EQ(s.source_of("optimizer"), "b.json");         // replaced as a whole
  EXPECT_EQ(s.source_of("optimizer.params.lr"), "b.json");  // below a value b.json set
  EXPECT_EQ(s.source_of("bf16.enabled"), "");            // nobody set it
  s.record_override("optimizer.params.lr", "--set");
  EXPECT_EQ(s.source_of("optimizer"), "--set");
}

TEST(ConfigSourcesTest, AnnotatesKeyMessagesOnlyWhenLayered) {
  ConfigSources one;
  one.record_layer(Json::parse(R"({"zero_optimization": {"stage": 7, "stag": 1}})"), "x.json");
  const absl::Status err = absl::InvalidArgumentError("invalid config: zero_optimization.stage: 7 is out of range");
  EXPECT_EQ(one.annotate(err), err);  // one file: it is obvious which
  ConfigSources two = one;
  two.record_override("run.steps", "--steps");
  EXPECT_EQ(std::string(two.annotate(err).message()), "invalid config: x.json: zero_optimization.stage: 7 is out of range");
  const absl::Status many = absl::InvalidArgumentError(
      "invalid config (2 errors):\n  run.steps: expected an integer, got \"x\"\n  unknown key \"zero_optimization.stag\""
      "\n  (warning) zero_optimization.stage: something");
  EXPECT_EQ(std::string(two.annotate(many).message()),
            "invalid config (2 errors):\n  --steps: run.steps: expected an integer, got \"x\"\n  x.json: unknown key "
            "\"zero_optimization.stag\"\n  (warning) x.json: zero_optimization.stage: something");
  EXPECT_EQ(two.annotate("a message about nothing: in particular"), "a message about nothing: in particular");
  EXPECT_EQ(two.annotate(absl::OkStatus()), absl::OkStatus());
}

TEST(ConfigSourcesTest, LoadLayeredConfigRecordsFilesAndOverrides) {
  const std::string dir = ::testing::TempDir();
  const std::string a = dir + "/ConfigSourcesTest.a.json", b = dir + "/ConfigSourcesTest.b.json";
  std::ofstream(a) << R"({"model": {"n_layer": 2}, "run": {"steps": 4}})";
  std::ofstream(b) << R"({"model": {"n_layer": 3}})";
  ConfigSources s;
  absl::StatusOr<Json> j = load_layered_config({a, b}, {{"run.steps=5", "--steps"}}, &s);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ((*j)["model"]["n_layer"], 3);
  EXPECT_EQ((*j)["run"]["steps"], 5);
  EXPECT_EQ(s.source_of("model.n_layer"), b);
  EXPECT_EQ(s.source_of("run.steps"), "--steps");
  // load_merged_config is the same load.
  absl::StatusOr<Json> merged = load_merged_config({a, b}, {"run.steps=5"});
  ASSERT_TRUE(merged.ok());
  EXPECT_EQ(*merged, *j);
}

// --print-config is plain JSON; the derived keys are listed under
// "__derived__", which a config may carry without a warning.
TEST(ConfigSourcesTest, EffectiveConfigIsJsonWithItsDerivedKeys) {
  absl::StatusOr<RunConfig> c = parse_run_config(Json::parse(R"({"train_micro_batch_size_per_gpu": 2})"), {});
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string text = format_effective_config(*c);
  const Json printed = Json::parse(text);  // throws on comments
  ASSERT_TRUE(printed.contains(std::string(kDerivedKeysKey)));
  const Json& derived = printed[std::string(kDerivedKeysKey)];
  EXPECT_NE(std::find(derived.begin(), derived.end(), Json("gradient_accumulation_steps")), derived.end()) << text;
  EXPECT_EQ(printed["gradient_accumulation_steps"], 1);
  absl::StatusOr<RunConfig> again =
      parse_run_config(Json::parse(R"({"train_micro_batch_size_per_gpu": 2, "__derived__": ["x"]})"), {});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->warnings.empty()) << again->warnings.front();
}

}  // namespace
}  // namespace zero
