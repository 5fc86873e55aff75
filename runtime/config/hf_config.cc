// Hugging Face config.json <-> GptConfig, and tensor names; see hf_config.h.
#include "runtime/config/hf_config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "core/status.h"
#include "core/strings.h"
#include "kernels/rope.h"
#include "runtime/config/model_limits.h"

namespace zero {

namespace {

constexpr const char* kSupported =
    "supported: \"gpt2\", \"llama\", \"mistral\", \"qwen2\", \"qwen3\", \"gemma\", \"mixtral\", \"qwen2_moe\", "
    "\"qwen3_moe\" (without sliding-window attention)";

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool starts_with(const std::string& s, std::string_view prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// A float as the shortest decimal that reads back as the same float, as a
// double: config.json says 1e-05, not 9.999999747378752e-06.
double shortest(float f) {
  char buf[32];
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof(buf), "%.*g", digits, static_cast<double>(f));
    if (std::strtof(buf, nullptr) == f) break;
  }
  return std::strtod(buf, nullptr);
}

// Typed access to one config.json, every error naming the file, the key and
// its value. A key that is absent or null takes its default (as transformers
// reads it); without a default it is required.
class HfKeys {
 public:
  HfKeys(const Json& j, const std::string& path) : j_(j), path_(path) {}

  absl::Status bad(std::string_view key, std::string_view why) const {
    return absl::InvalidArgumentError(cat(path_, ": \"", key, "\" is ", shown(key), ": ", why));
  }
  bool has(std::string_view key) const { return j_.contains(key) && !j_.at(key).is_null(); }

  absl::StatusOr<int64_t> integer(std::string_view key, std::optional<int64_t> fallback = std::nullopt,
                                  int64_t min = 1) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      return absl::InvalidArgumentError(cat(path_, ": \"", key, "\" is missing (an integer is required)"));
    }
    const Json& v = j_.at(key);
    int64_t n = 0;
    if (v.is_number_integer()) {
      n = v.get<int64_t>();
    } else if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() &&
               std::fabs(v.get<double>()) < 9e15) {
      n = static_cast<int64_t>(v.get<double>());
    } else {
      return bad(key, "expected an integer");
    }
    if (n < min) return bad(key, cat("must be at least ", min));
    return n;
  }
  // One of the model's sizes: also within the model section's range for the
  // same field (an explicit 0 is refused: "default" is the section's meaning).
  absl::StatusOr<int64_t> size(std::string_view key, const ModelKeyLimit& limit,
                               std::optional<int64_t> fallback = std::nullopt) const {
    ZE_ASSIGN_OR_RETURN(const int64_t n, integer(key, fallback, std::max<int64_t>(1, limit.min)));
    if (n > limit.max) return bad(key, cat("must be at most ", limit.max, " (", limit.key, "'s limit)"));
    return n;
  }
  absl::StatusOr<double> number(std::string_view key, double fallback) const {
    if (!has(key)) return fallback;
    const Json& v = j_.at(key);
    if (!v.is_number()) return bad(key, "expected a number");
    return v.get<double>();
  }
  absl::StatusOr<bool> boolean(std::string_view key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j_.at(key).is_boolean()) return bad(key, "expected true or false");
    return j_.at(key).get<bool>();
  }
  absl::StatusOr<std::string> string(std::string_view key, std::string fallback) const {
    if (!has(key)) return fallback;
    if (!j_.at(key).is_string()) return bad(key, "expected a string");
    return j_.at(key).get<std::string>();
  }

 private:
  std::string shown(std::string_view key) const {
    if (!j_.contains(key)) return "missing";
    std::string s = j_.at(key).dump();
    return s.size() > 200 ? s.substr(0, 200) + "..." : s;
  }
  const Json& j_;
  const std::string& path_;
};

// RoPE as transformers 4.x or 5.x writes it.
struct HfRope {
  double theta = 10000.0;
  RopeScaling scaling;
};

