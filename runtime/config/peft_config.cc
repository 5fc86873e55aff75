// PEFT's adapter_config.json; see peft_config.h.
#include "runtime/config/peft_config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "core/strings.h"

namespace zero {

namespace {

absl::Status bad(const std::string& path, const std::string& key, const std::string& what) {
  return absl::InvalidArgumentError(cat(path, ": \"", key, "\" ", what));
}

// A key that must be absent, null, false or empty (PEFT's default) for our adapters.
bool is_default(const Json& v) {
  return v.is_null() || (v.is_boolean() && !v.get<bool>()) || ((v.is_object() || v.is_array()) && v.empty());
}

// The shortest decimal that reads back as `f`, as a double (how Python
// would write the value the user typed).
double shortest_double(float f) {
  for (int digits = 1; digits <= 9; ++digits) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.*g", digits, static_cast<double>(f));
    const double d = std::strtod(buf, nullptr);
    if (static_cast<float>(d) == f) return d;
  }
  return f;
}

}  // namespace

absl::StatusOr<LoraConfig> lora_config_from_peft(const Json& j, const std::string& path) {
  if (!j.is_object()) return absl::InvalidArgumentError(cat(path, ": not a JSON object"));
  LoraConfig c;
  const std::string type = j.value("peft_type", std::string());
  if (type != "LORA") {
    return bad(path, "peft_type", cat(j.contains("peft_type") ? j.at("peft_type").dump() : "absent",
                                      ": only LoRA adapters (\"LORA\") are supported"));
  }
  const Json& r = j.contains("r") ? j.at("r") : Json();
  if (!r.is_number_integer() || r.get<int64_t>() < 1) return bad(path, "r", cat(r.dump(), ": a positive integer"));
  c.r = r.get<int64_t>();
  if (j.contains("lora_alpha")) {
    if (!j.at("lora_alpha").is_number()) return bad(path, "lora_alpha", cat(j.at("lora_alpha").dump(), ": a number"));
    c.alpha = j.at("lora_alpha").get<double>();
  }
  if (j.contains("lora_dropout") && !j.at("lora_dropout").is_null()) {
    const Json& d = j.at("lora_dropout");
    if (!d.is_number() || d.get<double>() < 0.0 || d.get<double>() >= 1.0) {
      return bad(path, "lora_dropout", cat(d.dump(), ": a probability in [0, 1)"));
    }
    c.dropout = d.get<float>();
  }
  if (j.contains("use_rslora") && !j.at("use_rslora").is_null()) {
    if (!j.at("use_rslora").is_boolean()) return bad(path, "use_rslora", cat(j.at("use_rslora").dump(), ": true or false"));
    c.use_rslora = j.at("use_rslora").get<bool>();
  }
  const Json& targets = j.contains("target_modules") ? j.at("target_modules") : Json();
  if (targets.is_string()) {
    if (targets.get<std::string>() != "all-linear") {
      return bad(path, "target_modules",
                 cat(targets.dump(), ": a regular expression is not supported; list the layers' names "
                                     "([\"q_proj\", \"v_proj\"]) or say \"all-linear\""));
    }
    c.target_modules = {"all-linear"};
  } else if (targets.is_array() && !targets.empty()) {
    for (const Json& t : targets) {
      if (!t.is_string() || t.get<std::string>().empty()) {
        return bad(path, "target_modules", cat(targets.dump(), ": names of layers"));
      }
      c.target_modules.push_back(t.get<std::string>());
    }
    std::sort(c.target_modules.begin(), c.target_modules.end());
  } else {
    return bad(path, "target_modules", cat(targets.dump(), ": a list of the adapted layers' names"));
  }
  if (j.contains("bias") && j.at("bias") != "none") {
    return bad(path, "bias", cat(j.at("bias").dump(), ": only \"none\" (no bias trains)"));
  }
  // What PEFT can do and our adapters cannot: refused by key.
  for (const char* key : {"use_dora", "modules_to_save", "layers_to_transform", "layers_pattern", "rank_pattern",
                          "alpha_pattern", "lora_bias", "layer_replication", "use_qalora", "trainable_token_indices",
                          "exclude_modules"}) {
    if (j.contains(key) && !is_default(j.at(key))) {
      return bad(path, key, cat(j.at(key).dump(), ": not supported (LoRA of the same rank on every target layer, "
                                                  "no other trained modules)"));
    }
  }
  return c;
}

Json peft_adapter_config_json(const GptConfig& model, const std::string& base_model_name_or_path) {
  const LoraConfig& l = model.lora;
  Json j = Json::object();
  j["alpha_pattern"] = Json::object();
  j["base_model_name_or_path"] = base_model_name_or_path.empty() ? Json() : Json(base_model_name_or_path);
  j["bias"] = "none";
  j["fan_in_fan_out"] = model.features().gpt2_names;  // GPT-2's Conv1D layers store [in, out]
  j["inference_mode"] = true;
  j["init_lora_weights"] = true;
  j["layers_pattern"] = nullptr;
  j["layers_to_transform"] = nullptr;
  j["lora_alpha"] = std::floor(l.alpha) == l.alpha ? Json(static_cast<int64_t>(l.alpha)) : Json(l.alpha);
  j["lora_dropout"] = shortest_double(l.dropout);  // 0.05, not the float's 0.05000000074505806
  j["modules_to_save"] = nullptr;
  j["peft_type"] = "LORA";
  j["r"] = l.r;
  j["rank_pattern"] = Json::object();
  j["revision"] = nullptr;
  j["target_modules"] = lora_adapted_names(model, l);  // as PEFT records them once applied
  j["task_type"] = "CAUSAL_LM";
  j["use_dora"] = false;
  j["use_rslora"] = l.use_rslora;
  return j;
}

std::vector<std::string> lora_adapted_names(const GptConfig& model, const LoraConfig& lora) {
  std::set<std::string> names;
  for (int64_t i = 0; i < model.n_layer; ++i) {
    for (const BlockLinear& b : block_linears(model, i)) {
      if (lora.targets(cat(hf_name_prefix(model), b.name))) names.insert(b.name.substr(b.name.rfind('.') + 1));
    }
  }
  return {names.begin(), names.end()};
}

std::string lora_difference(const GptConfig& model, const LoraConfig& a, const LoraConfig& b) {
  if (a.r != b.r) return cat("r ", a.r, " vs ", b.r);
  if (a.alpha != b.alpha) return cat("lora_alpha ", a.alpha, " vs ", b.alpha);
  if (a.use_rslora != b.use_rslora) return cat("use_rslora ", a.use_rslora, " vs ", b.use_rslora);
  for (int64_t i = 0; i < model.n_layer; ++i) {
    for (const BlockLinear& l : block_linears(model, i)) {
      const std::string hf = cat(hf_name_prefix(model), l.name);
      if (a.targets(hf) != b.targets(hf)) {
        return cat("target_modules: ", hf, (a.targets(hf) ? " adapted vs not" : " not adapted vs adapted"));
      }
    }
  }
  return "";
}

}  // namespace zero
