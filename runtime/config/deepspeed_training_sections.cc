// DeepSpeed's optimizer, scheduler and precision sections, and the feature
// sections ZeroEngine refuses when enabled; see deepspeed_sections.h. The
// keys are declared at the end of this file (config_schema.h).
#include <algorithm>
#include <cctype>
#include <cmath>

#include "absl/strings/strip.h"
#include "core/strings.h"
#include "graph/moe.h"
#include "graph/gpt.h"
#include "runtime/config/config_key_builders.h"
#include "runtime/config/config_schema.h"
#include "runtime/config/deepspeed_sections.h"

namespace zero {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

void parse_optimizer_section(ConfigReader r, RunConfig& c) {
  OptimizerConfig& o = c.engine.optimizer;
  // DeepSpeed lower-cases its own optimizer names ("adam", "adamw", "lion")
  // and looks anything else up in torch.optim case-sensitively ("SGD").
  const std::string raw_type = r.get_string("type", "AdamW");
  const std::string t = lower(raw_type);
  if (t == "adam") o.type = OptimizerType::kAdam;
  else if (t == "adamw") o.type = OptimizerType::kAdamW;
  else if (t == "lion") o.type = OptimizerType::kLion;
  else if (raw_type == "SGD") o.type = OptimizerType::kSGD;
  else r.error("type", cat("\"", raw_type, "\" is not supported (supported: Adam, AdamW, Lion, SGD)"));
  // Lion's betas default to (0.9, 0.99) (DeepSpeed's FusedLion); the params
  // below read the field's value as the default.
  if (o.type == OptimizerType::kLion) o.beta2 = 0.99f;
  read_declared_keys(r, c);

  ConfigReader p = r.section("params");
  if (p.has("max_grad_norm")) {
    p.error("max_grad_norm",
            "is not supported as an optimizer parameter; use the top-level \"gradient_clipping\" instead");
  }
  p.mark_known("max_grad_norm");
  read_declared_keys(p, c);
  if (o.type == OptimizerType::kSGD && o.nesterov && (o.momentum <= 0 || o.dampening != 0)) {
    p.error("nesterov", "requires momentum > 0 and dampening 0 (as torch.optim.SGD)");
  }
  p.finish();
  r.finish();
}

void parse_scheduler_section(ConfigReader r, RunConfig& c) {
  SchedulerConfig& s = c.engine.scheduler;
  if (!r.has("type")) {
    r.mark_known("type");
    r.mark_known("params");
    if (r.has("params")) r.error("params", "is given without a scheduler \"type\"");
    r.finish();
    return;
  }
  read_declared_keys(r, c);
  ConfigReader p = r.section("params");
  for (const char* key : {"total_num_steps", "cycle_min_lr", "cycle_max_lr"}) {
    const bool needed = std::string_view(key) == "total_num_steps"
                            ? s.type == SchedulerType::kWarmupDecayLR || s.type == SchedulerType::kWarmupCosineLR
                            : s.type == SchedulerType::kOneCycle;
    if (needed && !p.has(key)) p.error(key, cat("is required by ", scheduler_type_name(s.type)));
  }
  read_declared_keys(p, c);
  if (s.type == SchedulerType::kWarmupDecayLR && !s.warmup_max_lr) {
    s.warmup_max_lr = 0.001;  // DeepSpeed's default for WarmupDecayLR (WarmupLR's is the optimizer's lr)
    p.set_effective("warmup_max_lr", 0.001);
  }
  if (s.warmup_type != "log" && s.warmup_type != "linear") {
    p.warn("warmup_type", cat("\"", s.warmup_type, "\" is unknown; using \"log\" (as DeepSpeed does)"));
    s.warmup_type = "log";
  }
  const bool warms_up = s.type == SchedulerType::kWarmupLR || s.type == SchedulerType::kWarmupDecayLR ||
                        s.type == SchedulerType::kWarmupCosineLR;
  if (warms_up && p.is_auto("warmup_num_steps") && c.run.steps > 0 && s.warmup_num_steps >= c.run.steps) {
    p.warn("warmup_num_steps", cat("\"auto\" is DeepSpeed's default ", s.warmup_num_steps, ", not less than run.steps ",
                                   c.run.steps, ": the whole run is warm-up (set a number to shorten it)"));
  }
  if (s.type == SchedulerType::kWarmupDecayLR && s.total_num_steps < s.warmup_num_steps) {
    p.warn("total_num_steps", cat(s.total_num_steps, " is less than warmup_num_steps ", s.warmup_num_steps));
  }
  p.mark_known("last_batch_iteration");
  if (p.has("last_batch_iteration")) {
    p.error("last_batch_iteration", "is the scheduler's position; it comes from a checkpoint, not the config");
  }
  p.finish();
  r.finish();
}

void parse_precision_sections(ConfigReader& root, RunConfig& c) {
  EngineConfig& out = c.engine;
  const ConfigSwitches& sw = c.switches;
  // "bfloat16" is DeepSpeed's legacy name of "bf16".
  const bool legacy_bf16 = root.deprecated("bfloat16", "bf16", root.has("bf16"));
  ConfigReader bf16 = root.section(legacy_bf16 ? "bfloat16" : "bf16");
  root.mark_known("bf16");
  read_declared_keys(bf16, c, "bf16");
  bf16.finish();

  ConfigReader fp16 = root.section("fp16");
  const Json& raw_scale = fp16.get_raw("loss_scale");
  if (raw_scale.is_boolean()) fp16.error("loss_scale", "must be a number (0 = dynamic), not a boolean");
  read_declared_keys(fp16, c);
  fp16.finish();
  if (sw.fp16_master_weights_and_grads && sw.bf16_master_weights_and_grads) {
    root.error("fp16", "fp16.fp16_master_weights_and_grads and bf16.bf16_master_weights_and_grads are mutually "
                       "exclusive (as in DeepSpeed)");
  }
  out.optimizer_precision.master = sw.bf16_master_weights_and_grads   ? DType::kBF16
                                   : sw.fp16_master_weights_and_grads ? DType::kF16
                                                                      : DType::kF32;
  out.optimizer_precision.states = sw.bf16_optimizer_states ? DType::kBF16 : DType::kF32;

  if (sw.fp16 && sw.bf16) root.error("fp16", "bfloat16 and fp16 modes cannot be simultaneously enabled");
  if (sw.fp16) {
    out.param_dtype = DType::kF16;
    out.loss_scaler.dynamic = sw.loss_scale == 0.0;
    out.loss_scaler.static_scale = sw.loss_scale;
    out.check_grad_overflow = true;
  } else if (sw.bf16) {
    out.param_dtype = DType::kBF16;
    out.check_grad_overflow = sw.bf16_check_grad_overflow;
  }

  ConfigReader dt = root.section("data_types", UnknownKeys::kWarnUnlessNearMiss);  // dict-read in DeepSpeed
  read_declared_keys(dt, c);
  if (!sw.grad_accum_dtype.empty()) {
    out.grad_dtype = sw.grad_accum_dtype == "fp32"   ? DType::kF32
                     : sw.grad_accum_dtype == "fp16" ? DType::kF16
                                                     : DType::kBF16;
  }
  dt.finish();

  ConfigReader autocast = root.section("torch_autocast", UnknownKeys::kWarnUnlessNearMiss);  // dict-read in DeepSpeed
  read_declared_keys(autocast, c);
  autocast.finish();
}

void parse_tensor_parallel_section(ConfigReader r, RunConfig& c) {
  read_declared_keys(r, c);
  const int64_t t = c.autotp_size;
  if (t > 1 && c.world_size % t != 0) {
    r.error("autotp_size", cat(t, " does not divide the world of ", c.world_size,
                               " ranks (world = tensor x data: launch a multiple of ", t, " ranks)"));
  } else if (t > 1 && r.diagnostics().errors.empty()) {
    // The model's split rules (graph/gpt.h), whose messages name their keys.
    if (absl::Status s = check_gpt_split(c.model.gpt, static_cast<int>(t), c.sequence_parallel); !s.ok()) {
      r.diagnostics().errors.emplace_back(s.message());
    }
  }
  r.finish();
}

void parse_pipeline_section(ConfigReader r, RunConfig& c) {
  read_declared_keys(r, c);
  const int p = c.engine.pipeline.stages;
  const int64_t tp = c.tensor_size() * int64_t{p};
  if (p > 1 && c.world_size % tp != 0) {
    r.error("stages", cat(p, " pipeline stages x tensor_parallel.autotp_size ", c.tensor_size(),
                          " do not divide the world of ", c.world_size, " ranks (world = data x tensor x pipeline)"));
  } else if (absl::Status moe = check_moe_pipeline(c.model.gpt.moe, p); !moe.ok()) {
    r.error("stages", std::string(absl::StripPrefix(moe.message(), "pipeline.stages: ")));
  } else if (p > c.model.gpt.n_layer) {
    r.error("stages", cat(p, " pipeline stages for model.n_layer ", c.model.gpt.n_layer,
                          " blocks: each stage needs at least one block"));
  } else if (const int64_t per = c.engine.pipeline.num_layers_per_virtual_stage; per > 0) {
    if (p < 2) {
      r.error("num_layers_per_virtual_stage", cat(per, " with pipeline.stages ", p,
                                                  ": interleaving splits a stage's blocks into chunks between "
                                                  "stages, so it needs at least 2 stages (or leave it unset)"));
    } else if (c.model.gpt.n_layer % (per * p) != 0) {
      r.error("num_layers_per_virtual_stage",
              cat(per, " x pipeline.stages ", p, " does not divide model.n_layer ", c.model.gpt.n_layer,
                  ": each stage holds n_layer / (stages x num_layers_per_virtual_stage) chunks of that many blocks"));
    }
  }
  r.finish();
}

void parse_unsupported_feature_sections(ConfigReader& root) {
  // Sections with an "enabled" switch: fine while disabled (their other
  // options then have no effect, so they are not checked).
  struct Switch {
    const char* section;
    const char* why;
  };
  static const Switch kSwitched[] = {
      {"wandb", "no Weights & Biases client: it needs its network service; use csv_monitor, tensorboard or --metrics"},
      {"comet", "no Comet client: it needs its network service; use csv_monitor, tensorboard or --metrics"},
      {"autotuning", "no autotuner"},
      {"progressive_layer_drop", "no progressive layer drop"},
      {"eigenvalue", "no eigenvalue computation"},
      {"curriculum_learning", "no curriculum learning"},
      {"data_efficiency", "no data-efficiency library"},
      {"hybrid_engine", "no RLHF hybrid engine"},
      {"nebula", "no Nebula checkpoint service"},
      {"quantize_training", "no quantization-aware training"},
      {"compile", "no torch.compile in C++"},
      {"amp", "NVIDIA Apex AMP does not exist in C++; use bf16 or fp16"},
  };
  for (const Switch& s : kSwitched) {
    if (!root.has(s.section)) {
      root.mark_known(s.section);
      continue;
    }
    const Json& v = root.get_raw(s.section);
    if (!v.is_object()) {
      root.error(s.section, cat("expected a section ({...}), got ", v.dump()));
      continue;
    }
    const Json& enabled = v.contains("enabled") ? v["enabled"] : Json(false);
    if (!(enabled.is_boolean() && !enabled.get<bool>())) {
      root.error(s.section, cat("\"enabled\": ", enabled.dump(), " is not supported (", s.why,
                                "); remove the section or set \"enabled\": false"));
    }
  }
  // Sections without a switch: present means wanted, even empty (DeepSpeed
  // turns sparse attention on with its defaults for "sparse_attention": {}).
  static const Switch kPresence[] = {
      {"sparse_attention", "no block-sparse attention"},
      {"expert_parallel", "expert parallelism is model.ep_size here"},
      {"compression_training", "no compression training"},
      {"weight_quantization", "no weight quantization"},
      {"timers", "timers are not configurable; see wall_clock_breakdown"},
      {"datastates", "no DataStates checkpoint engine"},
  };
  for (const Switch& s : kPresence) {
    root.mark_known(s.section);
    if (!root.has(s.section)) continue;
    root.error(s.section, cat("is not supported (", s.why, "); remove the section"));
  }
}

namespace config_keys {

bool is_sgd(const RunConfig& c) { return c.engine.optimizer.type == OptimizerType::kSGD; }
bool is_lion(const RunConfig& c) { return c.engine.optimizer.type == OptimizerType::kLion; }
// Adam or AdamW exactly (their eps, adam_w_mode, bias_correction, ...).
bool is_adam(const RunConfig& c) {
  return c.engine.optimizer.type == OptimizerType::kAdam || c.engine.optimizer.type == OptimizerType::kAdamW;
}
// The optimizers with betas (Adam's params.betas, Lion's).
bool has_betas(const RunConfig& c) { return is_adam(c) || is_lion(c); }
auto schedule_is(std::initializer_list<SchedulerType> types) {
  std::vector<SchedulerType> t(types);
  return [t](const RunConfig& c) { return std::find(t.begin(), t.end(), c.engine.scheduler.type) != t.end(); };
}

std::vector<ConfigKey> training_keys() {
  std::vector<ConfigKey> k;
  // ---- optimizer.
  k.push_back(enum_choice("optimizer.type", ZE_FIELD(engine.optimizer.type),
                          {OptimizerType::kAdam, OptimizerType::kAdamW, OptimizerType::kLion, OptimizerType::kSGD},
                          optimizer_type_name,
                          "Adam (AdamW unless adam_w_mode is false), AdamW and Lion in any case, SGD as spelt")
                  .read_by_code());
  k.push_back(refused("optimizer.legacy_fusion", false, "legacy fusion belongs to DeepSpeed's old fp16 optimizer"));
  k.push_back(number("optimizer.params.lr", ZE_FIELD(engine.optimizer.lr), kNonNegative, "learning rate"));
  k.push_back(number("optimizer.params.weight_decay", ZE_FIELD(engine.optimizer.weight_decay), kNonNegative,
                     "weight decay (decoupled for AdamW and Lion; L2 for Adam without adam_w_mode and for SGD)"));
  k.push_back(number("optimizer.params.momentum", ZE_FIELD(engine.optimizer.momentum), kNonNegative, "SGD momentum")
                  .when(is_sgd));
  k.push_back(number("optimizer.params.dampening", ZE_FIELD(engine.optimizer.dampening), {}, "SGD dampening")
                  .when(is_sgd));
  k.push_back(boolean("optimizer.params.nesterov", ZE_FIELD(engine.optimizer.nesterov),
                      "SGD Nesterov momentum (needs momentum > 0, dampening 0)")
                  .when(is_sgd));
  k.push_back(refused("optimizer.params.maximize", false, "gradient ascent is not supported").when(is_sgd));
  {
    ConfigKey betas = base("optimizer.params.betas", KeyKind::kNumberList, "Adam's or Lion's (beta1, beta2)");
    betas.list_size = 2;
    betas.range = NumberRange::unit_open();
    betas.get = [](RunConfig& c) {
      return Json::array({as_double(c.engine.optimizer.beta1), as_double(c.engine.optimizer.beta2)});
    };
    betas.set = [](RunConfig& c, const Json& v) {
      c.engine.optimizer.beta1 = static_cast<float>(v.at(0).get<double>());
      c.engine.optimizer.beta2 = static_cast<float>(v.at(1).get<double>());
    };
    // (The parser sets Lion's default, (0.9, 0.99), before the params are read.)
    k.push_back(betas.shown("[0.9, 0.999]; Lion: [0.9, 0.99]").when(has_betas));
  }
  k.push_back(number("optimizer.params.eps", ZE_FIELD(engine.optimizer.eps), kNonNegative, "Adam's epsilon")
                  .when(is_adam));
  {
    ConfigKey w = boolean("optimizer.params.adam_w_mode", ZE_FIELD(engine.optimizer.adam_w_mode),
                          "decoupled weight decay for \"Adam\" (\"AdamW\" always has it)");
    // "Adam" is AdamW unless adam_w_mode is false; "AdamW" always is (DeepSpeed).
    w.set = [](RunConfig& c, const Json& v) {
      c.engine.optimizer.adam_w_mode = v.get<bool>() || c.engine.optimizer.type == OptimizerType::kAdamW;
    };
    k.push_back(w.when(is_adam));
  }
  k.push_back(boolean("optimizer.params.bias_correction", ZE_FIELD(engine.optimizer.bias_correction),
                      "Adam's bias correction")
                  .when(is_adam));
  k.push_back(refused("optimizer.params.amsgrad", false, "AMSGrad is not implemented").when(is_adam));
  k.push_back(accepted("optimizer.params.torch_adam", KeyKind::kBool, false,
                       "accepted; one fused kernel either way")
                  .when(is_adam));
  k.push_back(accepted("optimizer.params.set_grad_none", KeyKind::kBool, true, "accepted; no effect").when(is_adam));
  k.push_back(refused("optimizer.params.fp32_optimizer_states", true,
                      "optimizer state is fp32 unless bf16.bf16_optimizer_states")
                  .when(is_adam));

  // ---- scheduler (read only when a type is given).
  k.push_back(enum_choice("scheduler.type", ZE_FIELD(engine.scheduler.type),
                          {SchedulerType::kWarmupLR, SchedulerType::kWarmupDecayLR, SchedulerType::kWarmupCosineLR,
                           SchedulerType::kOneCycle, SchedulerType::kLRRangeTest},
                          scheduler_type_name, "DeepSpeed's schedule, stepped once per applied optimizer step")
                  .shown("none"));
  const auto warmup = schedule_is({SchedulerType::kWarmupLR, SchedulerType::kWarmupDecayLR});
  const auto any_warmup =
      schedule_is({SchedulerType::kWarmupLR, SchedulerType::kWarmupDecayLR, SchedulerType::kWarmupCosineLR});
  const auto with_total = schedule_is({SchedulerType::kWarmupDecayLR, SchedulerType::kWarmupCosineLR});
  const auto cosine = schedule_is({SchedulerType::kWarmupCosineLR});
  const auto one_cycle = schedule_is({SchedulerType::kOneCycle});
  const auto range_test = schedule_is({SchedulerType::kLRRangeTest});
  const std::string sp = "scheduler.params.";
  k.push_back(number(sp + "warmup_min_lr", ZE_FIELD(engine.scheduler.warmup_min_lr), kNonNegative,
                     "WarmupLR, WarmupDecayLR: lr at the start of warm-up")
                  .when(warmup));
  k.push_back(number(sp + "warmup_max_lr", ZE_FIELD(engine.scheduler.warmup_max_lr), kNonNegative,
                     "WarmupLR, WarmupDecayLR: lr at the end of warm-up")
                  .shown("WarmupLR: optimizer lr; WarmupDecayLR: 0.001")
                  .on_auto("the optimizer's lr", [](const RunConfig& c) -> absl::StatusOr<Json> {
                    return Json(as_double(c.engine.optimizer.lr));
                  })
                  .when(warmup));
  k.push_back(integer(sp + "warmup_num_steps", ZE_FIELD(engine.scheduler.warmup_num_steps), 1, kMax,
                      "warm-up steps")
                  .when(any_warmup));
  k.push_back(text(sp + "warmup_type", ZE_FIELD(engine.scheduler.warmup_type),
                   "\"log\" or \"linear\" warm-up (anything else: log, with a warning, as DeepSpeed)")
                  .when(any_warmup));
  k.push_back(integer(sp + "total_num_steps", ZE_FIELD(engine.scheduler.total_num_steps), 1, kMax,
                      "WarmupDecayLR, WarmupCosineLR: steps of the whole schedule (required)")
                  .shown("—")
                  .on_auto("run.steps", [](const RunConfig& c) -> absl::StatusOr<Json> {
                    if (c.run.steps <= 0) return absl::InvalidArgumentError("run.steps is 0: set run.steps or a number here");
                    return Json(c.run.steps);
                  })
                  .when(with_total));
  k.push_back(number(sp + "warmup_min_ratio", ZE_FIELD(engine.scheduler.warmup_min_ratio), kRatio,
                     "WarmupCosineLR: lr ratio at the start of warm-up")
                  .when(cosine));
  k.push_back(number(sp + "cos_min_ratio", ZE_FIELD(engine.scheduler.cos_min_ratio), kRatio,
                     "WarmupCosineLR: lr ratio at the end")
                  .when(cosine));
  k.push_back(number(sp + "cycle_min_lr", ZE_FIELD(engine.scheduler.cycle_min_lr), kNonNegative,
                     "OneCycle: lowest lr (required)")
                  .on_auto("refused: nothing fills it in", [](const RunConfig&) -> absl::StatusOr<Json> {
                    return absl::InvalidArgumentError("nothing fills it in (OneCycle requires it): set a number");
                  })
                  .when(one_cycle));
  k.push_back(number(sp + "cycle_max_lr", ZE_FIELD(engine.scheduler.cycle_max_lr), kNonNegative,
                     "OneCycle: highest lr (required)")
                  .on_auto("refused: nothing fills it in", [](const RunConfig&) -> absl::StatusOr<Json> {
                    return absl::InvalidArgumentError("nothing fills it in (OneCycle requires it): set a number");
                  })
                  .when(one_cycle));
  k.push_back(number(sp + "decay_lr_rate", ZE_FIELD(engine.scheduler.decay_lr_rate), kNonNegative,
                     "OneCycle: lr decay after the cycle")
                  .when(one_cycle));
  k.push_back(number(sp + "cycle_first_step_size", ZE_FIELD(engine.scheduler.cycle_first_step_size), kPositive,
                     "OneCycle: steps of the rising half")
                  .when(one_cycle));
  k.push_back(number(sp + "cycle_second_step_size", ZE_FIELD(engine.scheduler.cycle_second_step_size),
                     kNonNegative, "OneCycle: steps of the falling half")
                  .shown("cycle_first_step_size")
                  .when(one_cycle));
  k.push_back(integer(sp + "cycle_first_stair_count", ZE_FIELD(engine.scheduler.cycle_first_stair_count), 0, kMax,
                      "OneCycle: stairs in the rising half (0: smooth)")
                  .when(one_cycle));
  k.push_back(integer(sp + "cycle_second_stair_count", ZE_FIELD(engine.scheduler.cycle_second_stair_count), 0,
                      kMax, "OneCycle: stairs in the falling half")
                  .shown("cycle_first_stair_count")
                  .when(one_cycle));
  k.push_back(number(sp + "decay_step_size", ZE_FIELD(engine.scheduler.decay_step_size), kNonNegative,
                     "OneCycle: steps per decay interval after the cycle")
                  .when(one_cycle));
  k.push_back(boolean(sp + "cycle_momentum", ZE_FIELD(engine.scheduler.cycle_momentum),
                      "OneCycle: cycle Adam's beta1 inversely (beta2 0.99 meanwhile)")
                  .when(one_cycle));
  k.push_back(number(sp + "cycle_min_mom", ZE_FIELD(engine.scheduler.cycle_min_mom), NumberRange::unit_open(),
                     "OneCycle: lowest beta1")
                  .when(one_cycle));
  k.push_back(number(sp + "cycle_max_mom", ZE_FIELD(engine.scheduler.cycle_max_mom), NumberRange::unit_open(),
                     "OneCycle: highest beta1")
                  .when(one_cycle));
  k.push_back(number(sp + "decay_mom_rate", ZE_FIELD(engine.scheduler.decay_mom_rate), kNonNegative,
                     "OneCycle: beta1 decay after the cycle")
                  .when(one_cycle));
  k.push_back(number(sp + "lr_range_test_min_lr", ZE_FIELD(engine.scheduler.lr_range_test_min_lr), kNonNegative,
                     "LRRangeTest: starting lr")
                  .when(range_test));
  k.push_back(integer(sp + "lr_range_test_step_size", ZE_FIELD(engine.scheduler.lr_range_test_step_size), 1, kMax,
                      "LRRangeTest: steps per increase")
                  .when(range_test));
  k.push_back(number(sp + "lr_range_test_step_rate", ZE_FIELD(engine.scheduler.lr_range_test_step_rate),
                     kNonNegative, "LRRangeTest: increase per interval")
                  .when(range_test));
  k.push_back(boolean(sp + "lr_range_test_staircase", ZE_FIELD(engine.scheduler.lr_range_test_staircase),
                      "LRRangeTest: increase in steps")
                  .when(range_test));

  // ---- precision.
  k.push_back(boolean("bf16.enabled", ZE_FIELD(switches.bf16),
                      "bf16 parameters and gradients, fp32 master weights, bf16 GEMMs accumulating in fp32"));
  k.push_back(boolean("bf16.check_grad_overflow", ZE_FIELD(switches.bf16_check_grad_overflow),
                      "skip bf16 steps whose gradients hold inf/NaN"));
  k.push_back(refused("bf16.immediate_grad_update", false, "gradients are applied at the accumulation boundary"));
  k.push_back(boolean("bf16.bf16_master_weights_and_grads", ZE_FIELD(switches.bf16_master_weights_and_grads),
                      "bf16 master weights (stages 1-3)"));
  k.push_back(boolean("bf16.bf16_optimizer_states", ZE_FIELD(switches.bf16_optimizer_states),
                      "bf16 optimizer states (with the bf16 master)"));
  k.push_back(boolean("fp16.enabled", ZE_FIELD(switches.fp16),
                      "fp16 parameters and gradients, fp32 master weights, DeepSpeed's loss scaler"));
  k.push_back(accepted("fp16.auto_cast", KeyKind::kBool, false,
                       "accepted; GEMMs run in the model dtype whatever their inputs"));
  k.push_back(number("fp16.loss_scale", ZE_FIELD(switches.loss_scale), kNonNegative, "static scale; 0: dynamic"));
  k.push_back(integer("fp16.initial_scale_power", ZE_FIELD(engine.loss_scaler.initial_scale_power), 0, 64,
                      "dynamic scaling starts at 2^this"));
  k.push_back(integer("fp16.loss_scale_window", ZE_FIELD(engine.loss_scaler.scale_window), 1, kMax,
                      "steps without overflow before the scale doubles"));
  k.push_back(integer("fp16.hysteresis", ZE_FIELD(engine.loss_scaler.hysteresis), 1, kMax,
                      "overflows tolerated before the scale halves"));
  k.push_back(boolean("fp16.consecutive_hysteresis", ZE_FIELD(engine.loss_scaler.consecutive_hysteresis),
                      "hysteresis counts consecutive overflows only"));
  k.push_back(number("fp16.min_loss_scale", ZE_FIELD(engine.loss_scaler.min_scale), kPositive,
                     "the run stops with DeepSpeed's message at this scale"));
  k.push_back(boolean("fp16.fp16_master_weights_and_grads", ZE_FIELD(switches.fp16_master_weights_and_grads),
                      "fp16 master weights (stages 1-3)"));
  ConfigKey accum = text_choice("data_types.grad_accum_dtype", ZE_FIELD(switches.grad_accum_dtype),
                                {"fp32", "fp16", "bf16"}, "gradient buffer dtype");
  accum.optional = true;
  k.push_back(accum.shown("model dtype"));
  k.push_back(refused("data_types.param_dtype", Json(), "parameters are in the model dtype set by fp16/bf16"));
  k.push_back(refused("data_types.buffer_dtype", Json(), "models here have no buffers"));
  k.push_back(refused("torch_autocast.enabled", false,
                      "torch.autocast's per-op choice of dtype has no equivalent here: with bf16.enabled or "
                      "fp16.enabled the whole model runs in that dtype, GEMMs and reductions accumulating in fp32; "
                      "set one of them and remove this section"));
  k.push_back(accepted("torch_autocast.dtype", KeyKind::kString, Json(), "accepted while autocast is off"));
  k.push_back(accepted("torch_autocast.lower_precision_safe_modules", KeyKind::kString, Json(),
                       "accepted while autocast is off"));
  // ---- tensor_parallel (DeepSpeed's AutoTP training).
  const std::string tp = "tensor_parallel.";
  k.push_back(integer(tp + "autotp_size", ZE_FIELD(autotp_size), 0, 65536,
                      "tensor-parallel size T (0, 1: none): Megatron's split of the GPT over T adjacent ranks, "
                      "ZeRO over the world / T data-parallel ranks"));
  k.push_back(boolean(tp + "sequence_parallel", ZE_FIELD(sequence_parallel),
                      "ZeroEngine's (Megatron-LM's --sequence-parallel): layer norms, dropouts and residuals on "
                      "sequence shards, all-gather / reduce-scatter instead of all-reduce (model.seq_len must divide "
                      "by autotp_size)"));
  k.push_back(boolean(tp + "tp_overlap_comm", ZE_FIELD(tp_overlap_comm),
                      "DeepSpeed's (default false): a column-parallel layer's backward starts the all-reduce of its "
                      "input gradient on the tensor group's communication thread and computes its weight and bias "
                      "gradients while it runs (Megatron's async input-gradient all-reduce); the same results bit "
                      "for bit. No effect with sequence_parallel (its reduce-scatter runs in line)"));
  k.push_back(accepted(tp + "vocab_parallel_lm_head", KeyKind::kBool, false,
                       "the GPT's head is tied to the token table, which is vocabulary-parallel at T > 1 anyway"));
  k.push_back(accepted(tp + "vocab_parallel_ce_backend", KeyKind::kString, "torch",
                       "the vocabulary-parallel cross-entropy is ZeroEngine's own kernel"));
  k.push_back(accepted(tp + "dtype", KeyKind::kString, Json(), "the model dtype comes from bf16 / fp16"));
  k.push_back(refused(tp + "tp", Json(), "DeepSpeed's inference TP settings; training takes autotp_size"));
  k.push_back(refused(tp + "tensor_parallel", Json(), "DeepSpeed's inference TP settings; training takes autotp_size"));
  k.push_back(refused(tp + "injection_policy_tuple", Json(), "the GPT's split is Megatron's, built into its layers"));
  k.push_back(refused(tp + "partition_config", Json(), "the GPT's split is Megatron's, built into its layers"));
  k.push_back(refused(tp + "preset_model", Json(), "the GPT's split is Megatron's, built into its layers"));
  k.push_back(refused(tp + "keep_module_on_host", false, "weights load straight into each rank's slices"));
  k.push_back(refused(tp + "replace_with_kernel_inject", false, "no inference kernel injection"));
  k.push_back(refused(tp + "kernel_inject", false, "no inference kernel injection"));
  // ---- pipeline (DeepSpeed's "pipeline" section with PipelineModule's arguments).
  const std::string pp = "pipeline.";
  k.push_back(integer(pp + "stages", ZE_FIELD(engine.pipeline.stages), 1, 65536,
                      "pipeline stages P: the GPT's blocks split over P stages of ranks, world = data x tensor x "
                      "pipeline with the stages outermost"));
  k.push_back(enum_choice(pp + "partition_method", ZE_FIELD(engine.pipeline.partition_method),
                          {PartitionMethod::kParameters, PartitionMethod::kUniform}, partition_method_name,
                          "PipelineModule's: blocks split to balance parameters (the embeddings and the tied head "
                          "counted on the first and last stage), or evenly by count"));
  k.push_back(enum_choice(pp + "schedule", ZE_FIELD(engine.pipeline.schedule),
                          {PipelineScheduleKind::k1F1B, PipelineScheduleKind::kGPipe}, pipeline_schedule_name,
                          "ZeroEngine's: 1F1B (DeepSpeed's TrainSchedule; at most P - s micro-batches alive on stage "
                          "s) or GPipe (all forwards, then all backwards)"));
  k.push_back(integer(pp + "activation_checkpoint_interval", ZE_FIELD(engine.pipeline.activation_checkpoint_interval),
                      0, 65536, "PipelineModule's: checkpoint every K blocks of a stage (0: off)"));
  k.push_back(integer(pp + "num_layers_per_virtual_stage", ZE_FIELD(engine.pipeline.num_layers_per_virtual_stage),
                      0, 65536,
                      "Megatron's num_layers_per_virtual_pipeline_stage L: interleaved 1F1B, each stage holding v = "
                      "n_layer / (stages L) chunks of L blocks (chunk c of stage s is virtual stage c stages + s), "
                      "a bubble of (P - 1) / (v M) for v times the transfers; needs schedule 1f1b and "
                      "gradient_accumulation_steps a multiple of stages; fixes the split (partition_method unused). "
                      "0: one chunk per stage"));
  k.push_back(accepted(pp + "partition", KeyKind::kString, "best",
                       "DeepSpeed's config default, unused by its engine; the split is pipeline.partition_method"));
  k.push_back(accepted(pp + "seed_layers", KeyKind::kBool, false,
                       "initial values are drawn by parameter name, the same whichever stage holds a layer"));
  k.push_back(accepted(pp + "pipe_partitioned", KeyKind::kBool, true,
                       "each tensor rank sends its whole activation to the same tensor rank of the next stage"));
  k.push_back(accepted(pp + "grad_partitioned", KeyKind::kBool, true,
                       "each tensor rank sends its whole gradient to the same tensor rank of the previous stage"));
  return k;
}

}  // namespace config_keys

}  // namespace zero
