// Hugging Face's formats: config.json, tensor names, model directories.
//  * config.json -> GptConfig -> config.json gives the same model (GPT-2's
//    and Llama 3.2's real configs), read in transformers 4.x's form and in
//    5.x's ("dtype", "rope_parameters"), a file with both forms refused
//    where they disagree, and written in 4.x's; what we do not implement is refused
//    naming the file, the key and the value (an unknown model_type, qwen2's
//    biases, a rope_scaling type, key/value heads that do not divide, a
//    Mistral sliding window);
//  * names: ours <-> Hugging Face's, GPT-2's Conv1D weights transposed, and
//    the parameter list computed from a config is the model's own;
//  * the directory reader on files written here: one file, shards with an
//    index, F32/BF16/F16 converted exactly, chunked reads; a truncated shard,
//    an index naming a missing file, a tensor of the wrong shape, a missing
//    tensor and one that is not the model's are refused by name;
//  * a GPT-2 file written here by Hugging Face's rules (transformer. names,
//    Conv1D [in, out]) loads into an engine with every weight where the
//    rules put it;
//  * a checkpoint consolidated to a Hugging Face directory (one file, or
//    shards whose index maps every tensor once) reloads bit for bit; an
//    existing non-empty directory is refused and left alone; a checkpoint
//    without a model description is refused with the fix.
//  * the same for a trained Llama with grouped-query attention, its head
//    tied or not (model. names, lm_head.weight only when untied).
// Not covered here: multi-rank loads of tensor-parallel slices and ZeRO
// partitions (one rank holds whole tensors).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "graph/gpt.h"
#include "kernels/cpu/cpu_backend.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/hf_weights.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/config/hf_config.h"
#include "runtime/engine/engine.h"
#include "tests/testing/hf_files.h"

namespace zero {
namespace {

namespace fs = std::filesystem;

const GptConfig kModel{.n_layer = 2, .n_head = 2, .d_model = 16, .vocab_size = 41, .seq_len = 8};

std::string fresh_dir(const std::string& name) {
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string d = ::testing::TempDir() + "/" + t->test_suite_name() + "." + t->name() + "." + name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

#define EXPECT_MESSAGE_HAS(status, text) \
  EXPECT_NE(std::string((status).message()).find(text), std::string::npos) << (status)

// ---------------------------------------------------------------- config.json

const char* kGpt2Config = R"({
  "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
  "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
  "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12,
  "n_inner": null, "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1, "summary_activation": null,
  "summary_first_dropout": 0.1, "summary_proj_to_labels": true, "summary_type": "cls_index",
  "summary_use_proj": true, "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}},
  "vocab_size": 50257})";

// Llama 3.2 1B's.
const char* kLlamaConfig = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048,
  "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": false,
  "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})";

Json parsed(const char* text) { return Json::parse(text); }


TEST(HfConfigTest, Gpt2ConfigReadsAndRoundTrips) {
  absl::StatusOr<GptConfig> c = gpt_config_from_hf(parsed(kGpt2Config), "gpt2/config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->arch, ModelArch::kGpt2);
  EXPECT_EQ(c->n_layer, 12);
  EXPECT_EQ(c->n_head, 12);
  EXPECT_EQ(c->d_model, 768);
  EXPECT_EQ(c->vocab_size, 50257);
  EXPECT_EQ(c->max_positions, 1024);
  EXPECT_EQ(c->seq_len, 1024);
  EXPECT_EQ(c->dropout, 0.0f);  // the pdrops are training settings: the caller's
  const Json back = hf_config_json(*c, DType::kF32);
  EXPECT_EQ(back["architectures"], Json::array({"GPT2LMHeadModel"}));
  EXPECT_EQ(back["torch_dtype"], "float32");
  EXPECT_EQ(back["layer_norm_epsilon"].get<double>(), 1e-5);
  EXPECT_FALSE(back.contains("bos_token_id"));  // GPT2Config's default 50256 is in this vocabulary
  absl::StatusOr<GptConfig> again = gpt_config_from_hf(back, "written");
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << back.dump(1);
  testing::expect_same_model(*c, *again);
}

TEST(HfConfigTest, LlamaConfigReadsAndRoundTrips) {
  absl::StatusOr<GptConfig> c = gpt_config_from_hf(parsed(kLlamaConfig), "llama/config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->arch, ModelArch::kLlama);
  EXPECT_EQ(c->n_layer, 16);
  EXPECT_EQ(c->n_head, 32);
  EXPECT_EQ(c->kv_heads(), 8);
  EXPECT_EQ(c->d_model, 2048);
  EXPECT_EQ(c->ffn_width(), 8192);
  EXPECT_EQ(c->vocab_size, 128256);
  EXPECT_EQ(c->max_positions, 131072);
  EXPECT_EQ(c->norm_eps, 1e-5f);
  EXPECT_EQ(c->rope_theta, 500000.0);
  EXPECT_EQ(c->rope_scaling.type, "llama3");
  EXPECT_EQ(c->rope_scaling.factor, 32.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->init_std, 0.02f);
  const Json back = hf_config_json(*c, DType::kBF16);
  EXPECT_EQ(back["architectures"], Json::array({"LlamaForCausalLM"}));
  EXPECT_EQ(back["model_type"], "llama");
  EXPECT_EQ(back["torch_dtype"], "bfloat16");
  EXPECT_EQ(back["rms_norm_eps"].get<double>(), 1e-5);  // the decimal, not the float's expansion
  EXPECT_EQ(back["initializer_range"].get<double>(), 0.02);
  EXPECT_EQ(back["num_key_value_heads"], 8);
  EXPECT_EQ(back["intermediate_size"], 8192);
  absl::StatusOr<GptConfig> again = gpt_config_from_hf(back, "written");
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << back.dump(1);
  testing::expect_same_model(*c, *again);

  // Defaults: no kv heads (= heads), untied, no scaling; "type" as older configs spell it.
  Json j = parsed(kLlamaConfig);
  j.erase("num_key_value_heads");
  j.erase("tie_word_embeddings");
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  c = gpt_config_from_hf(j, "x");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->kv_heads(), 32);
  EXPECT_FALSE(c->tied_head());
  EXPECT_EQ(c->rope_scaling.type, "linear");
  testing::expect_same_model(*c, gpt_config_from_hf(hf_config_json(*c, DType::kF32), "y").value());
  // Mistral without a sliding window is Llama.
  j = parsed(kLlamaConfig);
  j["model_type"] = "mistral";
  j["sliding_window"] = nullptr;
  c = gpt_config_from_hf(j, "mistral/config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->arch, ModelArch::kLlama);
}

// The same model as transformers 5.x writes its config.json: "dtype", RoPE
// under "rope_parameters" (no top-level rope_theta / rope_scaling).
const char* kLlamaConfigV5 = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "dtype": "bfloat16", "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu",
  "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 131072,
  "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16,
  "num_key_value_heads": 8, "pad_token_id": null, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_parameters": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                      "original_max_position_embeddings": 8192, "rope_theta": 500000.0, "rope_type": "llama3"},
  "tie_word_embeddings": true, "transformers_version": "5.24.0", "use_cache": true, "vocab_size": 128256})";

TEST(HfConfigTest, TransformersFiveFormReadsAsTheFourForm) {
  const GptConfig v4 = gpt_config_from_hf(parsed(kLlamaConfig), "v4").value();
  absl::StatusOr<GptConfig> v5 = gpt_config_from_hf(parsed(kLlamaConfigV5), "v5/config.json");
  ASSERT_TRUE(v5.ok()) << v5.status();
  testing::expect_same_model(v4, *v5);
  EXPECT_EQ(v5->rope_theta, 500000.0);
  EXPECT_EQ(v5->rope_scaling.type, "llama3");
  EXPECT_EQ(v5->rope_scaling.factor, 32.0);
  EXPECT_EQ(v5->rope_scaling.original_max_position_embeddings, 8192);

  // "default" is plain RoPE of its theta; a missing theta is 10000; a
  // "type" beside an equal "rope_type" (5.x saving a 4.x config) is fine.
  Json j = parsed(kLlamaConfigV5);
  j["rope_parameters"] = {{"rope_theta", 1234.0}, {"rope_type", "default"}};
  GptConfig c = gpt_config_from_hf(j, "x").value();
  EXPECT_EQ(c.rope_theta, 1234.0);
  EXPECT_EQ(c.rope_scaling.type, "");
  j["rope_parameters"] = {{"rope_type", "default"}};
  EXPECT_EQ(gpt_config_from_hf(j, "x").value().rope_theta, 10000.0);
  j["rope_parameters"] = {{"rope_theta", 5e5}, {"rope_type", "linear"}, {"type", "linear"}, {"factor", 2.0}};
  c = gpt_config_from_hf(j, "x").value();
  EXPECT_EQ(c.rope_scaling.type, "linear");
  EXPECT_EQ(c.rope_scaling.factor, 2.0);
  // null is as absent: the 4.x keys (here none: theta 10000, no scaling).
  j["rope_parameters"] = nullptr;
  c = gpt_config_from_hf(j, "x").value();
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.rope_scaling.type, "");

