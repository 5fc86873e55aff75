// Parsing of a run config; see run_config.h.
#include "runtime/config/run_config.h"

#include <optional>

#include "runtime/base/strings.h"
#include "runtime/base/status.h"
#include "runtime/config/config_reader.h"

namespace zero {

namespace {

void parse_model(ConfigReader r, ModelSection& m) {
  m.type = r.get_choice("type", "gpt", {"gpt"});
  GptConfig& g = m.gpt;
  g.n_layer = r.get_int("n_layer", g.n_layer, 1);
  g.n_head = r.get_int("n_head", g.n_head, 1);
  g.d_model = r.get_int("d_model", g.d_model, 1);
  g.vocab_size = r.get_int("vocab_size", g.vocab_size, 1);
  g.seq_len = r.get_int("seq_len", g.seq_len, 1);
  if (g.d_model % g.n_head != 0) {
    r.error("d_model", cat(g.d_model, " is not divisible by n_head ", g.n_head));
  }
  r.finish();
}

void parse_data(ConfigReader r, DataSection& d) {
  d.format = r.get_choice("format", d.format, {"text", "llmc"});
  d.path = r.get_string("path", d.path);
  d.seed = static_cast<uint64_t>(r.get_int("seed", static_cast<int64_t>(d.seed), 0));
  r.finish();
}

void parse_run(ConfigReader r, RunSection& run, uint64_t& seed) {
  run.steps = r.get_int("steps", run.steps, 0);
  run.metrics = r.get_string("metrics", run.metrics);
  seed = static_cast<uint64_t>(r.get_int("seed", static_cast<int64_t>(seed), 0));
  r.finish();
}

void parse_optimizer(ConfigReader r, OptimizerConfig& o) {
  o.type = r.get_choice("type", o.type, {"Adam", "AdamW", "SGD"});
  ConfigReader p = r.section("params");
  if (p.has("max_grad_norm")) {
    p.error("max_grad_norm",
            "is not supported as an optimizer parameter; use the top-level \"gradient_clipping\" instead");
  }
  p.mark_known("max_grad_norm");
  o.lr = static_cast<float>(p.get_float("lr", 1e-3));  // torch's defaults, in double for --print-config
  o.weight_decay = static_cast<float>(p.get_float("weight_decay", 0.0));
  if (o.type == "SGD") {
    o.momentum = static_cast<float>(p.get_float("momentum", 0.0));
    o.dampening = static_cast<float>(p.get_float("dampening", 0.0));
    o.nesterov = p.get_bool("nesterov", false);
  } else {
    const std::vector<double> betas = p.get_float_list("betas", {0.9, 0.999}, 2);
    o.beta1 = static_cast<float>(betas[0]);
    o.beta2 = static_cast<float>(betas[1]);
    o.eps = static_cast<float>(p.get_float("eps", 1e-8));
    o.adam_w_mode = p.get_bool("adam_w_mode", true);
    o.bias_correction = p.get_bool("bias_correction", true);
    p.refuse_unless("amsgrad", false, "AMSGrad is not implemented");
    p.refuse_unless("torch_adam", false, "ZeroEngine has one fused Adam; torch's does not exist here");
  }
  p.finish();
  r.finish();
}

// DeepSpeed's batch-size rule (runtime/config.py): give any two of the triple
// (or one of train_batch_size / micro batch), derive the rest with floor
// division, then check the product.
absl::Status resolve_batch(ConfigReader& r, int world, RunConfig& out) {
  auto read = [&](std::string_view key) -> std::optional<int64_t> {
    if (!r.has(key)) {
      r.mark_known(key);
      return std::nullopt;
    }
    const Json& v = r.get_raw(key);
    if (v.is_string() && v.get<std::string>() == "auto") {
      r.error(key, "\"auto\" needs a value to resolve it from; set train_micro_batch_size_per_gpu "
                   "(and gradient_accumulation_steps) to numbers");
      return std::nullopt;
    }
    return r.get_int(key, 0);
  };
  std::optional<int64_t> tb = read("train_batch_size");
  std::optional<int64_t> mb = read("train_micro_batch_size_per_gpu");
  std::optional<int64_t> gas = read("gradient_accumulation_steps");
  if (!r.diagnostics().errors.empty()) return absl::OkStatus();
  std::vector<std::string> derived;
  if (tb && mb && gas) {
  } else if (tb && mb) {
    gas = *tb / *mb / world, derived.push_back("gradient_accumulation_steps");
  } else if (tb && gas) {
    mb = *tb / world / *gas, derived.push_back("train_micro_batch_size_per_gpu");
  } else if (mb && gas) {
    tb = *mb * *gas * world, derived.push_back("train_batch_size");
  } else if (tb) {
    gas = 1, mb = *tb / world;
    derived = {"gradient_accumulation_steps", "train_micro_batch_size_per_gpu"};
  } else if (mb) {
    gas = 1, tb = *mb * world;
    derived = {"gradient_accumulation_steps", "train_batch_size"};
  } else {
    r.error("train_batch_size",
            "either train_batch_size or train_micro_batch_size_per_gpu needs to be provided");
    return absl::OkStatus();
  }
  if (*tb <= 0) r.error("train_batch_size", cat("Train batch size: ", *tb, " has to be greater than 0"));
  else if (*mb <= 0)
    r.error("train_micro_batch_size_per_gpu", cat("Micro batch size per gpu: ", *mb, " has to be greater than 0"));
  else if (*gas <= 0)
    r.error("gradient_accumulation_steps",
            cat("Gradient accumulation steps: ", *gas, " has to be greater than 0"));
  else if (*tb != *mb * *gas * world)
    r.error("train_batch_size",
            cat("Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * "
                "gradient_acc_step * world_size ",
                *tb, " != ", *mb, " * ", *gas, " * ", world));
  out.train_batch_size = *tb;
  out.engine.micro_batch_size = *mb;
  out.engine.gradient_accumulation_steps = *gas;
  r.set_effective("train_batch_size", *tb);
  r.set_effective("train_micro_batch_size_per_gpu", *mb);
  r.set_effective("gradient_accumulation_steps", *gas);
  for (const std::string& k : derived) r.set_derived(k, k == "train_batch_size" ? *tb : k == "gradient_accumulation_steps" ? *gas : *mb);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RunConfig> parse_run_config(const Json& config, const ConfigOptions& options) {
  ConfigDiagnostics diag;
  diag.allow_unknown_keys = options.allow_unknown_keys;
  ConfigReader root(config, diag);
  RunConfig out;

  parse_model(root.section("model"), out.model);
  parse_data(root.section("data"), out.data);
  parse_run(root.section("run"), out.run, out.engine.seed);
  ZE_RETURN_IF_ERROR(resolve_batch(root, options.world_size, out));
  parse_optimizer(root.section("optimizer"), out.engine.optimizer);
  out.engine.gradient_clipping = static_cast<float>(root.get_float("gradient_clipping", 1.0));
  if (out.engine.gradient_clipping < 0) root.error("gradient_clipping", "must be >= 0 (0 disables clipping)");
  out.steps_per_print = root.get_int("steps_per_print", out.steps_per_print, 1);

  ConfigReader bf16 = root.section("bf16");
  if (bf16.get_bool("enabled", false)) out.engine.param_dtype = DType::kBF16;
  bf16.finish();
  ConfigReader fp16 = root.section("fp16");
  fp16.refuse_unless("enabled", false, "fp16 training needs the dynamic loss scaler, not built yet; use bf16");
  fp16.finish();

  root.finish();
  ZE_RETURN_IF_ERROR(diag.status());
  out.effective = diag.effective;
  out.derived_keys.assign(diag.derived.begin(), diag.derived.end());
  out.warnings = diag.warnings;
  return out;
}

absl::StatusOr<Json> load_merged_config(const std::vector<std::string>& files,
                                        const std::vector<std::string>& overrides) {
  if (files.empty()) return absl::InvalidArgumentError("no config given: pass --config FILE");
  Json merged = Json::object();
  for (const std::string& f : files) {
    ZE_ASSIGN_OR_RETURN(Json j, load_json_file(f));
    merge_json(merged, j);
  }
  for (const std::string& o : overrides) ZE_RETURN_IF_ERROR(apply_override(merged, o));
  return merged;
}

}  // namespace zero
