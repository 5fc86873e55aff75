// The "model.lora" section's keys and rules; see lora_section.h.
#include "runtime/config/lora_section.h"

#include <filesystem>
#include <set>

#include "core/strings.h"
#include "runtime/config/config_key_builders.h"
#include "runtime/config/config_schema.h"
#include "runtime/config/hf_config.h"
#include "runtime/config/peft_config.h"

namespace zero {

namespace {

std::string listed(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += cat(s.empty() ? "" : ", ", n);
  return s;
}

// PEFT's default targets for the family (its
// TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING).
std::vector<std::string> default_targets(const GptConfig& g) {
  if (g.features().gpt2_names) return {"c_attn"};
  return {"q_proj", "v_proj"};
}

// Every target must pick some adaptable layer; one that names another
// module (lm_head, a norm) or nothing is an error naming it.
void check_targets(ConfigReader& r, const GptConfig& g) {
  std::vector<std::string> layers;  // the adaptable layers' last names
  {
    LoraConfig all;
    all.r = 1;
    all.target_modules = {"all-linear"};
    layers = lora_adapted_names(g, all);
  }
  for (const std::string& t : g.lora.target_modules) {
    LoraConfig one = g.lora;
    one.target_modules = {t};
    if (!lora_adapted_names(g, one).empty()) continue;
    // Another module of the model?
    std::string other;
    for (const auto& [name, shape] : gpt_parameter_shapes(g)) {
      const std::string module = cat(hf_name_prefix(g), name.substr(0, name.rfind('.')));
      LoraConfig probe = one;
      if (probe.targets(module) && other.empty()) other = module;
    }
    r.error("target_modules",
            other.empty()
                ? cat("\"", t, "\" matches no layer of the ", model_family(g.arch).display,
                      " model (PEFT's rule: a module name equal to it or ending in \".", t,
                      "\"); its layers LoRA adapts: ", listed(layers), ", or \"all-linear\"")
                : cat("\"", t, "\" names ", other, ", which LoRA does not adapt here: only the blocks' linear layers (",
                      listed(layers), ")"));
  }
}

}  // namespace

void parse_lora_section(ConfigReader r, RunConfig& c) {
  read_declared_keys(r, c);
  GptConfig& g = c.model.gpt;
  LoraConfig& l = g.lora;
  const std::string& init_from = c.model.lora_init_from;
  if (!init_from.empty()) {
    // The adapter's own settings fill what the section leaves out.
    const std::string config_path = (std::filesystem::path(init_from) / kPeftConfigFile).string();
    const std::string weights_path = (std::filesystem::path(init_from) / kPeftAdapterFile).string();
    std::error_code ec;
    absl::StatusOr<Json> j = load_json_file(config_path);
    absl::StatusOr<LoraConfig> theirs =
        j.ok() ? lora_config_from_peft(*j, config_path) : absl::StatusOr<LoraConfig>(j.status());
    if (!theirs.ok()) {
      r.error("init_from", cat("a PEFT adapter directory: ", theirs.status().message()));
    } else if (!std::filesystem::is_regular_file(weights_path, ec)) {
      r.error("init_from", cat("a PEFT adapter directory: no ", weights_path));
    } else {
      if (!r.has("r")) l.r = theirs->r, r.set_derived("r", l.r);
      if (!r.has("lora_alpha")) l.alpha = theirs->alpha, r.set_derived("lora_alpha", l.alpha);
      if (!r.has("use_rslora")) l.use_rslora = theirs->use_rslora, r.set_derived("use_rslora", l.use_rslora);
      if (!r.has("lora_dropout")) l.dropout = theirs->dropout, r.set_derived("lora_dropout", l.dropout);
      if (!r.has("target_modules")) {
        l.target_modules = theirs->target_modules;
        r.set_derived("target_modules", l.target_modules);
      }
      const std::string difference = lora_difference(g, *theirs, l);
      if (!difference.empty()) {
        r.error("init_from", cat(init_from, "'s adapter differs from the section's: ", difference,
                                 " (the adapter's, then the section's); leave the key out to take the adapter's"));
      }
    }
  }
  if (l.r == 0) {
    for (const char* key : {"lora_alpha", "lora_dropout", "target_modules", "use_rslora", "bias"}) {
      if (r.has(key)) r.error(key, "is set but model.lora.r is 0 (no LoRA): set r, the adapters' rank");
    }
    r.finish();
    return;
  }
  if (l.target_modules.empty()) {
    l.target_modules = default_targets(g);
    r.set_derived("target_modules", l.target_modules);
  }
  check_targets(r, g);
  r.finish();
}

void check_lora_composition(ConfigReader& root, const RunConfig& c) {
  if (c.model.gpt.lora.enabled() && c.sequence_parallel) {
    root.error("tensor_parallel.sequence_parallel",
               "is not supported with LoRA (model.lora.r > 0): the adapters run on the whole sequence; turn one off");
  }
}

namespace config_keys {

std::vector<ConfigKey> lora_keys() {
  std::vector<ConfigKey> k;
  k.push_back(integer("model.lora.r", ZE_FIELD(model.gpt.lora.r), 0, 1 << 16,
                      "LoRA's rank (PEFT's r; 0: no LoRA). With r > 0 only the adapters train: every other "
                      "parameter is frozen (no gradients, no optimizer state)"));
  k.push_back(number("model.lora.lora_alpha", ZE_FIELD(model.gpt.lora.alpha), kPositive,
                     "the adapters' scaling lora_alpha / r (PEFT's)"));
  k.push_back(number("model.lora.lora_dropout", ZE_FIELD(model.gpt.lora.dropout), NumberRange::unit_open(),
                     "dropout on the adapters' input (PEFT's; the mask a hash of run.seed, site, sample and "
                     "position)"));
  k.push_back(text_list("model.lora.target_modules", ZE_FIELD(model.gpt.lora.target_modules),
                        "the layers adapted, by PEFT's rule: a Hugging Face module name equal to an entry or ending in "
                        "\".\" + it (\"q_proj\", \"layers.0.self_attn.v_proj\"), or \"all-linear\" (every linear "
                        "layer of the blocks)")
                  .shown("PEFT's for the family: [\"q_proj\", \"v_proj\"]; GPT-2: [\"c_attn\"]"));
  k.push_back(text_choice("model.lora.bias", ZE_FIELD(model.lora_bias), {"none"},
                          "PEFT's bias: \"none\" (no bias trains) is the one supported"));
  k.push_back(boolean("model.lora.use_rslora", ZE_FIELD(model.gpt.lora.use_rslora),
                      "rank-stabilised LoRA: scaling lora_alpha / sqrt(r)"));
  k.push_back(text("model.lora.init_from", ZE_FIELD(model.lora_init_from),
                   "a PEFT adapter directory (adapter_config.json, adapter_model.safetensors) to start the adapters "
                   "from; the keys left out are taken from it (a checkpoint run.resume finds wins)"));
  return k;
}

}  // namespace config_keys

}  // namespace zero