  // Both forms, saying the same: read (a config a hand edited, or 5.x's
  // standardised attributes written back beside the old keys).
  j = parsed(kLlamaConfigV5);
  const Json v4_json = parsed(kLlamaConfig);
  j["rope_theta"] = v4_json["rope_theta"];
  j["rope_scaling"] = v4_json["rope_scaling"];
  j["torch_dtype"] = "bfloat16";
  absl::StatusOr<GptConfig> both = gpt_config_from_hf(j, "both");
  ASSERT_TRUE(both.ok()) << both.status();
  testing::expect_same_model(v4, *both);
  // ... and 4.x's rope_scaling carrying a rope_theta (5.x's attribute
  // alias) without a top-level one.
  j = parsed(kLlamaConfig);
  j.erase("rope_theta");
  j["rope_scaling"]["rope_theta"] = 500000.0;
  testing::expect_same_model(v4, gpt_config_from_hf(j, "alias").value());

  // Contradictions are refused, naming both.
  j = parsed(kLlamaConfigV5);
  j["rope_theta"] = 10000.0;
  absl::Status s = gpt_config_from_hf(j, "m/config.json").status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_MESSAGE_HAS(s, "m/config.json: \"rope_theta\" is 10000.0: contradicts rope_parameters' \"rope_theta\" (500000)");
  j = parsed(kLlamaConfigV5);
  j["rope_scaling"] = v4_json["rope_scaling"];
  j["rope_scaling"]["factor"] = 8.0;
  s = gpt_config_from_hf(j, "m/config.json").status();
  EXPECT_MESSAGE_HAS(s, "m/config.json: \"rope_scaling\" (llama3 factor 8");
  EXPECT_MESSAGE_HAS(s, "contradicts \"rope_parameters\" (llama3 factor 32");
  j = parsed(kLlamaConfigV5);
  j["rope_scaling"] = nullptr;  // null: no scaling in 4.x's form, but only as absent
  EXPECT_TRUE(gpt_config_from_hf(j, "m").ok());
  j["rope_parameters"]["rope_type"] = "default";
  j["rope_scaling"] = v4_json["rope_scaling"];
  s = gpt_config_from_hf(j, "m/config.json").status();
  EXPECT_MESSAGE_HAS(s, "\"rope_scaling\" (llama3 factor 32");
  EXPECT_MESSAGE_HAS(s, "contradicts \"rope_parameters\" (none)");
  j = parsed(kLlamaConfig);
  j["rope_scaling"]["rope_theta"] = 10000.0;
  s = gpt_config_from_hf(j, "m/config.json").status();
  EXPECT_MESSAGE_HAS(s, "\"rope_theta\" is 500000.0: contradicts rope_scaling's \"rope_theta\" (10000)");
  j = parsed(kLlamaConfigV5);
  j["torch_dtype"] = "float32";
  s = gpt_config_from_hf(j, "m/config.json").status();
  EXPECT_MESSAGE_HAS(s, "m/config.json: \"dtype\" is \"bfloat16\": contradicts \"torch_dtype\" (\"float32\")");
  j = parsed(kLlamaConfigV5);
  j["rope_parameters"]["type"] = "linear";
  s = gpt_config_from_hf(j, "m/config.json").status();
  EXPECT_MESSAGE_HAS(s, "m/config.json rope_parameters: \"type\" is \"linear\": contradicts \"rope_type\" (\"llama3\")");

