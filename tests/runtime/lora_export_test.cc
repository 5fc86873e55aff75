// LoRA checkpoints out of zero-ckpt, as a user exports them: a tiny GPT-2
// and a tiny Llama from tests/data/hf, fine-tuned with LoRA by zero-train for
// a few steps at lr > 0, then
//  * --format peft: a PEFT adapter directory whose tensor names and shapes
//    are exactly those PEFT itself wrote for the same LoRA config
//    (tests/data/lora/<model>/trained, made by make_lora_golden.py), whose
//    values are the checkpoint's adapters bit for bit (never transposed, not
//    even GPT-2's), with an adapter_config.json that reads back as the run's
//    LoRA config and the tokenizer files the run started from;
//  * --format hf: the merged model (PEFT's merge_and_unload): each adapted
//    weight W + scaling B A (checked against the product recomputed here in
//    double), every other tensor the checkpoint's bit for bit, no adapter
//    tensor; the frozen base weights are still the source's;
//  * --format safetensors: every parameter, the adapters included;
//  * an adapter PEFT wrote, loaded with model.lora.init_from and trained at
//    lr 0, exports as PEFT's file bit for bit;
//  * refusals: --format peft of a run without LoRA names the reason, an
//    existing non-empty --out is left as it was.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "graph/lora.h"
#include "runtime/checkpoint/hf_weights.h"
#include "runtime/config/hf_config.h"
#include "runtime/config/json_file.h"
#include "runtime/config/peft_config.h"
#include "runtime/data/token_source.h"
#include "tests/testing/hf_files.h"
#include "tests/testing/run_command.h"
#include "tests/testing/test_files.h"

namespace zero {
namespace {

namespace fs = std::filesystem;
using testing::CommandResult;
const std::string kSource = ZE_SOURCE_DIR;
constexpr std::string_view kPeftPrefix = "base_model.model.";

// One model of the test and the LoRA config of its PEFT golden
// (tests/data/lora/README.md).
struct LoraCase {
  std::string model;      // tests/data/hf/<model>, tests/data/lora/<model>
  std::string lora_json;  // the "model.lora" section
  std::set<std::string> target_modules;
  double lora_alpha;
  float scaling;          // lora_alpha / r, or / sqrt(r) with use_rslora
  bool gpt2;
};

const LoraCase kGpt2{"gpt2",
                     R"({"r": 4, "lora_alpha": 16, "use_rslora": true, "target_modules": ["c_attn", "c_proj", "c_fc"]})",
                     {"c_attn", "c_proj", "c_fc"}, 16.0, 8.0f, true};
const LoraCase kLlama{"llama",
                      R"({"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj",
                          "gate_proj", "up_proj", "down_proj"]})",
                      {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}, 8.0, 2.0f, false};

std::string hf_dir(const std::string& model) { return kSource + "/tests/data/hf/" + model; }
std::string lora_dir(const std::string& model) { return kSource + "/tests/data/lora/" + model; }

