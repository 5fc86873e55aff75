// DeepSpeed's optimizer, scheduler and precision sections, and the feature
// sections ZeroEngine refuses when enabled; see deepspeed_sections.h.
#include <algorithm>
#include <cctype>
#include <cmath>

#include "runtime/base/strings.h"
#include "runtime/config/deepspeed_sections.h"

namespace zero {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

void parse_optimizer_section(ConfigReader r, OptimizerConfig& o) {
  // DeepSpeed lower-cases its own optimizer names and looks anything else up
  // in torch.optim case-sensitively ("SGD").
  const std::string raw_type = r.get_string("type", "AdamW");
  const std::string t = lower(raw_type);
  if (t == "adam") o.type = "Adam";
  else if (t == "adamw") o.type = "AdamW";
  else if (raw_type == "SGD") o.type = "SGD";
  else r.error("type", cat("\"", raw_type, "\" is not supported (supported: Adam, AdamW, SGD)"));
  r.refuse_unless("legacy_fusion", false, "legacy fusion belongs to DeepSpeed's old fp16 optimizer");

  ConfigReader p = r.section("params");
  if (p.has("max_grad_norm")) {
    p.error("max_grad_norm",
            "is not supported as an optimizer parameter; use the top-level \"gradient_clipping\" instead");
  }
  p.mark_known("max_grad_norm");
  // torch's defaults (in double for --print-config) and torch.optim's ranges.
  const NumberRange non_negative = NumberRange::at_least(0.0);
  o.lr = static_cast<float>(p.get_float("lr", 1e-3, non_negative));
  o.weight_decay = static_cast<float>(p.get_float("weight_decay", 0.0, non_negative));
  if (o.type == "SGD") {
    o.momentum = static_cast<float>(p.get_float("momentum", 0.0, non_negative));
    o.dampening = static_cast<float>(p.get_float("dampening", 0.0));
    o.nesterov = p.get_bool("nesterov", false);
    if (o.nesterov && (o.momentum <= 0 || o.dampening != 0)) {
      p.error("nesterov", "requires momentum > 0 and dampening 0 (as torch.optim.SGD)");
    }
    p.refuse_unless("maximize", false, "gradient ascent is not supported");
  } else {
    const std::vector<double> betas = p.get_float_list("betas", {0.9, 0.999}, 2, NumberRange::unit_open());
    o.beta1 = static_cast<float>(betas[0]);
    o.beta2 = static_cast<float>(betas[1]);
    o.eps = static_cast<float>(p.get_float("eps", 1e-8, non_negative));
    // "Adam" is AdamW unless adam_w_mode is false; "AdamW" always is (DeepSpeed).
    o.adam_w_mode = p.get_bool("adam_w_mode", true) || o.type == "AdamW";
    o.bias_correction = p.get_bool("bias_correction", true);
    p.refuse_unless("amsgrad", false, "AMSGrad is not implemented");
    // Implementation choices of DeepSpeed's (torch's vs its fused kernel, how
    // grads are cleared): the math is the same one fused kernel here.
    p.get_bool("torch_adam", false);
    p.get_bool("set_grad_none", true);
    p.refuse_unless("fp32_optimizer_states", true, "optimizer state is fp32 unless bf16.bf16_optimizer_states");
  }
  p.finish();
  r.finish();
}

void parse_scheduler_section(ConfigReader r, SchedulerConfig& s) {
  if (!r.has("type")) {
    r.mark_known("type");
    r.mark_known("params");
    if (r.has("params")) r.error("params", "is given without a scheduler \"type\"");
    r.finish();
    return;
  }
  s.type = r.get_choice("type", "", {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle", "LRRangeTest"});
  ConfigReader p = r.section("params");
  // Learning rates and rates of change are never negative; ratios and momenta lie in [0, 1].
  const NumberRange non_negative = NumberRange::at_least(0.0), ratio = NumberRange::between(0.0, 1.0);
  auto warmup = [&] {
    s.warmup_num_steps = p.get_int("warmup_num_steps", 1000, 1);
    s.warmup_type = p.get_string("warmup_type", "log");
    if (s.warmup_type != "log" && s.warmup_type != "linear") {
      p.warn("warmup_type", cat("\"", s.warmup_type, "\" is unknown; using \"log\" (as DeepSpeed does)"));
      s.warmup_type = "log";
    }
  };
  if (s.type == "WarmupLR" || s.type == "WarmupDecayLR") {
    s.warmup_min_lr = p.get_float("warmup_min_lr", 0.0, non_negative);
    if (p.has("warmup_max_lr") || s.type == "WarmupDecayLR") {
      s.warmup_max_lr = p.get_float("warmup_max_lr", 0.001, non_negative);
    } else {
      p.mark_known("warmup_max_lr");  // unset: the optimizer's lr
    }
    warmup();
    if (s.type == "WarmupDecayLR") {
      if (!p.has("total_num_steps")) p.error("total_num_steps", "is required by WarmupDecayLR");
      s.total_num_steps = p.get_int("total_num_steps", 0, 1);
      if (s.total_num_steps < s.warmup_num_steps) {
        p.warn("total_num_steps", cat(s.total_num_steps, " is less than warmup_num_steps ", s.warmup_num_steps));
      }
    }
  } else if (s.type == "WarmupCosineLR") {
    if (!p.has("total_num_steps")) p.error("total_num_steps", "is required by WarmupCosineLR");
    s.total_num_steps = p.get_int("total_num_steps", 0, 1);
    s.warmup_min_ratio = p.get_float("warmup_min_ratio", 0.0, ratio);
    s.cos_min_ratio = p.get_float("cos_min_ratio", 1e-4, ratio);
    warmup();
  } else if (s.type == "OneCycle") {
    for (const char* k : {"cycle_min_lr", "cycle_max_lr"}) {
      if (!p.has(k)) p.error(k, "is required by OneCycle");
    }
    s.cycle_min_lr = p.get_float("cycle_min_lr", 0.0, non_negative);
    s.cycle_max_lr = p.get_float("cycle_max_lr", 0.0, non_negative);
    s.decay_lr_rate = p.get_float("decay_lr_rate", 0.0, non_negative);
    s.cycle_first_step_size = p.get_float("cycle_first_step_size", 2000);
    if (s.cycle_first_step_size <= 0) p.error("cycle_first_step_size", "must be positive");
    if (p.has("cycle_second_step_size") && !p.get_raw("cycle_second_step_size").is_null()) {
      s.cycle_second_step_size = p.get_float("cycle_second_step_size", 0);
      if (*s.cycle_second_step_size < 0) p.error("cycle_second_step_size", "must be non-negative");
    } else {
      p.mark_known("cycle_second_step_size");
    }
    s.cycle_first_stair_count = p.get_int("cycle_first_stair_count", 0, 0);
    if (p.has("cycle_second_stair_count") && !p.get_raw("cycle_second_stair_count").is_null()) {
      s.cycle_second_stair_count = p.get_int("cycle_second_stair_count", 0, 0);
    } else {
      p.mark_known("cycle_second_stair_count");
    }
    s.decay_step_size = p.get_float("decay_step_size", 0, non_negative);
    s.cycle_momentum = p.get_bool("cycle_momentum", true);
    s.cycle_min_mom = p.get_float("cycle_min_mom", 0.8, NumberRange::unit_open());
    s.cycle_max_mom = p.get_float("cycle_max_mom", 0.9, NumberRange::unit_open());
    s.decay_mom_rate = p.get_float("decay_mom_rate", 0.0, non_negative);
  } else if (s.type == "LRRangeTest") {
    s.lr_range_test_min_lr = p.get_float("lr_range_test_min_lr", 1e-3, non_negative);
    s.lr_range_test_step_size = p.get_int("lr_range_test_step_size", 2000, 1);
    s.lr_range_test_step_rate = p.get_float("lr_range_test_step_rate", 1.0, non_negative);
    s.lr_range_test_staircase = p.get_bool("lr_range_test_staircase", false);
  }
  p.mark_known("last_batch_iteration");
  if (p.has("last_batch_iteration")) {
    p.error("last_batch_iteration", "is the scheduler's position; it comes from a checkpoint, not the config");
  }
  p.finish();
  r.finish();
}

void parse_precision_sections(ConfigReader& root, EngineConfig& out) {
  // "bfloat16" is DeepSpeed's legacy name of "bf16".
  const bool legacy_bf16 = root.deprecated("bfloat16", "bf16", root.has("bf16"));
  ConfigReader bf16 = root.section(legacy_bf16 ? "bfloat16" : "bf16");
  root.mark_known("bf16");
  const bool bf16_on = bf16.get_bool("enabled", false);
  // DeepSpeed >= 0.19.3 checks bf16 gradients for inf/NaN by default.
  const bool bf16_check = bf16.get_bool("check_grad_overflow", true);
  bf16.refuse_unless("immediate_grad_update", false, "gradients are applied at the accumulation boundary");
  // 16-bit master weights (and bf16 optimizer state): DeepSpeed's memory
  // saving variant, checked with the rest of the run by check_optimizer_precision.
  const bool bf16_master = bf16.get_bool("bf16_master_weights_and_grads", false);
  const bool bf16_states = bf16.get_bool("bf16_optimizer_states", false);
  bf16.finish();

  ConfigReader fp16 = root.section("fp16");
  const bool fp16_on = fp16.get_bool("enabled", false);
  // auto_cast casts the model's floating inputs to fp16; ZeroEngine's GEMMs
  // already run in the model dtype whatever their inputs, so both values hold.
  fp16.get_bool("auto_cast", false);
  LossScalerConfig& ls = out.loss_scaler;
  const Json& raw_scale = fp16.get_raw("loss_scale");
  if (raw_scale.is_boolean()) fp16.error("loss_scale", "must be a number (0 = dynamic), not a boolean");
  const double loss_scale = fp16.get_float("loss_scale", 0.0, NumberRange::at_least(0.0));  // 0 = dynamic
  // 2^power must stay a finite fp32 scale that a gradient times it can still
  // be finite for: beyond 2^64 every step would overflow and be skipped.
  ls.initial_scale_power = fp16.get_int("initial_scale_power", 16, 0, 64);
  ls.scale_window = fp16.get_int("loss_scale_window", 1000, 1);
  ls.hysteresis = fp16.get_int("hysteresis", 2, 1);
  ls.consecutive_hysteresis = fp16.get_bool("consecutive_hysteresis", false);
  ls.min_scale = fp16.get_float("min_loss_scale", 1.0, NumberRange::above(0.0));
  const bool fp16_master = fp16.get_bool("fp16_master_weights_and_grads", false);
  fp16.finish();
  if (fp16_master && bf16_master) {
    root.error("fp16", "fp16.fp16_master_weights_and_grads and bf16.bf16_master_weights_and_grads are mutually "
                       "exclusive (as in DeepSpeed)");
  }
  out.optimizer_precision.master = bf16_master ? DType::kBF16 : fp16_master ? DType::kF16 : DType::kF32;
  out.optimizer_precision.states = bf16_states ? DType::kBF16 : DType::kF32;

  if (fp16_on && bf16_on) root.error("fp16", "bfloat16 and fp16 modes cannot be simultaneously enabled");
  if (fp16_on) {
    out.param_dtype = DType::kF16;
    ls.dynamic = loss_scale == 0.0;
    ls.static_scale = loss_scale;
    out.check_grad_overflow = true;
  } else if (bf16_on) {
    out.param_dtype = DType::kBF16;
    out.check_grad_overflow = bf16_check;
  }

  ConfigReader dt = root.section("data_types", UnknownKeys::kWarnUnlessNearMiss);  // dict-read in DeepSpeed
  const Json& accum = dt.get_raw("grad_accum_dtype");
  if (!accum.is_null()) {
    const std::string name = dt.get_choice("grad_accum_dtype", "fp32", {"fp32", "fp16", "bf16"});
    out.grad_dtype = name == "fp32" ? DType::kF32 : name == "fp16" ? DType::kF16 : DType::kBF16;
  }
  dt.refuse_unless("param_dtype", Json(), "parameters are in the model dtype set by fp16/bf16");
  dt.refuse_unless("buffer_dtype", Json(), "models here have no buffers");
  dt.finish();

  ConfigReader autocast = root.section("torch_autocast", UnknownKeys::kWarnUnlessNearMiss);  // dict-read in DeepSpeed
  autocast.refuse_unless("enabled", false,
                         "torch.autocast's per-op choice of dtype has no equivalent here: with bf16.enabled or "
                         "fp16.enabled the whole model runs in that dtype, GEMMs and reductions accumulating in fp32; set "
                         "one of them and remove this section");
  autocast.mark_known("dtype");
  autocast.mark_known("lower_precision_safe_modules");
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