  // What we do not implement, named as 5.x spells it.
  j = parsed(kLlamaConfigV5);
  j["rope_parameters"] = {{"rope_theta", 1e4}, {"rope_type", "yarn"}, {"factor", 4.0}};
  s = gpt_config_from_hf(j, "m/config.json").status();
  EXPECT_MESSAGE_HAS(s, "m/config.json: rope_parameters type \"yarn\" is not implemented");
  j["rope_parameters"] = {{"rope_theta", 1e4}, {"rope_type", "llama3"}, {"factor", 8.0}};
  s = gpt_config_from_hf(j, "m/config.json").status();
  EXPECT_MESSAGE_HAS(s, "m/config.json rope_parameters: \"low_freq_factor\" is missing");
  j["rope_parameters"] = {{"rope_theta", 1e4}, {"rope_type", "default"}, {"partial_rotary_factor", 0.5}};
  s = gpt_config_from_hf(j, "m/config.json").status();
  EXPECT_MESSAGE_HAS(s, "\"partial_rotary_factor\" is 0.5: only 1");
  j["rope_parameters"] = {{"full_attention", {{"rope_theta", 1e4}, {"rope_type", "default"}}}};
  s = gpt_config_from_hf(j, "m/config.json").status();
  EXPECT_MESSAGE_HAS(s, "\"full_attention\" is an object: RoPE parameters per attention type");
  j["rope_parameters"] = "llama3";
  s = gpt_config_from_hf(j, "m/config.json").status();
  EXPECT_MESSAGE_HAS(s, "\"rope_parameters\" is \"llama3\": expected null or an object");

  // GPT-2 as 5.x writes it: "dtype" for "torch_dtype".
  Json g = parsed(kGpt2Config);
  g["dtype"] = "float32";
  absl::StatusOr<GptConfig> g5 = gpt_config_from_hf(g, "g");
  ASSERT_TRUE(g5.ok()) << g5.status();
  testing::expect_same_model(gpt_config_from_hf(parsed(kGpt2Config), "g").value(), *g5);
  g["torch_dtype"] = "bfloat16";
  EXPECT_MESSAGE_HAS(gpt_config_from_hf(g, "g").status(), "contradicts \"torch_dtype\"");
}