// One RoPE description object: 4.x's "rope_scaling" (the scaling only) or
// 5.x's "rope_parameters" (theta too). `label` names it in errors.
absl::StatusOr<HfRope> rope_from_object(const Json& r, const std::string& path, const std::string& label,
                                        double theta_fallback) {
  HfRope out;
  out.theta = theta_fallback;
  const std::string where = path + " " + label;
  const HfKeys keys(r, where);
  for (auto it = r.begin(); it != r.end(); ++it) {
    if (it.value().is_object()) {
      return absl::InvalidArgumentError(cat(where, ": \"", it.key(), "\" is an object: RoPE parameters per "
                                            "attention type (Gemma's, ModernBERT's) are not implemented"));
    }
  }
  ZE_ASSIGN_OR_RETURN(out.theta, keys.number("rope_theta", theta_fallback));
  ZE_ASSIGN_OR_RETURN(const double partial, keys.number("partial_rotary_factor", 1.0));
  if (partial != 1.0) return keys.bad("partial_rotary_factor", "only 1 (rotating the whole head) is implemented");
  // Newer configs say "rope_type", older ones "type" (transformers 5 may write both).
  ZE_ASSIGN_OR_RETURN(std::string type, keys.string("rope_type", ""));
  ZE_ASSIGN_OR_RETURN(const std::string old_type, keys.string("type", ""));
  if (type.empty()) type = old_type;
  else if (!old_type.empty() && old_type != type) {
    return keys.bad("type", cat("contradicts \"rope_type\" (\"", type, "\")"));
  }
  if (type.empty() || type == "default") return out;  // "default": plain RoPE
  if (type != "linear" && type != "llama3") {
    return absl::InvalidArgumentError(cat(path, ": ", label, " type \"", type,
                                          "\" is not implemented (\"linear\" and \"llama3\" are; dynamic, yarn, "
                                          "longrope and the others are not)"));
  }
  RopeScaling& s = out.scaling;
  s.type = type;
  if (!keys.has("factor")) return absl::InvalidArgumentError(cat(where, ": \"factor\" is missing"));
  ZE_ASSIGN_OR_RETURN(s.factor, keys.number("factor", 1.0));
  if (type == "llama3") {
    for (const char* k : {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
      if (!keys.has(k)) return absl::InvalidArgumentError(cat(where, ": \"", k, "\" is missing (llama3 needs it)"));
    ZE_ASSIGN_OR_RETURN(s.low_freq_factor, keys.number("low_freq_factor", 1.0));
    ZE_ASSIGN_OR_RETURN(s.high_freq_factor, keys.number("high_freq_factor", 4.0));
    ZE_ASSIGN_OR_RETURN(s.original_max_position_embeddings, keys.integer("original_max_position_embeddings"));
  }
  return out;
}

bool same_scaling(const RopeScaling& a, const RopeScaling& b) {
  if (a.type != b.type) return false;
  if (a.type.empty()) return true;
  if (a.factor != b.factor) return false;
  return a.type != "llama3" ||
         (a.low_freq_factor == b.low_freq_factor && a.high_freq_factor == b.high_freq_factor &&
          a.original_max_position_embeddings == b.original_max_position_embeddings);
}

std::string scaling_string(const RopeScaling& s) {
  if (s.type.empty()) return "none";
  std::string out = cat(s.type, " factor ", s.factor);
  if (s.type == "llama3") {
    out += cat(", low_freq_factor ", s.low_freq_factor, ", high_freq_factor ", s.high_freq_factor,
               ", original_max_position_embeddings ", s.original_max_position_embeddings);
  }
  return out;
}

// RoPE's base and scaling in either form: transformers 4.x's top-level
// "rope_theta" and "rope_scaling" (null or an object), or 5.x's
// "rope_parameters" ({"rope_theta", "rope_type", "factor", ...}). A config
// with both forms must say the same thing in each.
absl::StatusOr<HfRope> rope_from_hf(const Json& hf, const std::string& path) {
  const HfKeys keys(hf, path);
  HfRope old_form;
  ZE_ASSIGN_OR_RETURN(old_form.theta, keys.number("rope_theta", 10000.0));
  ZE_ASSIGN_OR_RETURN(const double partial, keys.number("partial_rotary_factor", 1.0));
  if (partial != 1.0) return keys.bad("partial_rotary_factor", "only 1 (rotating the whole head) is implemented");
  if (keys.has("rope_scaling")) {
    if (!hf.at("rope_scaling").is_object()) return keys.bad("rope_scaling", "expected null or an object");
    ZE_ASSIGN_OR_RETURN(const HfRope r, rope_from_object(hf.at("rope_scaling"), path, "rope_scaling", old_form.theta));
    old_form.scaling = r.scaling;
    // transformers 5 folds rope_theta into the scaling object when it saves a 4.x config's.
    if (r.theta != old_form.theta) {
      if (keys.has("rope_theta")) {
        return keys.bad("rope_theta", cat("contradicts rope_scaling's \"rope_theta\" (", r.theta, ")"));
      }
      old_form.theta = r.theta;
    }
  }
  if (!keys.has("rope_parameters")) return old_form;
  if (!hf.at("rope_parameters").is_object()) return keys.bad("rope_parameters", "expected null or an object");
  ZE_ASSIGN_OR_RETURN(const HfRope new_form,
                      rope_from_object(hf.at("rope_parameters"), path, "rope_parameters", old_form.theta));
  if (keys.has("rope_theta") && new_form.theta != old_form.theta) {
    return keys.bad("rope_theta", cat("contradicts rope_parameters' \"rope_theta\" (", new_form.theta, ")"));
  }
  if (keys.has("rope_scaling") && !same_scaling(old_form.scaling, new_form.scaling)) {
    return absl::InvalidArgumentError(cat(path, ": \"rope_scaling\" (", scaling_string(old_form.scaling),
                                          ") contradicts \"rope_parameters\" (", scaling_string(new_form.scaling),
                                          ")"));
  }
  return new_form;
}

// The families with RoPE, one row each: what their config.json says (and,
// when a key is absent, what transformers assumes), read by one function and
// written by another. The layers' features come from kModelFamilies
// (graph/model_features.h); a row only says how Hugging Face spells them.
struct HfFamily {
  ModelArch arch;
  const char* architecture;           // "architectures"' class
  int64_t default_positions;          // max_position_embeddings when absent
  bool default_tied;                  // tie_word_embeddings when absent
  int64_t default_head_dim;           // head_dim when absent (0: hidden_size / num_attention_heads)
  const char* activation;             // hidden_act, what the MLP's gate computes
  const char* legacy_activation;      // another hidden_act transformers reads as the same ("" none)
  bool attention_bias_key;            // "attention_bias" puts biases on q, k, v and o
  bool mlp_bias_key;                  // "mlp_bias" puts biases on the MLP
  enum Window { kNoWindow, kMistralWindow, kQwenWindow } window;  // how a sliding window is asked for
};

// transformers 5.24's defaults (LlamaConfig, MistralConfig, Qwen2Config,
// Qwen3Config, GemmaConfig).
constexpr HfFamily kHfFamilies[] = {
    {ModelArch::kLlama, "LlamaForCausalLM", 2048, false, 0, "silu", "", true, true, HfFamily::kNoWindow},
    {ModelArch::kMistral, "MistralForCausalLM", 4096 * 32, false, 0, "silu", "", false, false,
     HfFamily::kMistralWindow},
    {ModelArch::kQwen2, "Qwen2ForCausalLM", 32768, false, 0, "silu", "", false, false, HfFamily::kQwenWindow},
    {ModelArch::kQwen3, "Qwen3ForCausalLM", 32768, false, 128, "silu", "", true, false, HfFamily::kQwenWindow},
    {ModelArch::kGemma, "GemmaForCausalLM", 8192, true, 256, "gelu_pytorch_tanh", "gelu", true, false,
     HfFamily::kNoWindow},
    {ModelArch::kMixtral, "MixtralForCausalLM", 4096 * 32, false, 0, "silu", "", false, false,
     HfFamily::kMistralWindow},
    {ModelArch::kQwen2Moe, "Qwen2MoeForCausalLM", 32768, false, 0, "silu", "", false, false, HfFamily::kQwenWindow},
    {ModelArch::kQwen3Moe, "Qwen3MoeForCausalLM", 32768, false, 0, "silu", "", true, false, HfFamily::kQwenWindow},
};

// A mixture of experts' keys (MixtralConfig, Qwen2MoeConfig, Qwen3MoeConfig
// of transformers 5.25, and the hub's files): Mixtral's experts are
// intermediate_size wide and always renormalise their weights; Qwen's have
// moe_intermediate_size, norm_topk_prob, decoder_sparse_step and
// mlp_only_layers (their other blocks dense, of intermediate_size), and
// Qwen2-MoE a shared expert.
absl::Status moe_from_hf(const HfKeys& keys, const Json& hf, GptConfig& c) {
  MoeConfig& m = c.moe;
  const bool mixtral = c.arch == ModelArch::kMixtral;
  // Experts: Mixtral's num_local_experts, Qwen's num_experts (transformers 5
  // writes Qwen3-MoE's as num_local_experts too).
  const char* experts_key = mixtral || !keys.has("num_experts") ? "num_local_experts" : "num_experts";
  const int64_t default_experts = mixtral ? 8 : c.arch == ModelArch::kQwen2Moe ? 60 : 128;
  ZE_ASSIGN_OR_RETURN(m.num_experts, keys.size(experts_key, kExpertLimit, default_experts));
  const int64_t default_top_k = mixtral ? 2 : c.arch == ModelArch::kQwen2Moe ? 4 : 8;
  ZE_ASSIGN_OR_RETURN(m.top_k, keys.size("num_experts_per_tok", kExpertLimit, default_top_k));
  if (m.top_k > m.num_experts) {
    return keys.bad("num_experts_per_tok", cat("is more than ", experts_key, " (", m.num_experts, ")"));
  }
  ZE_ASSIGN_OR_RETURN(const double aux_coef, keys.number("router_aux_loss_coef", 0.001));
  if (!(aux_coef >= 0.0)) return keys.bad("router_aux_loss_coef", "must be >= 0");
  m.aux_loss_coef = static_cast<float>(aux_coef);
  if (mixtral) {
    m.expert_d_ff = c.d_ff;
    m.norm_topk_prob = true;
    ZE_ASSIGN_OR_RETURN(const double jitter, keys.number("router_jitter_noise", 0.0));
    if (jitter != 0.0) return keys.bad("router_jitter_noise", "router jitter noise is not implemented (0 only)");
    return absl::OkStatus();
  }
  ZE_ASSIGN_OR_RETURN(m.expert_d_ff, keys.size("moe_intermediate_size", kFfnWidthLimit,
                                               c.arch == ModelArch::kQwen2Moe ? 1408 : 768));
  ZE_ASSIGN_OR_RETURN(m.norm_topk_prob, keys.boolean("norm_topk_prob", false));
  ZE_ASSIGN_OR_RETURN(m.decoder_sparse_step, keys.size("decoder_sparse_step", kLayerLimit, 1));
  if (keys.has("mlp_only_layers") && !hf.at("mlp_only_layers").is_null()) {
    const Json& only = hf.at("mlp_only_layers");
    if (!only.is_array()) return keys.bad("mlp_only_layers", "expected a list of layer numbers");
    for (const Json& l : only) {
      if (!l.is_number_integer() || l.get<int64_t>() < 0 || l.get<int64_t>() >= c.n_layer) {
        return keys.bad("mlp_only_layers", cat(l.dump(), " is not a layer number below num_hidden_layers (",
                                               c.n_layer, ")"));
      }
      m.mlp_only_layers.push_back(l.get<int64_t>());
    }
  }
  if (c.arch == ModelArch::kQwen2Moe) {
    ZE_ASSIGN_OR_RETURN(m.shared_expert_d_ff, keys.size("shared_expert_intermediate_size", kFfnWidthLimit, 5632));
  }
  return absl::OkStatus();
}

const HfFamily* hf_family(std::string_view model_type) {
  for (const HfFamily& f : kHfFamilies)
    if (model_family(f.arch).name == model_type) return &f;
  return nullptr;
}

const HfFamily& hf_family(ModelArch arch) {
  for (const HfFamily& f : kHfFamilies)
    if (f.arch == arch) return f;
  ZE_CHECK(false) << "no Hugging Face row for " << model_family(arch).name;
  return kHfFamilies[0];
}

// The attention pattern: full attention in every layer (sliding windows are
// not implemented), as each family asks for a window.
absl::Status check_full_attention(const HfKeys& keys, const Json& hf, const HfFamily& f, int64_t positions) {
  if (f.window == HfFamily::kMistralWindow && keys.has("sliding_window")) {
    ZE_ASSIGN_OR_RETURN(const int64_t window, keys.integer("sliding_window"));
    if (window < positions) {
      return keys.bad("sliding_window", cat("sliding-window attention is not implemented (a window of at least "
                                            "max_position_embeddings, ", positions, ", or null is full "
                                            "attention and loads)"));
    }
  }
  if (f.window == HfFamily::kQwenWindow) {
    ZE_ASSIGN_OR_RETURN(const bool sliding, keys.boolean("use_sliding_window", false));
    if (sliding) return keys.bad("use_sliding_window", "sliding-window attention is not implemented");
  }
  if (keys.has("layer_types")) {
    const Json& types = hf.at("layer_types");
    if (!types.is_array()) return keys.bad("layer_types", "expected a list");
    for (const Json& t : types) {
      if (t != "full_attention") {
        return keys.bad("layer_types", cat("only \"full_attention\" layers are implemented, not ", t.dump()));
      }
    }
  }
  ZE_ASSIGN_OR_RETURN(const bool bidirectional, keys.boolean("use_bidirectional_attention", false));
  if (bidirectional) return keys.bad("use_bidirectional_attention", "only causal attention is implemented");
  return absl::OkStatus();
}

absl::StatusOr<GptConfig> rope_family_from_hf(const Json& hf, const std::string& path, const HfFamily& family) {
  const HfKeys keys(hf, path);
  GptConfig c;
  c.arch = family.arch;
  ZE_ASSIGN_OR_RETURN(c.d_model, keys.size("hidden_size", kWidthLimit));
  ZE_ASSIGN_OR_RETURN(c.d_ff, keys.size("intermediate_size", kFfnWidthLimit));
  ZE_ASSIGN_OR_RETURN(c.n_layer, keys.size("num_hidden_layers", kLayerLimit));
  ZE_ASSIGN_OR_RETURN(c.n_head, keys.size("num_attention_heads", kHeadLimit));
  ZE_ASSIGN_OR_RETURN(c.n_kv_head, keys.size("num_key_value_heads", kKvHeadLimit, c.n_head));
  ZE_ASSIGN_OR_RETURN(c.vocab_size, keys.size("vocab_size", kVocabLimit));
  ZE_ASSIGN_OR_RETURN(c.max_positions, keys.size("max_position_embeddings", kPositionsLimit, family.default_positions));
  c.seq_len = c.max_positions;
  if (c.n_head % c.n_kv_head != 0) {
    return keys.bad("num_key_value_heads",
                    cat("must divide num_attention_heads (", c.n_head, ") for grouped-query attention"));
  }
  // head_dim: its own width (Qwen3, Gemma, Mistral-Nemo), or hidden_size / num_attention_heads.
  if (keys.has("head_dim") || family.default_head_dim > 0) {
    ZE_ASSIGN_OR_RETURN(c.d_head, keys.size("head_dim", kHeadDimLimit, family.default_head_dim));
    if (c.d_head * c.n_head == c.d_model) c.d_head = 0;  // the derived width: nothing to say
  } else if (c.d_model % c.n_head != 0) {
    return keys.bad("hidden_size", cat("not a multiple of num_attention_heads (", c.n_head, "), and no head_dim"));
  }
  ZE_ASSIGN_OR_RETURN(const double eps, keys.number("rms_norm_eps", 1e-6));
  if (!(eps > 0.0)) return keys.bad("rms_norm_eps", "must be > 0");
  c.norm_eps = static_cast<float>(eps);
  ZE_ASSIGN_OR_RETURN(const HfRope rope, rope_from_hf(hf, path));
  c.rope_theta = rope.theta;
  c.rope_scaling = rope.scaling;
  const absl::StatusOr<RopeFreqs> freqs = rope_frequencies(c.head_dim(), c.rope_theta, c.rope_scaling);
  if (!freqs.ok()) return annotate(freqs.status(), path);
  ZE_ASSIGN_OR_RETURN(c.tie_word_embeddings, keys.boolean("tie_word_embeddings", family.default_tied));
  ZE_ASSIGN_OR_RETURN(const double init, keys.number("initializer_range", 0.02));
  if (!(init > 0.0)) return keys.bad("initializer_range", "must be > 0");
  c.init_std = static_cast<float>(init);

  // The gate's activation; older Gemma files say it again as hidden_activation.
  const std::string only = cat("only \"", family.activation, "\" is implemented for ", model_family(family.arch).name);
  ZE_ASSIGN_OR_RETURN(const std::string act, keys.string("hidden_act", family.activation));
  const bool legacy = *family.legacy_activation != '\0' && act == family.legacy_activation;
  if (act != family.activation && !legacy) return keys.bad("hidden_act", only);
  ZE_ASSIGN_OR_RETURN(const std::string act2, keys.string("hidden_activation", family.activation));
  if (act2 != family.activation) return keys.bad("hidden_activation", only);
  ModelFeatures features = model_family(family.arch).features;
  if (family.attention_bias_key) {
    ZE_ASSIGN_OR_RETURN(const bool bias, keys.boolean("attention_bias", false));
    if (bias) features.qkv_bias = features.o_bias = true;
  }
  if (family.mlp_bias_key) {
    ZE_ASSIGN_OR_RETURN(features.mlp_bias, keys.boolean("mlp_bias", false));
  }
  if (family.arch == ModelArch::kQwen2Moe) {  // transformers 5 writes Qwen2-MoE's q/k/v biases as a key
    ZE_ASSIGN_OR_RETURN(features.qkv_bias, keys.boolean("qkv_bias", true));
  }
  if (features.qkv_bias != model_family(family.arch).features.qkv_bias || features.mlp_bias) c.feature_flags = features;
  if (is_mixture_of_experts(family.arch)) ZE_RETURN_IF_ERROR(moe_from_hf(keys, hf, c));
  ZE_ASSIGN_OR_RETURN(const double attn_dropout, keys.number("attention_dropout", 0.0));
  if (attn_dropout != 0.0) return keys.bad("attention_dropout", "dropout on attention probabilities is not implemented");
  ZE_RETURN_IF_ERROR(check_full_attention(keys, hf, family, c.max_positions));
  return c;
}

absl::StatusOr<GptConfig> gpt2_from_hf(const Json& hf, const std::string& path) {
  const HfKeys keys(hf, path);
  GptConfig c;
  c.arch = ModelArch::kGpt2;
  ZE_ASSIGN_OR_RETURN(c.d_model, keys.size("n_embd", kWidthLimit));
  ZE_ASSIGN_OR_RETURN(c.n_layer, keys.size("n_layer", kLayerLimit));
  ZE_ASSIGN_OR_RETURN(c.n_head, keys.size("n_head", kHeadLimit));
  ZE_ASSIGN_OR_RETURN(c.vocab_size, keys.size("vocab_size", kVocabLimit));
  ZE_ASSIGN_OR_RETURN(c.max_positions, keys.size("n_positions", kPositionsLimit));
  c.seq_len = c.max_positions;
  if (c.d_model % c.n_head != 0) return keys.bad("n_embd", cat("not a multiple of n_head (", c.n_head, ")"));
  if (keys.has("n_inner")) {
    ZE_ASSIGN_OR_RETURN(const int64_t inner, keys.integer("n_inner"));
    if (inner != 4 * c.d_model) return keys.bad("n_inner", cat("only null or 4 n_embd (", 4 * c.d_model, ") is implemented"));
  }
  ZE_ASSIGN_OR_RETURN(const double eps, keys.number("layer_norm_epsilon", 1e-5));
  if (std::fabs(eps - 1e-5) > 1e-12) return keys.bad("layer_norm_epsilon", "our LayerNorm uses 1e-5");
  // gelu_pytorch_tanh is the same tanh approximation under another name.
  ZE_ASSIGN_OR_RETURN(const std::string act, keys.string("activation_function", "gelu_new"));
  if (act != "gelu_new" && act != "gelu_pytorch_tanh") {
    return keys.bad("activation_function", "only \"gelu_new\" (GELU's tanh form) is implemented");
  }
  ZE_ASSIGN_OR_RETURN(const bool tied, keys.boolean("tie_word_embeddings", true));
  if (!tied) return keys.bad("tie_word_embeddings", "GPT-2's LM head is always tied to wte here");
  c.tie_word_embeddings = true;
  ZE_ASSIGN_OR_RETURN(const bool scaled, keys.boolean("scale_attn_weights", true));
  if (!scaled) return keys.bad("scale_attn_weights", "attention is always scaled by 1/sqrt(head_dim) here");
  for (const char* k : {"scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention"}) {
    ZE_ASSIGN_OR_RETURN(const bool on, keys.boolean(k, false));
    if (on) return keys.bad(k, "not implemented");
  }
  ZE_ASSIGN_OR_RETURN(const double init, keys.number("initializer_range", 0.02));
  if (!(init > 0.0)) return keys.bad("initializer_range", "must be > 0");
  c.init_std = static_cast<float>(init);
  return c;
}

}  // namespace

absl::StatusOr<GptConfig> gpt_config_from_hf(const Json& hf, const std::string& path) {
  if (!hf.is_object()) return absl::InvalidArgumentError(cat(path, ": a config.json is a JSON object"));
  const HfKeys keys(hf, path);
  if (!keys.has("model_type")) {
    return absl::InvalidArgumentError(cat(path, ": \"model_type\" is missing (", kSupported, ")"));
  }
  ZE_ASSIGN_OR_RETURN(const std::string type, keys.string("model_type", ""));
  // The weights' dtype: 4.x's "torch_dtype", 5.x's "dtype" (not used here,
  // where the files' own dtypes count; two that differ are refused).
  ZE_ASSIGN_OR_RETURN(const std::string torch_dtype, keys.string("torch_dtype", ""));
  ZE_ASSIGN_OR_RETURN(const std::string dtype, keys.string("dtype", ""));
  if (!torch_dtype.empty() && !dtype.empty() && torch_dtype != dtype) {
    return keys.bad("dtype", cat("contradicts \"torch_dtype\" (\"", torch_dtype, "\")"));
  }
  if (type == "gpt2") return gpt2_from_hf(hf, path);
  if (const HfFamily* family = hf_family(type)) return rope_family_from_hf(hf, path, *family);
  return keys.bad("model_type", cat("not implemented (", kSupported, ")"));
}

Json hf_config_json(const GptConfig& c, DType dtype) {
  const char* torch_dtype = dtype == DType::kBF16 ? "bfloat16" : dtype == DType::kF16 ? "float16" : "float32";
  Json j = Json::object();
  if (c.rope()) {
    const HfFamily& family = hf_family(c.arch);
    const ModelFeatures f = c.features();
    j["architectures"] = {family.architecture};
    j["model_type"] = c.family_name();
    j["hidden_size"] = c.d_model;
    j["intermediate_size"] = c.ffn_width();
    j["num_hidden_layers"] = c.n_layer;
    j["num_attention_heads"] = c.n_head;
    j["num_key_value_heads"] = c.kv_heads();
    j["head_dim"] = c.head_dim();
    j["hidden_act"] = family.activation;
    j["max_position_embeddings"] = c.positions();
    j["vocab_size"] = c.vocab_size;
    j["rms_norm_eps"] = shortest(c.norm_eps);
    j["rope_theta"] = c.rope_theta;
    if (c.rope_scaling.type.empty() || c.rope_scaling.type == "default") {
      j["rope_scaling"] = nullptr;
    } else {
      Json r = {{"rope_type", c.rope_scaling.type}, {"factor", c.rope_scaling.factor}};
      if (c.rope_scaling.type == "llama3") {
        r["low_freq_factor"] = c.rope_scaling.low_freq_factor;
        r["high_freq_factor"] = c.rope_scaling.high_freq_factor;
        r["original_max_position_embeddings"] = c.rope_scaling.original_max_position_embeddings;
      }
      j["rope_scaling"] = r;
    }
    j["tie_word_embeddings"] = c.tie_word_embeddings;
    if (family.attention_bias_key) j["attention_bias"] = f.o_bias;
    if (family.mlp_bias_key) j["mlp_bias"] = f.mlp_bias;
    if (family.window == HfFamily::kMistralWindow) j["sliding_window"] = nullptr;
    if (family.window == HfFamily::kQwenWindow) j["use_sliding_window"] = false;
    j["attention_dropout"] = 0.0;
    // Not GemmaConfig's defaults (pad 0, eos 1, bos 2): its pad id becomes the
    // embedding's padding_idx, whose row transformers never trains (ours does).
    if (c.arch == ModelArch::kGemma) j["pad_token_id"] = j["bos_token_id"] = j["eos_token_id"] = nullptr;
    j["initializer_range"] = shortest(c.init_std);
    if (is_mixture_of_experts(c.arch)) {
      const MoeConfig& m = c.moe;
      j[c.arch == ModelArch::kQwen2Moe ? "num_experts" : "num_local_experts"] = m.num_experts;
      j["num_experts_per_tok"] = m.top_k;
      j["router_aux_loss_coef"] = shortest(m.aux_loss_coef);
      j["output_router_logits"] = false;
      if (c.arch == ModelArch::kMixtral) {
        j["intermediate_size"] = m.expert_d_ff;
        j["router_jitter_noise"] = 0.0;
      } else {
        j["moe_intermediate_size"] = m.expert_d_ff;
        j["norm_topk_prob"] = m.norm_topk_prob;
        j["decoder_sparse_step"] = m.decoder_sparse_step;
        j["mlp_only_layers"] = m.mlp_only_layers;
        if (c.arch == ModelArch::kQwen2Moe) {
          j["shared_expert_intermediate_size"] = m.shared_expert_d_ff;
          j["qkv_bias"] = f.qkv_bias;
        }
      }
    }
  } else {
    j["architectures"] = {"GPT2LMHeadModel"};
    j["model_type"] = "gpt2";
    j["n_embd"] = c.d_model;
    j["n_layer"] = c.n_layer;
    j["n_head"] = c.n_head;
    j["n_inner"] = nullptr;
    j["n_positions"] = c.positions();
    j["n_ctx"] = c.positions();
    j["vocab_size"] = c.vocab_size;
    j["layer_norm_epsilon"] = 1e-5;
    j["activation_function"] = "gelu_new";
    j["tie_word_embeddings"] = true;
    // Where our dropout sits (embeddings, residual branches; none on attention).
    j["embd_pdrop"] = shortest(c.dropout);
    j["resid_pdrop"] = shortest(c.dropout);
    j["attn_pdrop"] = 0.0;
    j["initializer_range"] = shortest(c.init_std);
    // GPT2Config's default <|endoftext|> (50256) is outside a smaller
    // vocabulary, which transformers 5 warns about on load.
    if (c.vocab_size <= 50256) j["bos_token_id"] = j["eos_token_id"] = nullptr;
  }
  j["torch_dtype"] = torch_dtype;
  return j;
}

Json hf_config_json(const GptConfig& c, DType dtype, const Json& source) {
  Json j = hf_config_json(c, dtype);
  if (!source.is_object()) return j;
  Json out = source;
  out.erase("rope_parameters");  // ours: rope_theta and rope_scaling, read by 4.x and 5.x alike
  for (auto it = j.begin(); it != j.end(); ++it) {
    const bool token_id = it.key() == "bos_token_id" || it.key() == "eos_token_id" || it.key() == "pad_token_id";
    if (!token_id || !source.contains(it.key())) out[it.key()] = it.value();
  }
  if (out.contains("dtype")) out["dtype"] = j["torch_dtype"];
  return out;
}

std::string hf_model_difference(const GptConfig& a_in, const GptConfig& b_in) {
  // Training-only settings and those a checkpoint does not describe.
  auto architecture = [](GptConfig g) {
    g.dropout = 0.0f;
    g.init_std = 0.02f;
    return hf_config_json(g, DType::kF32);
  };
  Json a = architecture(a_in), b = architecture(b_in);
  // model_type says the class; no weight of a RoPE family depends on its
  // positions (a run may go on at a longer seq_len).
  for (Json* j : {&a, &b}) {
    j->erase("architectures");
    if (a_in.rope() && b_in.rope()) j->erase("max_position_embeddings");
  }
  for (auto it = a.begin(); it != a.end(); ++it) {
    const Json& other = b.contains(it.key()) ? b.at(it.key()) : Json();
    if (other != it.value()) return cat(it.key(), " ", it.value().dump(), " vs ", other.dump());
  }
  for (auto it = b.begin(); it != b.end(); ++it) {
    if (!a.contains(it.key())) return cat(it.key(), " null vs ", it.value().dump());
  }
  return "";
}

bool is_gpt2_conv1d_weight(const std::string& name) {
  for (const char* s : {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"})
    if (ends_with(name, s)) return true;
  return false;
}

namespace {

// Mixtral's sparse blocks are "block_sparse_moe" with experts w1 (gate), w3
// (up) and w2 (down); ours (and Qwen-MoE's) are "mlp" with gate_proj,
// up_proj and down_proj. `to_hf` maps ours to Mixtral's, else back.
std::string mixtral_names(const std::string& name, bool to_hf) {
  const std::string_view ours_block = ".mlp.", theirs_block = ".block_sparse_moe.";
  const std::string_view from_block = to_hf ? ours_block : theirs_block, to_block = to_hf ? theirs_block : ours_block;
  const size_t at = name.find(from_block);
  if (at == std::string::npos || name.rfind("layers.", 0) != 0) return name;
  std::string out = name.substr(0, at) + std::string(to_block);
  std::string rest = name.substr(at + from_block.size());
  if (rest.rfind("experts.", 0) == 0) {
    static constexpr std::pair<std::string_view, std::string_view> kExpert[] = {
        {".gate_proj.weight", ".w1.weight"}, {".up_proj.weight", ".w3.weight"}, {".down_proj.weight", ".w2.weight"}};
    for (const auto& [ours, theirs] : kExpert) {
      const std::string_view from = to_hf ? ours : theirs, to = to_hf ? theirs : ours;
      if (ends_with(rest, from)) {
        rest = rest.substr(0, rest.size() - from.size()) + std::string(to);
        break;
      }
    }
  }
  return out + rest;
}

}  // namespace

std::string hf_tensor_name(const GptConfig& c, const std::string& ours) {
  if (!c.features().gpt2_names && ours == "lm_head.weight") return ours;
  return cat(hf_name_prefix(c), c.arch == ModelArch::kMixtral ? mixtral_names(ours, true) : ours);
}

std::string ours_from_hf_tensor_name(const GptConfig& c, const std::string& hf) {
  const std::string_view prefix = hf_name_prefix(c);
  const std::string name = starts_with(hf, prefix) ? hf.substr(prefix.size()) : hf;
  return c.arch == ModelArch::kMixtral ? mixtral_names(name, false) : name;
}

bool hf_stores_transposed(const GptConfig& c, const std::string& ours) {
  return c.features().gpt2_names && is_gpt2_conv1d_weight(ours);
}

std::vector<std::pair<std::string, Shape>> gpt_parameter_shapes(const GptConfig& c) {
  const int64_t C = c.d_model, F = c.ffn_width(), D = c.head_dim();
  const ModelFeatures f = c.features();
  std::vector<std::pair<std::string, Shape>> out;
  // A linear layer's weight [out, in] and, with a bias, its bias [out];
  // before them (the model's order) its LoRA adapters when it has them.
  auto linear = [&](const std::string& name, int64_t rows, int64_t cols, bool bias) {
    if (c.lora.targets(cat(hf_name_prefix(c), name))) {
      out.emplace_back(lora_a_name(name), Shape{c.lora.r, cols});
      out.emplace_back(lora_b_name(name), Shape{rows, c.lora.r});
    }
    out.emplace_back(name + ".weight", Shape{rows, cols});
    if (bias) out.emplace_back(name + ".bias", Shape{rows});
  };
  if (!f.gpt2_names) {
    out.emplace_back("embed_tokens.weight", Shape{c.vocab_size, C});
    for (int64_t i = 0; i < c.n_layer; ++i) {
      const std::string b = cat("layers.", i, ".");
      out.emplace_back(b + "input_layernorm.weight", Shape{C});
      if (fuses_qkv(c, i)) {
        linear(b + "self_attn.qkv_proj", (c.n_head + 2 * c.kv_heads()) * D, C, f.qkv_bias);
      } else {
        linear(b + "self_attn.q_proj", c.n_head * D, C, f.qkv_bias);
        linear(b + "self_attn.k_proj", c.kv_heads() * D, C, f.qkv_bias);
        linear(b + "self_attn.v_proj", c.kv_heads() * D, C, f.qkv_bias);
      }
      linear(b + "self_attn.o_proj", C, c.n_head * D, f.o_bias);
      if (f.qk_norm) {
        out.emplace_back(b + "self_attn.q_norm.weight", Shape{D});
        out.emplace_back(b + "self_attn.k_norm.weight", Shape{D});
      }
      out.emplace_back(b + "post_attention_layernorm.weight", Shape{C});
      if (c.moe.sparse_layer(i)) {
        const MoeConfig& m = c.moe;
        out.emplace_back(b + "mlp.gate.weight", Shape{m.num_experts, C});
        for (int64_t x = 0; x < m.num_experts; ++x) {
          out.emplace_back(cat(b, "mlp.experts.", x, ".gate_up_proj.weight"), Shape{2 * m.expert_d_ff, C});
          out.emplace_back(cat(b, "mlp.experts.", x, ".down_proj.weight"), Shape{C, m.expert_d_ff});
        }
        if (m.shared_expert_d_ff > 0) {
          out.emplace_back(b + "mlp.shared_expert.gate_up_proj.weight", Shape{2 * m.shared_expert_d_ff, C});
          out.emplace_back(b + "mlp.shared_expert.down_proj.weight", Shape{C, m.shared_expert_d_ff});
          out.emplace_back(b + "mlp.shared_expert_gate.weight", Shape{1, C});
        }
        continue;
      }
      if (fuses_gate_up(c, i)) {
        linear(b + "mlp.gate_up_proj", 2 * F, C, f.mlp_bias);
      } else {
        linear(b + "mlp.gate_proj", F, C, f.mlp_bias);
        linear(b + "mlp.up_proj", F, C, f.mlp_bias);
      }
      linear(b + "mlp.down_proj", C, F, f.mlp_bias);
    }
    out.emplace_back("norm.weight", Shape{C});
    if (!c.tied_head()) out.emplace_back("lm_head.weight", Shape{c.vocab_size, C});
    return out;
  }
  out.emplace_back("wte.weight", Shape{c.vocab_size, C});
  out.emplace_back("wpe.weight", Shape{c.positions(), C});
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string b = cat("h.", i, ".");
    out.emplace_back(b + "ln_1.weight", Shape{C});
    out.emplace_back(b + "ln_1.bias", Shape{C});
    linear(b + "attn.c_attn", 3 * C, C, true);
    linear(b + "attn.c_proj", C, C, true);
    out.emplace_back(b + "ln_2.weight", Shape{C});
    out.emplace_back(b + "ln_2.bias", Shape{C});
    linear(b + "mlp.c_fc", F, C, true);
    linear(b + "mlp.c_proj", C, F, true);
  }
  out.emplace_back("ln_f.weight", Shape{C});
  out.emplace_back("ln_f.bias", Shape{C});
  return out;
}

}  // namespace zero
