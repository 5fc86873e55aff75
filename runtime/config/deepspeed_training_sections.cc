// DeepSpeed's optimizer, scheduler and precision sections, and the feature
// sections ZeroEngine refuses when enabled; see deepspeed_sections.h.
#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/strings.h"
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

void parse_unsupported_feature_sections(ConfigReader& root) {
  // Sections with an "enabled" switch: fine while disabled (their other
  // options then have no effect, so they are not checked).
  struct Switch {
    const char* section;
    const char* why;
  };
  static const Switch kSwitched[] = {
      {"tensorboard", "no TensorBoard writer; use --metrics (JSON lines)"},
      {"wandb", "no Weights & Biases client; use --metrics (JSON lines)"},
      {"csv_monitor", "no CSV monitor; use --metrics (JSON lines)"},
      {"comet", "no Comet client; use --metrics (JSON lines)"},
      {"flops_profiler", "no FLOPs profiler; the benchmarks report FLOP rates"},
      {"comms_logger", "no communication logger yet"},
      {"autotuning", "no autotuner"},
      {"elasticity", "no elastic training"},
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
  // Sections without a switch: present means wanted.
  static const Switch kPresence[] = {
      {"pipeline", "no pipeline parallelism"},
      {"sparse_attention", "no block-sparse attention"},
      {"tensor_parallel", "no tensor parallelism"},
      {"expert_parallel", "no expert parallelism"},
      {"compression_training", "no compression training"},
      {"weight_quantization", "no weight quantization"},
      {"timers", "timers are not configurable; see wall_clock_breakdown"},
      {"datastates", "no DataStates checkpoint engine"},
  };
  for (const Switch& s : kPresence) {
    root.mark_known(s.section);
    if (!root.has(s.section)) continue;
    const Json& v = root.get_raw(s.section);
    if (!(v.is_object() && v.empty())) root.error(s.section, cat("is not supported (", s.why, ")"));
  }
}

}  // namespace zero