// What we write is 4.x's form (which transformers 5 reads too, converting
// it; 4.x would ignore a "rope_parameters" and run theta 10000 unscaled).
TEST(HfConfigTest, WritesTheFormBothTransformersVersionsRead) {
  const GptConfig c = gpt_config_from_hf(parsed(kLlamaConfigV5), "v5").value();
  const Json j = hf_config_json(c, DType::kBF16);
  EXPECT_EQ(j["torch_dtype"], "bfloat16");
  EXPECT_FALSE(j.contains("dtype"));
  EXPECT_FALSE(j.contains("rope_parameters"));
  EXPECT_EQ(j["rope_theta"].get<double>(), 500000.0);
  EXPECT_EQ(j["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(j["rope_scaling"]["factor"].get<double>(), 32.0);
  EXPECT_EQ(j["rope_scaling"]["original_max_position_embeddings"], 8192);
  EXPECT_EQ(j["head_dim"], 64);
  testing::expect_same_model(c, gpt_config_from_hf(j, "written").value());
  GptConfig plain = c;
  plain.rope_scaling = {};
  plain.rope_theta = 10000.0;
  const Json p = hf_config_json(plain, DType::kF32);
  EXPECT_TRUE(p["rope_scaling"].is_null());
  EXPECT_EQ(p["torch_dtype"], "float32");
  testing::expect_same_model(plain, gpt_config_from_hf(p, "written").value());
  // A GPT-2 of a small vocabulary: no token ids (GPT2Config's default 50256 would be outside it).
  const Json g = hf_config_json(kModel, DType::kF32);
  EXPECT_TRUE(g.contains("bos_token_id") && g["bos_token_id"].is_null()) << g.dump();
  EXPECT_TRUE(g.contains("eos_token_id") && g["eos_token_id"].is_null()) << g.dump();
}

absl::Status llama_with(const std::string& key, const Json& value, const std::string& model_type = "llama") {
  Json j = parsed(kLlamaConfig);
  j["model_type"] = model_type;
  if (value.is_discarded()) j.erase(key);
  else j[key] = value;
  return gpt_config_from_hf(j, "m/config.json").status();
}

TEST(HfConfigTest, WhatWeDoNotImplementIsRefusedByKeyAndValue) {
  absl::Status s = llama_with("model_type", "falcon", "falcon");
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_MESSAGE_HAS(s, "m/config.json: \"model_type\" is \"falcon\"");
  EXPECT_MESSAGE_HAS(s, "\"gpt2\", \"llama\", \"mistral\"");

  s = llama_with("model_type", "qwen2", "qwen2");
  EXPECT_MESSAGE_HAS(s, "\"model_type\" is \"qwen2\"");
  EXPECT_MESSAGE_HAS(s, "biases on its q/k/v projections");

  s = llama_with("rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}});
  EXPECT_MESSAGE_HAS(s, "m/config.json: rope_scaling type \"yarn\" is not implemented");
  s = llama_with("rope_scaling", {{"rope_type", "linear"}, {"factor", 0.5}});
  EXPECT_MESSAGE_HAS(s, "factor 0.5 must be >= 1");
  s = llama_with("rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}});
  EXPECT_MESSAGE_HAS(s, "\"low_freq_factor\" is missing");

  s = llama_with("num_key_value_heads", 5);
  EXPECT_MESSAGE_HAS(s, "m/config.json: \"num_key_value_heads\" is 5: must divide num_attention_heads (32)");
  s = llama_with("head_dim", 128);
  EXPECT_MESSAGE_HAS(s, "\"head_dim\" is 128");
  s = llama_with("hidden_act", "gelu");
  EXPECT_MESSAGE_HAS(s, "\"hidden_act\" is \"gelu\"");
  s = llama_with("attention_bias", true);
  EXPECT_MESSAGE_HAS(s, "\"attention_bias\" is true");
  s = llama_with("attention_dropout", 0.1);
  EXPECT_MESSAGE_HAS(s, "\"attention_dropout\" is 0.1");
  s = llama_with("hidden_size", Json::value_t::discarded);
  EXPECT_MESSAGE_HAS(s, "\"hidden_size\" is missing");
  s = llama_with("hidden_size", "2048");
  EXPECT_MESSAGE_HAS(s, "\"hidden_size\" is \"2048\": expected an integer");
  s = llama_with("sliding_window", 4096, "mistral");
  EXPECT_MESSAGE_HAS(s, "\"sliding_window\" is 4096: sliding-window attention is not implemented");
  EXPECT_TRUE(llama_with("sliding_window", 131072, "mistral").ok());

  auto gpt2_with = [](const std::string& key, const Json& value) {
    Json j = parsed(kGpt2Config);
    j[key] = value;
    return gpt_config_from_hf(j, "g/config.json").status();
  };
  s = gpt2_with("activation_function", "relu");
  EXPECT_MESSAGE_HAS(s, "g/config.json: \"activation_function\" is \"relu\"");
  s = gpt2_with("tie_word_embeddings", false);
  EXPECT_MESSAGE_HAS(s, "\"tie_word_embeddings\" is false");
  s = gpt2_with("n_inner", 1000);
  EXPECT_MESSAGE_HAS(s, "\"n_inner\" is 1000");
  s = gpt2_with("layer_norm_epsilon", 1e-6);
  EXPECT_MESSAGE_HAS(s, "\"layer_norm_epsilon\" is 1e-06");
  s = gpt2_with("n_head", 7);
  EXPECT_MESSAGE_HAS(s, "\"n_embd\" is 768: not a multiple of n_head (7)");
}

// ---------------------------------------------------------------- names

TEST(HfNamesTest, OursToHuggingFacesAndBack) {
  GptConfig llama = kModel;
  llama.arch = ModelArch::kLlama;
  EXPECT_EQ(hf_tensor_name(kModel, "h.0.attn.c_attn.weight"), "transformer.h.0.attn.c_attn.weight");
  EXPECT_EQ(hf_tensor_name(kModel, "wte.weight"), "transformer.wte.weight");
  EXPECT_EQ(hf_tensor_name(llama, "layers.3.self_attn.q_proj.weight"), "model.layers.3.self_attn.q_proj.weight");
  EXPECT_EQ(hf_tensor_name(llama, "norm.weight"), "model.norm.weight");
  EXPECT_EQ(hf_tensor_name(llama, "lm_head.weight"), "lm_head.weight");
  EXPECT_EQ(ours_from_hf_tensor_name(kModel, "transformer.h.1.ln_2.bias"), "h.1.ln_2.bias");
  EXPECT_EQ(ours_from_hf_tensor_name(kModel, "h.1.ln_2.bias"), "h.1.ln_2.bias");  // GPT2Model's, ours
  EXPECT_EQ(ours_from_hf_tensor_name(llama, "model.embed_tokens.weight"), "embed_tokens.weight");
  EXPECT_EQ(ours_from_hf_tensor_name(llama, "lm_head.weight"), "lm_head.weight");
  for (const char* w : {"h.0.attn.c_attn.weight", "h.0.attn.c_proj.weight", "h.1.mlp.c_fc.weight", "h.1.mlp.c_proj.weight"}) {
    EXPECT_TRUE(hf_stores_transposed(kModel, w)) << w;
  }
  for (const char* w : {"h.0.attn.c_attn.bias", "wte.weight", "wpe.weight", "h.0.ln_1.weight"}) {
    EXPECT_FALSE(hf_stores_transposed(kModel, w)) << w;
  }
  EXPECT_FALSE(hf_stores_transposed(llama, "layers.0.mlp.down_proj.weight"));

  // The list computed from the config is the model's own, in its order.
  Gpt model(kModel);
  const std::vector<Parameter*> params = model.parameters();
  const auto shapes = gpt_parameter_shapes(kModel);
  ASSERT_EQ(params.size(), shapes.size());
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i]->name(), shapes[i].first);
    EXPECT_EQ(params[i]->shape(), shapes[i].second) << shapes[i].first;
  }
  // Llama's: GQA shapes, the untied head last.
  GptConfig gqa = llama;
  gqa.n_head = 4;
  gqa.n_kv_head = 2;
  gqa.d_ff = 40;
  const auto l = gpt_parameter_shapes(gqa);
  ASSERT_EQ(l.size(), 1 + 9 * 2 + 2u);
  EXPECT_EQ(l[0], (std::pair<std::string, Shape>{"embed_tokens.weight", {41, 16}}));
  EXPECT_EQ(l[3], (std::pair<std::string, Shape>{"layers.0.self_attn.k_proj.weight", {8, 16}}));
  EXPECT_EQ(l[9], (std::pair<std::string, Shape>{"layers.0.mlp.down_proj.weight", {16, 40}}));
  EXPECT_EQ(l.back().first, "lm_head.weight");
  gqa.tie_word_embeddings = true;
  EXPECT_EQ(gpt_parameter_shapes(gqa).back().first, "norm.weight");
}

// ---------------------------------------------------------------- the reader

struct StTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

template <typename T>
std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

void write_safetensors(const std::string& path, const std::vector<StTensor>& tensors, const Json& meta = Json()) {
  Json h = Json::object();
  if (!meta.is_null()) h["__metadata__"] = meta;
  int64_t off = 0;
  for (const StTensor& t : tensors) {
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + static_cast<int64_t>(t.bytes.size())}}};
    off += static_cast<int64_t>(t.bytes.size());
  }
  const std::string text = h.dump();
  const uint64_t n = text.size();
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << text;
  for (const StTensor& t : tensors) f << t.bytes;
}