// An llm.c shard of tokens below `vocab` (the golden models' vocabularies are small).
std::string token_file(int64_t vocab) {
  const std::string path = testing::test_path("tokens" + std::to_string(vocab) + ".bin");
  std::vector<uint16_t> tokens(20000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>((i * 7 + i / 16 * 3) % vocab);
  EXPECT_TRUE(write_llmc_shard(path, tokens).ok());
  return path;
}

CommandResult ckpt_tool(const std::string& args) { return testing::run_command(std::string(ZE_CKPT_BIN) + " " + args); }

// A copy of tests/data/hf/<model> with tokenizer files and a
// generation_config.json beside it, as a hub directory has them.
std::string source_with_tokenizer(const std::string& model) {
  const std::string dir = testing::fresh_test_dir(model + ".source");
  for (const auto& e : fs::directory_iterator(hf_dir(model))) {
    if (e.path().filename() != "golden.safetensors") fs::copy_file(e.path(), dir + "/" + e.path().filename().string());
  }
  std::ofstream(dir + "/tokenizer.json") << R"({"version": "1.0", "added_tokens": [{"id": 1, "content": "<s>"}]})";
  std::ofstream(dir + "/tokenizer_config.json") << R"({"bos_token": "<s>", "eos_token": "</s>"})";
  std::ofstream(dir + "/generation_config.json") << R"({"bos_token_id": 1, "eos_token_id": 2})";
  return dir;
}

// zero-train from `source` with the case's LoRA (plus `extra`), `steps`
// steps at `lr`, saved in the returned checkpoint directory.
std::string train(const LoraCase& c, const std::string& source, const std::string& name, int steps,
                  const std::string& lr, const std::string& extra = "") {
  const GptConfig config = gpt_config_from_hf(load_json_file(source + "/config.json").value(), source).value();
  const std::string ckpt = testing::fresh_test_path(name + ".ckpt");
  const std::string lora = testing::write_test_file(name + ".lora.json", R"({"model": {"lora": )" + c.lora_json + "}}");
  const CommandResult r = testing::run_command(
      "cd " + kSource + " && timeout 300 " + ZE_TRAIN_BIN + " --config configs/ds/fp32-adamw.json --config " + lora +
      " --init-from " + source + " --set model.seq_len=16 --set data.format=llmc --set data.path=" +
      token_file(config.vocab_size) + " --set optimizer.params.lr=" + lr +
      " --set optimizer.params.weight_decay=0 --steps " + std::to_string(steps) + " --save-dir " + ckpt + " " + extra);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return ckpt;
}

// The model and adapters a checkpoint of the case holds.
GptConfig lora_model(const LoraCase& c, const std::string& source) {
  GptConfig g = gpt_config_from_hf(load_json_file(source + "/config.json").value(), source).value();
  g.lora = lora_config_from_peft(load_json_file(lora_dir(c.model) + "/trained/adapter_config.json").value(),
                                 "golden adapter_config.json")
               .value();
  return g;
}

// A tensor's values (any stored float dtype, as fp32).
std::vector<float> values(const HfWeights& w, const HfTensor& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  std::vector<float> out(static_cast<size_t>(n));
  const absl::Status s = w.read(t, 0, n, out.data());
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

// The shape of each tensor, by name.
std::map<std::string, std::vector<int64_t>> shapes(const HfWeights& w) {
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& [name, t] : w.tensors()) out[name] = std::vector<int64_t>(t.shape.begin(), t.shape.end());
  return out;
}

HfWeights open_weights(const std::string& path) {
  absl::StatusOr<HfWeights> w = HfWeights::open(path);
  EXPECT_TRUE(w.ok()) << w.status();
  return std::move(w).value();
}

// Trains the case with LoRA at lr > 0 and checks its three exports.
void expect_lora_exports(const LoraCase& c) {
  SCOPED_TRACE(c.model);
  const std::string source = source_with_tokenizer(c.model);
  const std::string ckpt = train(c, source, c.model, 3, "0.01");
  const GptConfig config = lora_model(c, source);
  const std::string ours_file = testing::fresh_test_path(c.model + ".ours.safetensors");
  const std::string adapter = testing::fresh_test_path(c.model + ".adapter");
  const std::string merged = testing::fresh_test_path(c.model + ".merged");
  for (const std::string& args : {" --out " + ours_file, " --format peft --out " + adapter,
                                   " --format hf --out " + merged}) {
    const CommandResult r = ckpt_tool("consolidate " + ckpt + args);
    ASSERT_EQ(r.exit_code, 0) << args << "\n" << r.output;
  }

  // --format safetensors: every parameter of the model, the adapters included, under our names.
  const HfWeights ours = open_weights(ours_file);
  std::set<std::string> want_params, got_params, adapted;  // adapted: the modules with adapters
  for (const auto& [name, shape] : gpt_parameter_shapes(config)) {
    want_params.insert(name);
    std::string module;
    if (is_lora_parameter(name, &module)) adapted.insert(module);
  }
  for (const auto& [name, t] : ours.tensors()) got_params.insert(name);
  EXPECT_EQ(got_params, want_params);
  ASSERT_EQ(adapted.size(), static_cast<size_t>(config.n_layer) * c.target_modules.size() +
                                (c.gpt2 ? static_cast<size_t>(config.n_layer) : 0))  // c_proj: attn's and mlp's
      << "the adapted layers";

  // --format peft: PEFT's names and shapes, exactly those of the adapter PEFT wrote.
  const HfWeights peft = open_weights(adapter + "/" + kPeftAdapterFile);
  const HfWeights golden = open_weights(lora_dir(c.model) + "/trained/" + kPeftAdapterFile);
  EXPECT_EQ(shapes(peft), shapes(golden)) << "the adapter file's tensors are not those PEFT writes";
  EXPECT_EQ(peft.metadata(0), Json({{"format", "pt"}}));
  int trained_b = 0;
  for (const auto& [name, t] : peft.tensors()) {
    EXPECT_EQ(t.dtype, "F32") << name;
    ASSERT_EQ(name.rfind(kPeftPrefix, 0), 0u) << name;
    const std::string param = ours_from_hf_tensor_name(config, name.substr(kPeftPrefix.size()));
    ASSERT_TRUE(ours.tensors().count(param)) << name << " is not the checkpoint's " << param;
    const HfTensor& o = ours.tensors().at(param);
    EXPECT_EQ(o.shape, t.shape) << name << ": transposed?";
    EXPECT_TRUE(testing::hf_raw_bytes(peft, t) == testing::hf_raw_bytes(ours, o))
        << name << " is not the checkpoint's " << param << " bit for bit";
    if (name.find(".lora_B.") != std::string::npos) {
      const std::vector<float> b = values(peft, t);
      trained_b += std::any_of(b.begin(), b.end(), [](float v) { return v != 0.0f; });
    }
  }
  EXPECT_GT(trained_b, 0) << "every lora_B is still zero: the adapters did not train";
  const Json adapter_config = load_json_file(adapter + "/" + kPeftConfigFile).value();
  EXPECT_EQ(adapter_config["peft_type"], "LORA");
  EXPECT_EQ(adapter_config["r"], 4);
  EXPECT_EQ(adapter_config["lora_alpha"].get<double>(), c.lora_alpha);
  EXPECT_EQ(adapter_config["fan_in_fan_out"], c.gpt2);
  EXPECT_EQ(adapter_config["use_rslora"], c.gpt2);
  EXPECT_EQ(adapter_config["bias"], "none");
  EXPECT_EQ(adapter_config["task_type"], "CAUSAL_LM");
  EXPECT_EQ(adapter_config["target_modules"].get<std::set<std::string>>(), c.target_modules);
  absl::StatusOr<LoraConfig> read_back = lora_config_from_peft(adapter_config, adapter);
  ASSERT_TRUE(read_back.ok()) << read_back.status();
  EXPECT_EQ(read_back->scaling(), c.scaling);
  // The tokenizer files byte for byte; not the base model's generation config.
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
    EXPECT_EQ(testing::read_file(adapter + "/" + f), testing::read_file(source + "/" + f)) << f;
  }
  EXPECT_FALSE(fs::exists(adapter + "/generation_config.json"));

  // --format hf: the merged model.
  const HfWeights hf = open_weights(merged);
  const HfWeights base = open_weights(source);
  std::set<std::string> want_hf, got_hf;
  for (const std::string& p : want_params) {
    if (!is_lora_parameter(p)) want_hf.insert(hf_tensor_name(config, p));
  }
  for (const auto& [name, t] : hf.tensors()) got_hf.insert(name);
  EXPECT_EQ(got_hf, want_hf) << "the merged model's tensors are not the base model's";
  int merged_count = 0;
  for (const auto& [name, t] : hf.tensors()) {
    const std::string param = ours_from_hf_tensor_name(config, name);
    ASSERT_TRUE(ours.tensors().count(param)) << name;
    const HfTensor& o = ours.tensors().at(param);
    ASSERT_EQ(t.shape, o.shape) << name;  // GPT-2's Conv1D [in, out] in both
    // The frozen base weight is the source's, bit for bit.
    const std::string base_name = base.tensors().count(name) ? name : param;  // GPT-2's hub names lack "transformer."
    ASSERT_TRUE(base.tensors().count(base_name)) << name;
    const std::vector<float> w = values(ours, o), w0 = values(base, base.tensors().at(base_name));
    EXPECT_EQ(std::memcmp(w.data(), w0.data(), w.size() * 4), 0) << param << " is frozen and changed";
    const std::string module = param.substr(0, param.size() - std::string(".weight").size());
    if (!adapted.count(module)) {
      EXPECT_TRUE(testing::hf_raw_bytes(hf, t) == testing::hf_raw_bytes(ours, o)) << name << " is not the checkpoint's";
      continue;
    }
    // W' = W + scaling B A, in our [out, in] (GPT-2's Conv1D stores [in, out]).
    ++merged_count;
    const std::vector<float> got = values(hf, t);
    const std::vector<float> a = values(ours, ours.tensors().at(lora_a_name(module)));
    const std::vector<float> b = values(ours, ours.tensors().at(lora_b_name(module)));
    const bool transposed = hf_stores_transposed(config, param);
    const int64_t out = transposed ? t.shape[1] : t.shape[0], in = transposed ? t.shape[0] : t.shape[1], r = 4;
    std::vector<double> want(w.size());
    double largest = 0.0, delta_largest = 0.0;
    for (int64_t i = 0; i < out; ++i) {
      for (int64_t j = 0; j < in; ++j) {
        double ba = 0.0;
        for (int64_t k = 0; k < r; ++k) ba += double(b[i * r + k]) * a[k * in + j];
        const size_t at = static_cast<size_t>(transposed ? j * out + i : i * in + j);
        want[at] = w[at] + double(c.scaling) * ba;
        largest = std::max(largest, std::abs(want[at]));
        delta_largest = std::max(delta_largest, std::abs(double(c.scaling) * ba));
      }
    }
    double worst = 0.0;
    for (size_t k = 0; k < want.size(); ++k) worst = std::max(worst, std::abs(got[k] - want[k]));
    EXPECT_LE(worst, 1e-6 * largest) << name << ": not W + scaling B A";
    EXPECT_GT(delta_largest, 1e-4 * largest) << name << ": the adapter adds nothing to merge";
  }
  EXPECT_EQ(merged_count, static_cast<int>(adapted.size()));

  // inspect names the adapters.
  const CommandResult inspect = ckpt_tool("inspect " + ckpt);
  EXPECT_EQ(inspect.exit_code, 0) << inspect.output;
  EXPECT_NE(inspect.output.find("LoRA adapters: r 4, lora_alpha " + std::to_string(static_cast<int>(c.lora_alpha)) +
                                ", target_modules ["),
            std::string::npos)
      << inspect.output;
}

