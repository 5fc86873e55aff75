// Hugging Face's config.json and tensor names.
//  * config.json -> GptConfig -> config.json gives the same model (GPT-2's
//    and Llama 3.2's real configs; Qwen2's, Qwen3's and Gemma's with their
//    features and model_type), read in transformers 4.x's form and in
//    5.x's ("dtype", "rope_parameters"), a file with both forms refused
//    where they disagree, and written in 4.x's; what we do not implement is refused
//    naming the file, the key and the value (an unknown model_type, a
//    rope_scaling type, key/value heads that do not divide, a Mistral or
//    Qwen sliding window, Gemma's activation), and so is a size past the model section's
//    limit for the same field (a billion layers), naming the limit;
//  * written from the source's config.json, its token ids, model_type and
//    other keys are kept; two models' first differing key is named;
//  * names: ours <-> Hugging Face's, GPT-2's Conv1D weights transposed, and
//    the parameter list computed from a config is the model's own.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "graph/gpt.h"
#include "runtime/config/hf_config.h"
#include "tests/testing/hf_files.h"

namespace zero {
namespace {

const GptConfig kModel{.n_layer = 2, .n_head = 2, .d_model = 16, .vocab_size = 41, .seq_len = 8};

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
  // Mistral without a sliding window is Llama's layers, and stays "mistral".
  j = parsed(kLlamaConfig);
  j["model_type"] = "mistral";
  j["sliding_window"] = nullptr;
  c = gpt_config_from_hf(j, "mistral/config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->arch, ModelArch::kMistral);
  EXPECT_EQ(hf_config_json(*c, DType::kF32)["model_type"], "mistral");
  EXPECT_EQ(hf_config_json(*c, DType::kF32)["architectures"], Json::array({"MistralForCausalLM"}));
  // Llama with projection biases: flags of the model, written back.
  j = parsed(kLlamaConfig);
  j["attention_bias"] = true;
  j["mlp_bias"] = true;
  c = gpt_config_from_hf(j, "x");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->features().qkv_bias && c->features().o_bias && c->features().mlp_bias);
  EXPECT_EQ(hf_config_json(*c, DType::kF32)["attention_bias"], true);
  testing::expect_same_model(*c, gpt_config_from_hf(hf_config_json(*c, DType::kF32), "y").value());
}

// Qwen2, Qwen3 and Gemma as transformers 5.24 writes them: each family's
// features, its own head_dim, and a round trip that keeps model_type.
TEST(HfConfigTest, QwenAndGemmaConfigsReadAsTheirFamilies) {
  const Json qwen2 = parsed(R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896,
    "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
    "vocab_size": 151936, "max_position_embeddings": 32768, "rms_norm_eps": 1e-06, "hidden_act": "silu",
    "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}, "tie_word_embeddings": true,
    "use_sliding_window": false, "sliding_window": null, "max_window_layers": 21,
    "layer_types": ["full_attention", "full_attention"], "dtype": "bfloat16"})");
  absl::StatusOr<GptConfig> c = gpt_config_from_hf(qwen2, "qwen2/config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->arch, ModelArch::kQwen2);
  EXPECT_TRUE(c->features().qkv_bias);
  EXPECT_FALSE(c->features().o_bias);
  EXPECT_EQ(c->head_dim(), 64);
  EXPECT_EQ(c->rope_theta, 1e6);
  Json back = hf_config_json(*c, DType::kBF16);
  EXPECT_EQ(back["model_type"], "qwen2");
  EXPECT_EQ(back["architectures"], Json::array({"Qwen2ForCausalLM"}));
  EXPECT_FALSE(back.contains("attention_bias")) << back.dump();
  testing::expect_same_model(*c, gpt_config_from_hf(back, "back").value());

  const Json qwen3 = parsed(R"({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 1024,
    "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
    "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 40960, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000, "attention_bias": false, "tie_word_embeddings": true, "use_sliding_window": false})");
  c = gpt_config_from_hf(qwen3, "qwen3/config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->arch, ModelArch::kQwen3);
  EXPECT_TRUE(c->features().qk_norm);
  EXPECT_EQ(c->head_dim(), 128);
  EXPECT_EQ(c->attention_width(), 2048);  // not d_model
  back = hf_config_json(*c, DType::kF32);
  EXPECT_EQ(back["model_type"], "qwen3");
  EXPECT_EQ(back["head_dim"], 128);
  testing::expect_same_model(*c, gpt_config_from_hf(back, "back").value());

  // Gemma 2B's file: the legacy hidden_act "gelu" is the tanh form, as transformers reads it.
  const Json gemma = parsed(R"({"architectures": ["GemmaForCausalLM"], "model_type": "gemma", "hidden_size": 2048,
    "intermediate_size": 16384, "num_hidden_layers": 18, "num_attention_heads": 8, "num_key_value_heads": 1,
    "head_dim": 256, "vocab_size": 256000, "max_position_embeddings": 8192, "rms_norm_eps": 1e-06,
    "rope_theta": 10000.0, "hidden_act": "gelu", "hidden_activation": "gelu_pytorch_tanh",
    "pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 1, "attention_bias": false})");
  c = gpt_config_from_hf(gemma, "gemma/config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->arch, ModelArch::kGemma);
  EXPECT_TRUE(c->tied_head());  // GemmaConfig's default
  EXPECT_EQ(c->features().mlp, MlpKind::kGeGlu);
  EXPECT_TRUE(c->features().norm_unit_offset && c->features().embed_scale);
  EXPECT_EQ(c->head_dim(), 256);
  back = hf_config_json(*c, DType::kF32);
  EXPECT_EQ(back["model_type"], "gemma");
  EXPECT_EQ(back["hidden_act"], "gelu_pytorch_tanh");
  testing::expect_same_model(*c, gpt_config_from_hf(back, "back").value());
  // The families' own defaults: Gemma's head_dim 256, Qwen3's 128.
  Json g = gemma;
  g.erase("head_dim");
  EXPECT_EQ(gpt_config_from_hf(g, "g").value().head_dim(), 256);
  Json q = qwen3;
  q.erase("head_dim");
  EXPECT_EQ(gpt_config_from_hf(q, "q").value().head_dim(), 128);

  // What they may say that we do not implement, by key and value.
  auto with = [](Json j, const std::string& key, const Json& value) {
    j[key] = value;
    return gpt_config_from_hf(j, "m/config.json").status();
  };
  absl::Status s = with(qwen2, "use_sliding_window", true);
  EXPECT_MESSAGE_HAS(s, "m/config.json: \"use_sliding_window\" is true: sliding-window attention");
  s = with(qwen2, "layer_types", Json::array({"full_attention", "sliding_attention"}));
  EXPECT_MESSAGE_HAS(s, "\"layer_types\" is");
  EXPECT_MESSAGE_HAS(s, "\"sliding_attention\"");
  s = with(gemma, "hidden_act", "silu");
  EXPECT_MESSAGE_HAS(s, "\"hidden_act\" is \"silu\": only \"gelu_pytorch_tanh\" is implemented for gemma");
  s = with(gemma, "use_bidirectional_attention", true);
  EXPECT_MESSAGE_HAS(s, "\"use_bidirectional_attention\" is true");
  s = with(qwen3, "head_dim", 1000);
  EXPECT_MESSAGE_HAS(s, "\"head_dim\" is 1000: must be at most 512 (model.head_dim's limit)");
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

// Written from the config.json a model came from, as save_pretrained
// would: a Mistral stays a Mistral, its token ids (null in the family's own
// form for Gemma, absent for a small GPT-2) and the keys we do not read are
// the source's, and the weights' dtype is the export's in both forms.
TEST(HfConfigTest, WritingFromTheSourceKeepsItsTokenIdsAndModelType) {
  Json mistral = parsed(kLlamaConfigV5);
  mistral["model_type"] = "mistral";
  mistral["architectures"] = {"MistralForCausalLM"};
  mistral.erase("attention_bias");
  mistral.erase("mlp_bias");
  mistral["sliding_window"] = nullptr;
  mistral["bos_token_id"] = 1;
  mistral["eos_token_id"] = Json::array({2, 32000});
  mistral["pad_token_id"] = 0;
  mistral["dtype"] = "float32";
  const GptConfig c = gpt_config_from_hf(mistral, "mistral/config.json").value();
  const Json j = hf_config_json(c, DType::kBF16, mistral);
  EXPECT_EQ(j["model_type"], "mistral");
  EXPECT_EQ(j["architectures"], Json::array({"MistralForCausalLM"}));
  EXPECT_EQ(j["bos_token_id"], 1);
  EXPECT_EQ(j["eos_token_id"], Json::array({2, 32000}));
  EXPECT_EQ(j["pad_token_id"], 0);
  EXPECT_EQ(j["tie_word_embeddings"], mistral["tie_word_embeddings"]);
  EXPECT_EQ(j["transformers_version"], mistral["transformers_version"]);
  EXPECT_EQ(j["torch_dtype"], "bfloat16");
  EXPECT_EQ(j["dtype"], "bfloat16");
  EXPECT_FALSE(j.contains("rope_parameters"));  // 4.x's rope_theta / rope_scaling say it
  testing::expect_same_model(c, gpt_config_from_hf(j, "written").value());
  EXPECT_EQ(hf_config_json(c, DType::kBF16, Json()), hf_config_json(c, DType::kBF16));
  // Gemma's own form writes null ids; the source's win.
  Json gemma = hf_config_json(gpt_config_from_hf(mistral, "m").value(), DType::kF32);
  gemma["model_type"] = "gemma";
  gemma.erase("sliding_window");
  gemma["hidden_act"] = "gelu_pytorch_tanh";
  gemma["bos_token_id"] = 2;
  gemma["eos_token_id"] = 1;
  gemma["pad_token_id"] = 0;
  const GptConfig g = gpt_config_from_hf(gemma, "gemma").value();
  EXPECT_TRUE(hf_config_json(g, DType::kF32)["bos_token_id"].is_null());
  const Json gj = hf_config_json(g, DType::kF32, gemma);
  EXPECT_EQ(gj["bos_token_id"], 2);
  EXPECT_EQ(gj["eos_token_id"], 1);
  EXPECT_EQ(gj["pad_token_id"], 0);
  // GPT-2's <|endoftext|> of its real vocabulary.
  const Json gpt2 = parsed(kGpt2Config);
  const Json g2 = hf_config_json(gpt_config_from_hf(gpt2, "g").value(), DType::kF32, gpt2);
  EXPECT_EQ(g2["bos_token_id"], 50256);
  EXPECT_EQ(g2["task_specific_params"], gpt2["task_specific_params"]);
}

// A checkpoint's model against a run's: the first key that differs, by the
// config.json keys; what only training sets does not count, nor a RoPE
// model's positions (GPT-2's are its position table).
TEST(HfConfigTest, ModelDifferenceNamesTheFirstKeyThatDiffers) {
  const GptConfig llama = gpt_config_from_hf(parsed(kLlamaConfig), "l").value();
  GptConfig other = llama;
  EXPECT_EQ(hf_model_difference(llama, other), "");
  other.seq_len = 64;
  other.init_std = 0.5f;
  EXPECT_EQ(hf_model_difference(llama, other), "");
  other.max_positions = 4096;  // RoPE: no weight depends on it
  EXPECT_EQ(hf_model_difference(llama, other), "");
  other.n_layer = 3;
  EXPECT_EQ(hf_model_difference(llama, other), "num_hidden_layers 16 vs 3");
  other = llama;
  other.arch = ModelArch::kMistral;
  EXPECT_EQ(hf_model_difference(llama, other).rfind("model_type \"llama\" vs \"mistral\"", 0), 0u)
      << hf_model_difference(llama, other);
  GptConfig gpt2 = kModel, dropped = kModel;
  dropped.dropout = 0.1f;
  EXPECT_EQ(hf_model_difference(gpt2, dropped), "");
  dropped.seq_len = 16;  // GPT-2's position table (max_positions 0: seq_len rows)
  EXPECT_EQ(hf_model_difference(gpt2, dropped), "n_positions 8 vs 16");
  dropped.seq_len = kModel.seq_len;
  dropped.vocab_size = 42;
  EXPECT_EQ(hf_model_difference(gpt2, dropped), "vocab_size 41 vs 42");
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

  s = llama_with("model_type", "gemma2", "gemma2");
  EXPECT_MESSAGE_HAS(s, "\"model_type\" is \"gemma2\": not implemented");
  EXPECT_MESSAGE_HAS(s, "\"qwen2\", \"qwen3\", \"gemma\"");

  s = llama_with("rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}});
  EXPECT_MESSAGE_HAS(s, "m/config.json: rope_scaling type \"yarn\" is not implemented");
  s = llama_with("rope_scaling", {{"rope_type", "linear"}, {"factor", 0.5}});
  EXPECT_MESSAGE_HAS(s, "factor 0.5 must be >= 1");
  s = llama_with("rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}});
  EXPECT_MESSAGE_HAS(s, "\"low_freq_factor\" is missing");

  s = llama_with("num_key_value_heads", 5);
  EXPECT_MESSAGE_HAS(s, "m/config.json: \"num_key_value_heads\" is 5: must divide num_attention_heads (32)");
  s = llama_with("head_dim", 0);
  EXPECT_MESSAGE_HAS(s, "\"head_dim\" is 0: must be at least 1");
  s = llama_with("head_dim", 99);  // RoPE's frequencies need an even width
  EXPECT_MESSAGE_HAS(s, "m/config.json");
  EXPECT_MESSAGE_HAS(s, "99");
  s = llama_with("hidden_act", "gelu");
  EXPECT_MESSAGE_HAS(s, "\"hidden_act\" is \"gelu\"");
  s = llama_with("attention_bias", "yes");
  EXPECT_MESSAGE_HAS(s, "\"attention_bias\" is \"yes\": expected true or false");
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

// The model section's limits (model_limits.h) hold for config.json too: a
// billion layers is refused at once by the key, not by running out of memory.
TEST(HfConfigTest, SizesPastTheModelSectionsLimitsAreRefusedByKey) {
  absl::Status s = llama_with("num_hidden_layers", 1e9);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_MESSAGE_HAS(s, "m/config.json: \"num_hidden_layers\" is 1000000000.0: must be at most 100000 "
                        "(model.n_layer's limit)");
  s = llama_with("hidden_size", int64_t{1} << 21);
  EXPECT_MESSAGE_HAS(s, "\"hidden_size\" is 2097152: must be at most 1048576 (model.d_model's limit)");
  s = llama_with("intermediate_size", int64_t{1} << 25);
  EXPECT_MESSAGE_HAS(s, "\"intermediate_size\" is 33554432: must be at most 16777216 (model.d_ff's limit)");
  s = llama_with("num_attention_heads", 1 << 17);
  EXPECT_MESSAGE_HAS(s, "\"num_attention_heads\" is 131072: must be at most 65536 (model.n_head's limit)");
  s = llama_with("num_key_value_heads", 1 << 17);
  EXPECT_MESSAGE_HAS(s, "\"num_key_value_heads\" is 131072: must be at most 65536 (model.n_kv_head's limit)");
  s = llama_with("vocab_size", int64_t{1} << 31);
  EXPECT_MESSAGE_HAS(s, "\"vocab_size\" is 2147483648: must be at most 2147483647 (model.vocab_size's limit)");
  s = llama_with("max_position_embeddings", int64_t{1} << 25);
  EXPECT_MESSAGE_HAS(s, "\"max_position_embeddings\" is 33554432: must be at most 16777216 "
                        "(model.max_positions's limit)");
  s = llama_with("num_hidden_layers", 0);
  EXPECT_MESSAGE_HAS(s, "\"num_hidden_layers\" is 0: must be at least 1");
  EXPECT_TRUE(llama_with("num_hidden_layers", 100000).ok());  // the limit itself is allowed

  Json g = parsed(kGpt2Config);
  g["n_layer"] = 1e9;
  s = gpt_config_from_hf(g, "g/config.json").status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_MESSAGE_HAS(s, "g/config.json: \"n_layer\" is 1000000000.0: must be at most 100000 (model.n_layer's limit)");
  g = parsed(kGpt2Config);
  g["n_positions"] = int64_t{1} << 25;
  EXPECT_MESSAGE_HAS(gpt_config_from_hf(g, "g/config.json").status(),
                     "\"n_positions\" is 33554432: must be at most 16777216 (model.max_positions's limit)");
  g = parsed(kGpt2Config);
  g["n_embd"] = int64_t{1} << 21;
  g["n_head"] = 16;
  EXPECT_MESSAGE_HAS(gpt_config_from_hf(g, "g/config.json").status(),
                     "\"n_embd\" is 2097152: must be at most 1048576 (model.d_model's limit)");
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
  // Llama's: GQA shapes (q/k/v and gate/up fused: 4 query heads of 4 and 2
  // key/value heads' k and v, 32 rows; 2 x 40), the untied head last.
  GptConfig gqa = llama;
  gqa.n_head = 4;
  gqa.n_kv_head = 2;
  gqa.d_ff = 40;
  const auto l = gpt_parameter_shapes(gqa);
  ASSERT_EQ(l.size(), 1 + 6 * 2 + 2u);
  EXPECT_EQ(l[0], (std::pair<std::string, Shape>{"embed_tokens.weight", {41, 16}}));
  EXPECT_EQ(l[2], (std::pair<std::string, Shape>{"layers.0.self_attn.qkv_proj.weight", {32, 16}}));
  EXPECT_EQ(l[5], (std::pair<std::string, Shape>{"layers.0.mlp.gate_up_proj.weight", {80, 16}}));
  EXPECT_EQ(l[6], (std::pair<std::string, Shape>{"layers.0.mlp.down_proj.weight", {16, 40}}));
  // Hugging Face's tensors, by rows.
  const std::vector<FusedPart> qkv_parts = fused_parts(gqa, "layers.1.self_attn.qkv_proj.weight");
  ASSERT_EQ(qkv_parts.size(), 3u);
  EXPECT_EQ(qkv_parts[0].name, "layers.1.self_attn.q_proj.weight");
  EXPECT_EQ(qkv_parts[0].rows, 16);
  EXPECT_EQ(qkv_parts[2].name, "layers.1.self_attn.v_proj.weight");
  EXPECT_EQ(qkv_parts[2].rows, 8);
  EXPECT_EQ(fused_parts(gqa, "layers.1.mlp.gate_up_proj.weight")[1].name, "layers.1.mlp.up_proj.weight");
  EXPECT_TRUE(fused_parts(gqa, "layers.1.mlp.down_proj.weight").empty());
  // LoRA on q_proj keeps q/k/v apart (PEFT's modules); gate/up stay fused.
  GptConfig adapted = gqa;
  adapted.lora.r = 2;
  adapted.lora.target_modules = {"q_proj"};
  const auto a = gpt_parameter_shapes(adapted);
  EXPECT_EQ(a[4], (std::pair<std::string, Shape>{"layers.0.self_attn.q_proj.weight", {16, 16}}));
  EXPECT_EQ(a[5], (std::pair<std::string, Shape>{"layers.0.self_attn.k_proj.weight", {8, 16}}));
  EXPECT_EQ(a[9].first, "layers.0.mlp.gate_up_proj.weight");
  {
    Gpt m(adapted);  // the model's own list
    std::vector<std::pair<std::string, Shape>> got;
    for (Parameter* p : m.parameters()) got.emplace_back(p->name(), p->shape());
    EXPECT_EQ(got, a);
  }
  EXPECT_EQ(l.back().first, "lm_head.weight");
  gqa.tie_word_embeddings = true;
  EXPECT_EQ(gpt_parameter_shapes(gqa).back().first, "norm.weight");

  // Every family's list is its model's own, and num_parameters counts it.
  for (const ModelFamily& family : kModelFamilies) {
    GptConfig c = gqa;
    c.arch = family.arch;
    if (family.features.qk_norm || family.features.embed_scale) c.d_head = 8;  // their own width
    Gpt m(c);
    const auto want = gpt_parameter_shapes(c);
    std::vector<std::pair<std::string, Shape>> got;
    int64_t total = 0;
    for (Parameter* p : m.parameters()) {
      got.emplace_back(p->name(), p->shape());
      total += p->numel();
    }
    EXPECT_EQ(got, want) << family.name;
    EXPECT_EQ(total, c.num_parameters()) << family.name;  // a tied head is the table, counted once
  }
  // What each adds to Llama's list.
  GptConfig qwen3 = gqa;
  qwen3.arch = ModelArch::kQwen3;
  qwen3.d_head = 8;
  const auto q3 = gpt_parameter_shapes(qwen3);
  EXPECT_EQ(q3[2], (std::pair<std::string, Shape>{"layers.0.self_attn.qkv_proj.weight", {64, 16}}));
  EXPECT_EQ(q3[3], (std::pair<std::string, Shape>{"layers.0.self_attn.o_proj.weight", {16, 32}}));
  EXPECT_EQ(q3[4], (std::pair<std::string, Shape>{"layers.0.self_attn.q_norm.weight", {8}}));
  GptConfig qwen2 = gqa;
  qwen2.arch = ModelArch::kQwen2;
  const auto q2 = gpt_parameter_shapes(qwen2);
  EXPECT_EQ(q2[3], (std::pair<std::string, Shape>{"layers.0.self_attn.qkv_proj.bias", {32}}));
  EXPECT_EQ(q2[4].first, "layers.0.self_attn.o_proj.weight");  // no o_proj bias
  EXPECT_EQ(q2[5].first, "layers.0.post_attention_layernorm.weight");
}

}  // namespace
}  // namespace zero