std::vector<float> read_all(const HfWeights& w, const std::string& name, int64_t max_read_bytes = 64 << 20) {
  const HfTensor& t = w.tensors().at(name);
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  std::vector<float> out(static_cast<size_t>(n));
  EXPECT_TRUE(w.read(t, 0, n, out.data(), max_read_bytes).ok());
  return out;
}

TEST(HfWeightsTest, ReadsOneFileAndConvertsEachDtypeExactly) {
  const std::string dir = fresh_dir("st");
  const std::vector<float> f32 = {1.5f, -2.25f, 3e-8f, 65504.0f, -0.0f, 7.0f};
  std::vector<uint16_t> bf16, f16;
  for (float v : f32) bf16.push_back(float_to_bf16(v * 3.3f)), f16.push_back(float_to_fp16(v / 7.0f));
  write_safetensors(dir + "/x.safetensors", {{"a", "F32", {2, 3}, raw(f32)},
                                             {"b", "BF16", {6}, raw(bf16)},
                                             {"c", "F16", {3, 2}, raw(f16)}},
                    {{"format", "pt"}});
  absl::StatusOr<HfWeights> w = HfWeights::open(dir + "/x.safetensors");
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->tensors().size(), 3u);
  EXPECT_EQ(w->metadata(0).value("format", ""), "pt");
  EXPECT_EQ(w->tensors().at("c").shape, (Shape{3, 2}));
  EXPECT_EQ(read_all(*w, "a"), f32);
  for (int64_t chunk : {int64_t{64} << 20, int64_t{2}, int64_t{6}}) {  // 1 and 3 elements a read
    const std::vector<float> b = read_all(*w, "b", chunk), c = read_all(*w, "c", chunk);
    for (size_t i = 0; i < f32.size(); ++i) {
      EXPECT_EQ(b[i], bf16_to_float(bf16[i])) << i;
      EXPECT_EQ(c[i], fp16_to_float(f16[i])) << i;
    }
  }
  // A directory with model.safetensors reads the same.
  fs::rename(dir + "/x.safetensors", dir + "/model.safetensors");
  w = HfWeights::open(dir);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(read_all(*w, "a"), f32);
}

TEST(HfWeightsTest, ReadsShardsThroughTheIndexAndRefusesBrokenOnes) {
  const std::string dir = fresh_dir("sharded");
  const std::vector<float> a = {1, 2, 3, 4}, b = {5, 6}, c = {7, 8, 9};
  write_safetensors(dir + "/model-00001-of-00002.safetensors", {{"a", "F32", {2, 2}, raw(a)}, {"b", "F32", {2}, raw(b)}});
  write_safetensors(dir + "/model-00002-of-00002.safetensors", {{"c", "F32", {3}, raw(c)}});
  Json index = {{"metadata", {{"total_size", 36}}},
                {"weight_map", {{"a", "model-00001-of-00002.safetensors"},
                                {"b", "model-00001-of-00002.safetensors"},
                                {"c", "model-00002-of-00002.safetensors"}}}};
  auto write_index = [&](const Json& j) { std::ofstream(dir + "/model.safetensors.index.json") << j.dump(); };
  write_index(index);
  absl::StatusOr<HfWeights> w = HfWeights::open(dir);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->files().size(), 2u);
  EXPECT_EQ(read_all(*w, "a"), a);
  EXPECT_EQ(read_all(*w, "c"), c);
  EXPECT_EQ(w->files()[static_cast<size_t>(w->tensors().at("c").file)], dir + "/model-00002-of-00002.safetensors");

  // A tensor the index puts in the wrong shard.
  Json wrong = index;
  wrong["weight_map"]["c"] = "model-00001-of-00002.safetensors";
  write_index(wrong);
  absl::Status s = HfWeights::open(dir).status();
  EXPECT_MESSAGE_HAS(s, "puts tensor c in " + dir + "/model-00001-of-00002.safetensors, whose header has no such tensor");

  // An index naming a file that is not there.
  wrong = index;
  wrong["weight_map"]["c"] = "model-00003-of-00003.safetensors";
  write_index(wrong);
  s = HfWeights::open(dir).status();
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_MESSAGE_HAS(s, "puts tensor c in model-00003-of-00003.safetensors, which is missing");

  // A truncated shard: the tensor whose bytes are cut is named.
  write_index(index);
  fs::resize_file(dir + "/model-00002-of-00002.safetensors", fs::file_size(dir + "/model-00002-of-00002.safetensors") - 2);
  s = HfWeights::open(dir).status();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_MESSAGE_HAS(s, dir + "/model-00002-of-00002.safetensors: tensor c: byte range [0, 12) ends past the file's 10 bytes");
  fs::resize_file(dir + "/model-00002-of-00002.safetensors", 12);
  s = HfWeights::open(dir).status();
  EXPECT_MESSAGE_HAS(s, "model-00002-of-00002.safetensors: header length");

  // A byte range that does not match the shape x dtype.
  write_safetensors(dir + "/model-00002-of-00002.safetensors", {{"c", "F32", {4}, raw(c)}});
  s = HfWeights::open(dir).status();
  EXPECT_MESSAGE_HAS(s, "tensor c: byte range [0, 12) holds 12 bytes, its shape [4] of F32 needs 16");

  // Neither file nor index.
  const std::string empty = fresh_dir("empty");
  s = HfWeights::open(empty).status();
  EXPECT_MESSAGE_HAS(s, "is not a Hugging Face model directory");
}