TEST(LoraExportTest, Gpt2AdaptersExportAsPeftAndMergeIntoTheConv1DWeights) { expect_lora_exports(kGpt2); }

TEST(LoraExportTest, LlamaAdaptersExportAsPeftAndMergeIntoTheirWeights) { expect_lora_exports(kLlama); }

// The adapters PEFT trained, loaded with model.lora.init_from and trained at
// lr 0, come back as PEFT's file: the same names, shapes and bytes.
TEST(LoraExportTest, AnAdapterPeftWroteComesBackBitForBit) {
  for (const LoraCase& c : {kGpt2, kLlama}) {
    SCOPED_TRACE(c.model);
    const std::string trained = lora_dir(c.model) + "/trained";
    const std::string ckpt =
        train(c, hf_dir(c.model), c.model + ".init", 1, "0", "--set model.lora.init_from=" + trained);
    const std::string adapter = testing::fresh_test_path(c.model + ".init.adapter");
    const CommandResult r = ckpt_tool("consolidate " + ckpt + " --format peft --out " + adapter);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    testing::expect_same_hf_tensors(open_weights(adapter + "/" + kPeftAdapterFile),
                                    open_weights(trained + "/" + kPeftAdapterFile), c.model);
  }
}

TEST(LoraExportTest, WhatCannotBeExportedIsRefusedAndNothingIsOverwritten) {
  // A run without LoRA has no adapters to export.
  const GptConfig gpt2 = gpt_config_from_hf(load_json_file(hf_dir("gpt2") + "/config.json").value(), "gpt2").value();
  const std::string plain = testing::fresh_test_path("plain.ckpt");
  CommandResult r = testing::run_command(
      "cd " + kSource + " && timeout 300 " + ZE_TRAIN_BIN + " --config configs/ds/fp32-adamw.json --init-from " +
      hf_dir("gpt2") + " --set model.seq_len=16 --set data.format=llmc --set data.path=" +
      token_file(gpt2.vocab_size) + " --steps 1 --save-dir " + plain);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string none = testing::fresh_test_path("plain.adapter");
  r = ckpt_tool("consolidate " + plain + " --format peft --out " + none);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("has no LoRA adapters"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("without model.lora"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(none));

  // An existing non-empty output directory is left as it was, by both directory exports.
  const std::string ckpt = train(kGpt2, hf_dir("gpt2"), "taken", 1, "0.01");
  const std::string taken = testing::fresh_test_dir("taken.out");
  std::ofstream(taken + "/mine.txt") << "keep me";
  for (const char* format : {"peft", "hf"}) {
    r = ckpt_tool("consolidate " + ckpt + " --format " + format + " --out " + taken);
    EXPECT_EQ(r.exit_code, 1) << format << "\n" << r.output;
    EXPECT_NE(r.output.find(taken + " exists and is not empty"), std::string::npos) << r.output;
    EXPECT_EQ(testing::read_file(taken + "/mine.txt"), "keep me");
    EXPECT_EQ(std::distance(fs::directory_iterator(taken), fs::directory_iterator()), 1);
  }
  for (const auto& e : fs::directory_iterator(fs::path(taken).parent_path())) {
    EXPECT_EQ(e.path().filename().string().find("taken.out.partial"), std::string::npos) << e.path();
  }
  // --max-shard-size is --format hf's.
  r = ckpt_tool("consolidate " + ckpt + " --format peft --out " + none + " --max-shard-size 1GB");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_FALSE(fs::exists(none));
}

}  // namespace
}  // namespace zero