// ---------------------------------------------------------------- loading into an engine

struct Trained {
  CpuBackend backend;
  std::unique_ptr<Engine> engine;
  std::vector<int32_t> ids, targets;
  explicit Trained(const GptConfig& model = kModel, int steps = 3, uint64_t seed = 42) {
    EngineConfig ec;
    ec.micro_batch_size = 2;
    ec.seed = seed;
    engine = initialize(std::make_unique<Gpt>(model), ec, backend).value();
    for (int i = 0; i < 16; ++i) ids.push_back(i % 41), targets.push_back((i + 3) % 41);
    for (int s = 0; s < steps; ++s) {
      engine->forward({Tensor::wrap(ids.data(), {2, 8}, DType::kI32), Tensor::wrap(targets.data(), {2, 8}, DType::kI32)}).value();
      EXPECT_TRUE(engine->backward().ok());
      EXPECT_TRUE(engine->step().ok());
    }
  }
  std::vector<float> weights(const std::string& name) {
    for (Parameter* p : engine->model().parameters())
      if (p->name() == name) return engine->master_values(*p);
    ADD_FAILURE() << "no parameter " << name;
    return {};
  }
};

// Parameter k's value at element e of our [out, in] layout.
float synthetic(size_t k, int64_t e) { return static_cast<float>(static_cast<int64_t>(k) * 1000 + e) / 1024.0f; }

// kModel's weights as Hugging Face stores them (transformer. names, Conv1D
// [in, out]), each parameter's values synthetic(k, e); then `extra`.
std::vector<StTensor> hf_gpt2_tensors(const GptConfig& c) {
  std::vector<StTensor> out;
  const auto shapes = gpt_parameter_shapes(c);
  for (size_t k = 0; k < shapes.size(); ++k) {
    const auto& [name, shape] = shapes[k];
    const bool t = hf_stores_transposed(c, name);
    std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
    for (int64_t e = 0; e < static_cast<int64_t>(v.size()); ++e) {
      // ours (o, i) = e -> stored (i, o)
      const int64_t at = t ? (e % shape[1]) * shape[0] + e / shape[1] : e;
      v[static_cast<size_t>(at)] = synthetic(k, e);
    }
    std::vector<int64_t> s(shape.begin(), shape.end());
    if (t) std::swap(s[0], s[1]);
    out.push_back({hf_tensor_name(c, name), "F32", s, raw(v)});
  }
  return out;
}

TEST(HfLoadTest, AHuggingFaceGpt2FileLoadsEveryWeightWhereItsRulesPutIt) {
  const std::string dir = fresh_dir("hf");
  std::vector<StTensor> tensors = hf_gpt2_tensors(kModel);
  // What transformers saves besides the weights: the mask buffer, and a tied head.
  tensors.push_back({"transformer.h.0.attn.bias", "F32", {1, 1, 8, 8}, raw(std::vector<float>(64, 1.0f))});
  tensors.push_back({"lm_head.weight", "F32", {41, 16}, raw(std::vector<float>(41 * 16, 0.0f))});
  write_safetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}});
  Trained b(kModel, 0);
  // Small reads: chunking and staging of 7 values at a time.
  absl::Status s = load_hf_weights(*b.engine, kModel, dir, 28);
  ASSERT_TRUE(s.ok()) << s;
  const auto shapes = gpt_parameter_shapes(kModel);
  for (size_t k = 0; k < shapes.size(); ++k) {
    const std::vector<float> got = b.weights(shapes[k].first);
    ASSERT_EQ(got.size(), static_cast<size_t>(shape_numel(shapes[k].second)));
    for (size_t e = 0; e < got.size(); ++e) ASSERT_EQ(got[e], synthetic(k, static_cast<int64_t>(e))) << shapes[k].first << "[" << e << "]";
  }
  // The model-dtype parameters follow the master weights.
  for (Parameter* p : b.engine->model().parameters()) {
    if (p->name() != "wpe.weight") continue;
    EXPECT_EQ(load_as_float(p->data.data(), p->data.dtype(), 3), synthetic(1, 3));
  }
}

TEST(HfLoadTest, WrongMissingAndForeignTensorsAreRefusedByName) {
  const std::string dir = fresh_dir("hf");
  Trained b(kModel, 0);
  const std::vector<float> before = b.weights("wte.weight");
  auto load_with = [&](const std::function<void(std::vector<StTensor>&)>& edit) {
    std::vector<StTensor> tensors = hf_gpt2_tensors(kModel);
    edit(tensors);
    write_safetensors(dir + "/model.safetensors", tensors);
    return load_hf_weights(*b.engine, kModel, dir);
  };
  absl::Status s = load_with([](std::vector<StTensor>& t) {
    for (StTensor& x : t)
      if (x.name == "transformer.wpe.weight") x.shape = {7, 16}, x.bytes.resize(7 * 16 * 4);
  });
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_MESSAGE_HAS(s, "tensor transformer.wpe.weight has shape [7, 16]");
  EXPECT_MESSAGE_HAS(s, "needs [8, 16]");
  s = load_with([](std::vector<StTensor>& t) {
    t.push_back({"transformer.h.0.attn.rotary.weight", "F32", {2}, raw(std::vector<float>{1, 2})});
  });
  EXPECT_MESSAGE_HAS(s, "tensor transformer.h.0.attn.rotary.weight [2] is not part of the model");
  s = load_with([](std::vector<StTensor>& t) {
    t.push_back({"transformer.h.2.ln_1.weight", "F32", {16}, raw(std::vector<float>(16))});
  });
  EXPECT_MESSAGE_HAS(s, "tensor transformer.h.2.ln_1.weight [16] is not part of the model");
  s = load_with([](std::vector<StTensor>& t) {
    t.erase(std::remove_if(t.begin(), t.end(), [](const StTensor& x) { return x.name == "transformer.ln_f.bias"; }), t.end());
  });
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_MESSAGE_HAS(s, "no tensor transformer.ln_f.bias");
  s = load_with([](std::vector<StTensor>& t) { t[0].dtype = "I32"; });
  EXPECT_MESSAGE_HAS(s, "tensor transformer.wte.weight has dtype I32");
  // Nothing was written by any refused load.
  EXPECT_EQ(b.weights("wte.weight"), before);
  // A config that is not the engine's.
  GptConfig other = kModel;
  other.vocab_size = 40;
  write_safetensors(dir + "/model.safetensors", hf_gpt2_tensors(other));
  s = load_hf_weights(*b.engine, other, dir);
  EXPECT_MESSAGE_HAS(s, "the engine's parameter wte.weight [41, 16] is [40, 16] in the model config");
}

// ---------------------------------------------------------------- consolidation

std::string saved_checkpoint(Trained& a, const std::string& dir, bool with_model = true,
                             const GptConfig& model = kModel) {
  SaveOptions so{dir, "", 0};
  if (with_model) so.model = hf_config_json(model, DType::kF32);
  EXPECT_TRUE(save_checkpoint(*a.engine, so).ok());
  return dir;
}

void expect_weights_equal(Trained& a, Trained& b, DType dt) {
  for (Parameter* p : a.engine->model().parameters()) {
    const std::vector<float> live = a.engine->master_values(*p);
    const std::vector<float> reloaded = b.weights(p->name());
    ASSERT_EQ(live.size(), reloaded.size());
    for (size_t i = 0; i < live.size(); ++i) {
      const float want = dt == DType::kF32 ? live[i] : bf16_to_float(float_to_bf16(live[i]));
      ASSERT_EQ(reloaded[i], want) << p->name() << "[" << i << "] " << dtype_name(dt);
    }
  }
}

Json safetensors_header(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  std::string text(n, '\0');
  f.read(text.data(), static_cast<std::streamsize>(n));
  return Json::parse(text);
}

TEST(HfConsolidateTest, OneFileReloadsBitForBit) {
  Trained a;
  const std::string root = fresh_dir("root");
  const std::string ckpt = saved_checkpoint(a, root + "/ckpt");
  EXPECT_FALSE(read_manifest(ckpt, "global_step3").value().model.is_null());
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const std::string out = root + "/hf_" + std::string(dtype_name(dt));
    absl::Status s = consolidate_to_hf(ckpt, "", out, dt, int64_t{5} << 30);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_TRUE(fs::exists(out + "/model.safetensors"));
    EXPECT_FALSE(fs::exists(out + "/model.safetensors.index.json"));
    const Json config = load_json_file(out + "/config.json").value();
    EXPECT_EQ(config["torch_dtype"], dt == DType::kF32 ? "float32" : "bfloat16");
    testing::expect_same_model(gpt_config_from_hf(config, "config.json").value(), kModel);
    const Json header = safetensors_header(out + "/model.safetensors");
    EXPECT_EQ(header["__metadata__"], Json({{"format", "pt"}}));
    EXPECT_EQ(header["transformer.h.0.attn.c_attn.weight"]["shape"], Json({16, 48}));  // Conv1D [in, out]
    EXPECT_EQ(header["transformer.h.0.attn.c_attn.weight"]["dtype"], dt == DType::kF32 ? "F32" : "BF16");
    EXPECT_FALSE(header.contains("lm_head.weight"));  // tied: not stored
    EXPECT_EQ(header.size(), 1 + gpt_parameter_shapes(kModel).size());
    Trained b(kModel, 0);
    s = load_hf_weights(*b.engine, kModel, out);
    ASSERT_TRUE(s.ok()) << s;
    expect_weights_equal(a, b, dt);
  }
  // Our single-file export (own names, "gpt2-conv1d") still loads.
  const std::string file = root + "/old.safetensors";
  ASSERT_TRUE(consolidate_to_safetensors(ckpt, "", file, DType::kF32).ok());
  Trained c(kModel, 0);
  absl::Status s = load_hf_weights(*c.engine, kModel, file);
  ASSERT_TRUE(s.ok()) << s;
  expect_weights_equal(a, c, DType::kF32);
}

TEST(HfConsolidateTest, ShardsAndTheirIndexCoverEveryTensorOnce) {
  Trained a;
  const std::string root = fresh_dir("root");
  const std::string ckpt = saved_checkpoint(a, root + "/ckpt");
  const std::string out = root + "/hf";
  constexpr int64_t kMaxShard = 4096;  // wte alone is 2624 bytes; c_fc 4096
  absl::Status s = consolidate_to_hf(ckpt, "", out, DType::kF32, kMaxShard);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_FALSE(fs::exists(out + "/model.safetensors"));
  const Json index = load_json_file(out + "/model.safetensors.index.json").value();
  const Json& map = index.at("weight_map");
  std::set<std::string> want;
  int64_t total = 0;
  for (const auto& [name, shape] : gpt_parameter_shapes(kModel)) {
    want.insert(hf_tensor_name(kModel, name));
    total += shape_numel(shape) * 4;
  }
  std::set<std::string> mapped, files;
  for (auto it = map.begin(); it != map.end(); ++it) {
    EXPECT_TRUE(mapped.insert(it.key()).second) << it.key();
    files.insert(it.value().get<std::string>());
  }
  EXPECT_EQ(mapped, want);
  EXPECT_EQ(index.at("metadata").at("total_size").get<int64_t>(), total);
  ASSERT_GT(files.size(), 2u);
  std::set<std::string> names;
  for (size_t i = 1; i <= files.size(); ++i) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", i, files.size());
    names.insert(buf);
  }
  EXPECT_EQ(files, names);
  std::set<std::string> in_shards;
  for (const std::string& f : files) {
    const Json header = safetensors_header(out + "/" + f);
    int64_t bytes = 0;
    for (auto it = header.begin(); it != header.end(); ++it) {
      if (it.key() == "__metadata__") continue;
      EXPECT_EQ(map.at(it.key()), f);
      EXPECT_TRUE(in_shards.insert(it.key()).second) << it.key();
      bytes += it.value()["data_offsets"][1].get<int64_t>() - it.value()["data_offsets"][0].get<int64_t>();
    }
    EXPECT_TRUE(bytes <= kMaxShard || header.size() == 2) << f << ": " << bytes << " bytes";
  }
  EXPECT_EQ(in_shards, want);
  Trained b(kModel, 0);
  s = load_hf_weights(*b.engine, kModel, out, 40);
  ASSERT_TRUE(s.ok()) << s;
  expect_weights_equal(a, b, DType::kF32);
}

TEST(HfConsolidateTest, AnExistingDirectoryAndAMissingDescriptionAreRefused) {
  Trained a;
  const std::string root = fresh_dir("root");
  const std::string ckpt = saved_checkpoint(a, root + "/ckpt");
  const std::string out = root + "/taken";
  fs::create_directories(out);
  std::ofstream(out + "/mine.txt") << "keep me";
  absl::Status s = consolidate_to_hf(ckpt, "", out, DType::kF32, int64_t{1} << 30);
  EXPECT_TRUE(absl::IsAlreadyExists(s)) << s;
  EXPECT_MESSAGE_HAS(s, out + " exists and is not empty");
  EXPECT_EQ(fs::file_size(out + "/mine.txt"), 7u);
  EXPECT_EQ(std::distance(fs::directory_iterator(out), fs::directory_iterator()), 1);
  // An empty one is filled; no temporary directory is left beside it.
  const std::string empty = root + "/empty";
  fs::create_directories(empty);
  s = consolidate_to_hf(ckpt, "", empty, DType::kF32, int64_t{1} << 30);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(fs::exists(empty + "/config.json"));
  for (const auto& e : fs::directory_iterator(root))
    EXPECT_EQ(e.path().filename().string().find(".partial"), std::string::npos) << e.path();

  Trained c;
  const std::string bare = saved_checkpoint(c, root + "/bare", /*with_model=*/false);
  EXPECT_TRUE(read_manifest(bare, "global_step3").value().model.is_null());
  s = consolidate_to_hf(bare, "", root + "/none", DType::kF32, int64_t{1} << 30);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_MESSAGE_HAS(s, "has no model description");
  EXPECT_MESSAGE_HAS(s, "--format safetensors");
  EXPECT_FALSE(fs::exists(root + "/none"));
}

GptConfig llama_model(bool tied) {
  GptConfig c{.n_layer = 2, .n_head = 4, .d_model = 16, .vocab_size = 41, .seq_len = 8};
  c.arch = ModelArch::kLlama;
  c.n_kv_head = 2;
  c.d_ff = 24;
  c.max_positions = 16;
  c.rope_theta = 500000.0;
  c.norm_eps = 1e-6f;
  c.tie_word_embeddings = tied;
  return c;
}

// A trained Llama (grouped-query attention, tied head or not) through a
// Hugging Face directory into an engine initialised differently.
TEST(HfConsolidateTest, LlamaReloadsBitForBit) {
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    const GptConfig model = llama_model(tied);
    {
      Gpt gpt(model);
      const std::vector<Parameter*> params = gpt.parameters();
      const auto shapes = gpt_parameter_shapes(model);
      ASSERT_EQ(params.size(), shapes.size());
      for (size_t i = 0; i < params.size(); ++i) {
        EXPECT_EQ(params[i]->name(), shapes[i].first);
        EXPECT_EQ(params[i]->shape(), shapes[i].second) << shapes[i].first;
      }
    }
    Trained a(model, 2);
    const std::string root = fresh_dir(tied ? "tied" : "untied");
    const std::string ckpt = saved_checkpoint(a, root + "/ckpt", true, model);
    const std::string out = root + "/hf";
    absl::Status s = consolidate_to_hf(ckpt, "", out, DType::kF32, int64_t{1} << 30);
    ASSERT_TRUE(s.ok()) << s;
    const Json header = safetensors_header(out + "/model.safetensors");
    EXPECT_EQ(header["model.layers.1.self_attn.k_proj.weight"]["shape"], Json({8, 16}));  // [kv heads x 4, C]
    EXPECT_EQ(header["model.layers.0.mlp.down_proj.weight"]["shape"], Json({16, 24}));     // [out, in]
    EXPECT_EQ(header.contains("lm_head.weight"), !tied);
    const Json config = load_json_file(out + "/config.json").value();
    EXPECT_EQ(config["architectures"], Json::array({"LlamaForCausalLM"}));
    testing::expect_same_model(gpt_config_from_hf(config, "config.json").value(), model);
    Trained b(model, 0, /*seed=*/7);
    EXPECT_NE(b.weights("layers.0.self_attn.q_proj.weight"), a.weights("layers.0.self_attn.q_proj.weight"));
    s = load_hf_weights(*b.engine, model, out, 36);
    ASSERT_TRUE(s.ok()) << s;
    expect_weights_equal(a, b, DType::kF32);
  }
}

}  // namespace
}  // namespace zero
