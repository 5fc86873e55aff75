// The declared config keys; see config_schema.h.
#include "runtime/config/config_schema.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <type_traits>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/check.h"
#include "core/strings.h"

namespace zero {

std::string ConfigKey::section() const {
  const size_t dot = path.rfind('.');
  return dot == std::string::npos ? "" : path.substr(0, dot);
}

std::string ConfigKey::name() const {
  const size_t dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

ConfigKey ConfigKey::also(std::string a) const {
  ConfigKey k = *this;
  k.alias = std::move(a);
  return k;
}

ConfigKey ConfigKey::when(std::function<bool(const RunConfig&)> f) const {
  ConfigKey k = *this;
  k.applies = std::move(f);
  return k;
}

ConfigKey ConfigKey::shown(std::string text) const {
  ConfigKey k = *this;
  k.shown_default = std::move(text);
  return k;
}

ConfigKey ConfigKey::read_by_code() const {
  ConfigKey k = *this;
  k.by_code = true;
  return k;
}

namespace {

// A field of RunConfig: ZE_FIELD(engine.zero.stage).
#define ZE_FIELD(member) [](RunConfig& c) -> auto& { return c.member; }

template <typename Ref>
using FieldType = std::remove_reference_t<std::invoke_result_t<Ref, RunConfig&>>;

// A float field's value as the double it was written as: the shortest
// decimal that rounds to it (0.999f shows as 0.999, not 0.99900001).
double as_double(float f) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof(buf), f);
  return std::strtod(std::string(buf, r.ptr).c_str(), nullptr);
}
double as_double(double d) { return d; }

ConfigKey base(std::string path, KeyKind kind, std::string meaning) {
  ConfigKey k;
  k.path = std::move(path);
  k.kind = kind;
  k.meaning = std::move(meaning);
  return k;
}

template <typename Ref>
ConfigKey boolean(std::string path, Ref ref, std::string meaning) {
  ConfigKey k = base(std::move(path), KeyKind::kBool, std::move(meaning));
  k.get = [ref](RunConfig& c) { return Json(static_cast<bool>(ref(c))); };
  k.set = [ref](RunConfig& c, const Json& v) { ref(c) = v.get<bool>(); };
  return k;
}

// Integers (int, int64_t, uint64_t fields; std::optional<int64_t> with `optional`).
template <typename Ref>
ConfigKey integer(std::string path, Ref ref, int64_t lo, int64_t hi, std::string meaning) {
  ConfigKey k = base(std::move(path), KeyKind::kInt, std::move(meaning));
  k.min_int = lo;
  k.max_int = hi;
  using T = FieldType<Ref>;
  if constexpr (std::is_same_v<T, std::optional<int64_t>>) {
    k.optional = true;
    k.get = [ref](RunConfig& c) { return ref(c) ? Json(*ref(c)) : Json(); };
    k.set = [ref](RunConfig& c, const Json& v) { ref(c) = v.get<int64_t>(); };
  } else {
    k.get = [ref](RunConfig& c) { return Json(static_cast<int64_t>(ref(c))); };
    k.set = [ref](RunConfig& c, const Json& v) { ref(c) = static_cast<T>(v.get<int64_t>()); };
  }
  return k;
}

// Numbers (float, double fields; std::optional<double> with `optional`).
template <typename Ref>
ConfigKey number(std::string path, Ref ref, NumberRange range, std::string meaning) {
  ConfigKey k = base(std::move(path), KeyKind::kNumber, std::move(meaning));
  k.range = range;
  using T = FieldType<Ref>;
  if constexpr (std::is_same_v<T, std::optional<double>>) {
    k.optional = true;
    k.get = [ref](RunConfig& c) { return ref(c) ? Json(*ref(c)) : Json(); };
    k.set = [ref](RunConfig& c, const Json& v) { ref(c) = v.get<double>(); };
  } else {
    k.get = [ref](RunConfig& c) { return Json(as_double(ref(c))); };
    k.set = [ref](RunConfig& c, const Json& v) { ref(c) = static_cast<T>(v.get<double>()); };
  }
  return k;
}

template <typename Ref>
ConfigKey text(std::string path, Ref ref, std::string meaning) {
  ConfigKey k = base(std::move(path), KeyKind::kString, std::move(meaning));
  k.get = [ref](RunConfig& c) { return Json(ref(c)); };
  k.set = [ref](RunConfig& c, const Json& v) { ref(c) = v.get<std::string>(); };
  return k;
}

// One of `values` (name, value); a string field takes the name itself.
template <typename Ref, typename E = FieldType<Ref>>
ConfigKey choice(std::string path, Ref ref, std::vector<std::pair<std::string, E>> values, std::string meaning) {
  ConfigKey k = base(std::move(path), KeyKind::kChoice, std::move(meaning));
  for (const auto& [name, value] : values) k.choices.push_back(name);
  k.get = [ref, values](RunConfig& c) {
    for (const auto& [name, value] : values) {
      if (ref(c) == value) return Json(name);
    }
    return Json();
  };
  k.set = [ref, values](RunConfig& c, const Json& v) {
    for (const auto& [name, value] : values) {
      if (v.get<std::string>() == name) ref(c) = value;
    }
  };
  return k;
}

template <typename Ref>
ConfigKey text_choice(std::string path, Ref ref, std::vector<std::string> names, std::string meaning) {
  std::vector<std::pair<std::string, std::string>> values;
  for (const std::string& n : names) values.emplace_back(n, n);
  return choice(std::move(path), ref, std::move(values), std::move(meaning));
}

// Accepted at any value of its type, with no effect here (the meaning says why).
ConfigKey accepted(std::string path, KeyKind kind, Json def, std::string meaning) {
  ConfigKey k = base(std::move(path), kind, std::move(meaning));
  k.get = [def](RunConfig&) { return def; };
  return k;
}

// Refused unless at `allowed` (DeepSpeed's value that asks for nothing).
ConfigKey refused(std::string path, Json allowed, std::string why) {
  ConfigKey k = base(std::move(path), KeyKind::kRefused, std::move(why));
  k.allowed = std::move(allowed);
  k.get = [a = k.allowed](RunConfig&) { return a; };
  return k;
}

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

constexpr int64_t kMax = INT64_MAX;
const NumberRange kNonNegative = NumberRange::at_least(0.0);
const NumberRange kPositive = NumberRange::above(0.0);
const NumberRange kRatio = NumberRange::between(0.0, 1.0);

void add_offload_keys(std::vector<ConfigKey>& keys, const std::string& s, bool param) {
  auto field = [param](RunConfig& c) -> OffloadConfig& {
    return param ? c.engine.zero.offload_param : c.engine.zero.offload_optimizer;
  };
  const std::string what = param ? "the stage-3 parameter shard" : "master weights and optimizer state";
  keys.push_back(choice(s + ".device", [field](RunConfig& c) -> auto& { return field(c).device; },
                        std::vector<std::pair<std::string, OffloadDevice>>{
                            {"none", OffloadDevice::kNone}, {"cpu", OffloadDevice::kCpu}, {"nvme", OffloadDevice::kNvme}},
                        cat("where ", what, " live", param ? " (stage 3)" : " (nvme: stages 1-3)")));
  ConfigKey path = text(s + ".nvme_path", [field](RunConfig& c) -> auto& { return field(c).nvme_path; },
                        "directory of the swap file (required with device \"nvme\")");
  path.optional = true;
  keys.push_back(path.shown("—"));
  keys.push_back(integer(s + ".buffer_count", [field](RunConfig& c) -> auto& { return field(c).buffer_count; }, 1,
                         kMax,
                         param ? "host buffers the parameter reads ahead of each all-gather go through"
                               : "host buffers the swapped sub-groups stream through"));
  keys.push_back(boolean(s + ".pin_memory", [field](RunConfig& c) -> auto& { return field(c).pin_memory; },
                         "accepted; staging buffers are always pinned (false is logged)"));
  if (param) {
    keys.push_back(integer(s + ".buffer_size", [field](RunConfig& c) -> auto& { return field(c).buffer_size; }, 1,
                           kMax, "elements per parameter swap record; at least the largest parameter chunk"));
    keys.push_back(integer(s + ".max_in_cpu", [field](RunConfig& c) -> auto& { return field(c).max_in_cpu; }, 0,
                           kMax, "accepted; no effect"));
  } else {
    keys.push_back(boolean(s + ".pipeline_read", [field](RunConfig& c) -> auto& { return field(c).pipeline_read; },
                           "accepted; reads, updates and writes always overlap"));
    keys.push_back(boolean(s + ".pipeline_write", [field](RunConfig& c) -> auto& { return field(c).pipeline_write; },
                           "accepted; reads, updates and writes always overlap"));
    keys.push_back(boolean(s + ".fast_init", [field](RunConfig& c) -> auto& { return field(c).fast_init; },
                           "accepted; no effect"));
    keys.push_back(refused(s + ".ratio", 1.0, "partial (Twin-Flow) offload is not implemented"));
    keys.push_back(refused(s + ".super_offload", false, "SuperOffload is not implemented"));
    keys.push_back(accepted(s + ".cpuadam_cores_perc", KeyKind::kNumber, 0.8, "accepted; no effect"));
  }
}

std::vector<ConfigKey> declare() {
  std::vector<ConfigKey> k;
  // ---- ZeroEngine's sections.
  k.push_back(text_choice("model.type", ZE_FIELD(model.type), {"gpt"}, "the network (GPT-2 architecture)"));
  k.push_back(integer("model.n_layer", ZE_FIELD(model.gpt.n_layer), 1, 100000, "transformer blocks"));
  k.push_back(integer("model.n_head", ZE_FIELD(model.gpt.n_head), 1, 65536, "attention heads (divide d_model)"));
  k.push_back(integer("model.d_model", ZE_FIELD(model.gpt.d_model), 1, int64_t{1} << 20, "hidden width"));
  k.push_back(integer("model.vocab_size", ZE_FIELD(model.gpt.vocab_size), 1, INT32_MAX,
                      "vocabulary (token ids must be below it)"));
  k.push_back(integer("model.seq_len", ZE_FIELD(model.gpt.seq_len), 1, int64_t{1} << 24, "sequence length"));
  k.push_back(number("model.dropout", ZE_FIELD(model.gpt.dropout), NumberRange::unit_open(),
                     "GPT-2's dropout (embeddings, attention and MLP outputs); masks are a hash of "
                     "(run.seed, layer, global sample, position), the same on any number of ranks"));
  k.push_back(text_choice("data.format", ZE_FIELD(data.format), {"text", "llmc"},
                          "\"text\": bytes of text files (vocabulary 256); \"llmc\": llm.c token shards"));
  k.push_back(text("data.path", ZE_FIELD(data.path), "a file, a directory (its files) or a glob")
                  .shown("(required to train)"));
  k.push_back(integer("data.seed", ZE_FIELD(data.seed), 0, kMax, "sampling seed"));
  k.push_back(integer("run.steps", ZE_FIELD(run.steps), 0, int64_t{1} << 40,
                      "optimizer steps in total (counting those before a resume)"));
  k.push_back(text("run.metrics", ZE_FIELD(run.metrics), "JSON-lines file, one object per optimizer step"));
  k.push_back(text("run.save_dir", ZE_FIELD(run.save_dir), "checkpoint directory (\"\": no checkpoints)"));
  k.push_back(integer("run.save_every", ZE_FIELD(run.save_every), 0, kMax,
                      "save every N optimizer steps (0: only at the end)"));
  k.push_back(integer("run.keep", ZE_FIELD(run.keep), 0, kMax, "keep the newest N checkpoints (0: all)"));
  k.push_back(text("run.resume", ZE_FIELD(run.resume),
                   "a checkpoint directory, or \"auto\" (save_dir's newest, if any)")
                  .read_by_code());
  k.push_back(text("run.init_from", ZE_FIELD(run.init_from), "a safetensors file to initialise the weights from"));
  k.push_back(integer("run.seed", ZE_FIELD(engine.seed), 0, kMax, "parameter initialisation and dropout seed"));
  k.push_back(text_choice("run.backend", ZE_FIELD(run.backend), {"cpu", "cuda"},
                          "where ops run (cuda: one GPU per rank, the node-local rank's)"));
  k.push_back(integer("run.nonfinite_steps_allowed", ZE_FIELD(run.nonfinite_steps_allowed), 0, INT32_MAX,
                      "consecutive steps with inf/NaN gradients or loss skipped before the run stops (fp32, bf16)"));

  // ---- DeepSpeed's top level.
  k.push_back(integer("train_batch_size", ZE_FIELD(train_batch_size), 1, kMax,
                      "global batch: micro batch x accumulation x ranks (give one or two of the three)")
                  .shown("derived")
                  .read_by_code());
  k.push_back(integer("train_micro_batch_size_per_gpu", ZE_FIELD(engine.micro_batch_size), 1, kMax,
                      "samples per rank per forward")
                  .shown("derived")
                  .read_by_code());
  k.push_back(integer("gradient_accumulation_steps", ZE_FIELD(engine.gradient_accumulation_steps), 1, kMax,
                      "micro-steps per optimizer step")
                  .shown("derived")
                  .read_by_code());
  k.push_back(number("gradient_clipping", ZE_FIELD(engine.gradient_clipping), kNonNegative,
                     "global L2-norm clipping (DeepSpeed's formula); 0 disables"));
  k.push_back(integer("steps_per_print", ZE_FIELD(steps_per_print), 1, kMax, "progress line period (steps)"));
  k.push_back(boolean("wall_clock_breakdown", ZE_FIELD(wall_clock_breakdown),
                      "forward/backward/step times at each print"));
  k.push_back(boolean("memory_breakdown", ZE_FIELD(memory_breakdown), "every category and tier at each print"));
  k.push_back(boolean("dump_state", ZE_FIELD(dump_state), "print the effective config at start"));
  k.push_back(boolean("prescale_gradients", ZE_FIELD(switches.prescale_gradients),
                      "divide gradients by gradient_predivide_factor before the reduction, the rest after"));
  k.push_back(number("gradient_predivide_factor", ZE_FIELD(switches.gradient_predivide_factor), kPositive,
                     "the divisor before the reduction with prescale_gradients"));
  k.push_back(text_choice("gradient_allreduce_op", ZE_FIELD(switches.gradient_allreduce_op), {"mean", "sum"},
                          "\"sum\" skips averaging gradients over ranks (not at stage 3)"));
  ConfigKey comm = text_choice("communication_data_type", ZE_FIELD(switches.communication_data_type),
                               {"fp32", "fp16", "bf16"},
                               "must equal the gradient dtype (gradients are reduced in their own dtype)");
  comm.optional = true;
  k.push_back(comm.shown("gradient dtype"));
  k.push_back(accepted("zero_allow_untested_optimizer", KeyKind::kBool, false,
                       "accepted; every optimizer here is one ZeRO supports"));
  k.push_back(accepted("zero_force_ds_cpu_optimizer", KeyKind::kBool, true, "accepted; no effect"));
  k.push_back(accepted("dataloader_drop_last", KeyKind::kBool, false,
                       "accepted; windows are sampled, never partial"));
  k.push_back(refused("managed_gradient_accumulation", true,
                      "the engine decides the accumulation boundary from gradient_accumulation_steps"));
  k.push_back(refused("sparse_gradients", false, "gradients are dense"));
  k.push_back(refused("disable_allgather", false, "the all-gather after the optimizer step is required"));
  k.push_back(refused("seq_parallel_communication_data_type", "fp32", "there is no sequence parallelism"));
  k.push_back(refused("sequence_parallel_size", 1, "there is no sequence parallelism"));
  k.push_back(refused("graph_harvesting", false, "there are no CUDA graphs"));
  k.push_back(refused("use_data_before_expert_parallelism", false, "there is no expert parallelism"));
  k.push_back(refused("log_level", "info", "ZeroEngine's log has one level"));

  // ---- optimizer.
  k.push_back(choice("optimizer.type", ZE_FIELD(engine.optimizer.type),
                     std::vector<std::pair<std::string, OptimizerType>>{{"Adam", OptimizerType::kAdam},
                                                                        {"AdamW", OptimizerType::kAdamW},
                                                                        {"Lion", OptimizerType::kLion},
                                                                        {"SGD", OptimizerType::kSGD}},
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
  k.push_back(choice("scheduler.type", ZE_FIELD(engine.scheduler.type),
                     std::vector<std::pair<std::string, SchedulerType>>{
                         {"WarmupLR", SchedulerType::kWarmupLR},
                         {"WarmupDecayLR", SchedulerType::kWarmupDecayLR},
                         {"WarmupCosineLR", SchedulerType::kWarmupCosineLR},
                         {"OneCycle", SchedulerType::kOneCycle},
                         {"LRRangeTest", SchedulerType::kLRRangeTest}},
                     "DeepSpeed's schedule, stepped once per applied optimizer step")
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
                  .when(with_total));
  k.push_back(number(sp + "warmup_min_ratio", ZE_FIELD(engine.scheduler.warmup_min_ratio), kRatio,
                     "WarmupCosineLR: lr ratio at the start of warm-up")
                  .when(cosine));
  k.push_back(number(sp + "cos_min_ratio", ZE_FIELD(engine.scheduler.cos_min_ratio), kRatio,
                     "WarmupCosineLR: lr ratio at the end")
                  .when(cosine));
  k.push_back(number(sp + "cycle_min_lr", ZE_FIELD(engine.scheduler.cycle_min_lr), kNonNegative,
                     "OneCycle: lowest lr (required)")
                  .when(one_cycle));
  k.push_back(number(sp + "cycle_max_lr", ZE_FIELD(engine.scheduler.cycle_max_lr), kNonNegative,
                     "OneCycle: highest lr (required)")
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

  // ---- zero_optimization.
  const std::string z = "zero_optimization.";
  k.push_back(integer(z + "stage", ZE_FIELD(engine.zero.stage), 0, 3,
                      "0: data parallel; 1: optimizer state, 2: + gradients, 3: + parameters partitioned"));
  k.push_back(boolean(z + "contiguous_gradients", ZE_FIELD(engine.zero.contiguous_gradients),
                      "gradients always live in contiguous buckets (false warns)"));
  k.push_back(boolean(z + "reduce_scatter", ZE_FIELD(engine.zero.reduce_scatter),
                      "reduce-scatter gradients (false: all-reduce and keep the owned part)"));
  k.push_back(integer(z + "reduce_bucket_size", ZE_FIELD(engine.zero.reduce_bucket_size), 0, kMax,
                      "gradient elements per reduction bucket"));
  k.push_back(accepted(z + "allgather_partitions", KeyKind::kBool, true, "accepted; DeepSpeed does not use it either"));
  k.push_back(integer(z + "allgather_bucket_size", ZE_FIELD(engine.zero.allgather_bucket_size), 0, kMax,
                      "elements per all-gather chunk after a stage-1/2 step (even)"));
  k.push_back(boolean(z + "overlap_comm", ZE_FIELD(engine.zero.overlap_comm),
                      "reduce on the communication thread while backward goes on")
                  .shown("true at stage 3, else false")
                  .read_by_code());
  k.push_back(boolean(z + "load_from_fp32_weights", ZE_FIELD(engine.zero.load_from_fp32_weights),
                      "checkpoints load the fp32 master weights (else the 16-bit ones)"));
  k.push_back(refused(z + "round_robin_gradients", false, "buckets follow model order"));
  k.push_back(boolean(z + "use_multi_rank_bucket_allreduce", ZE_FIELD(engine.zero.use_multi_rank_bucket_allreduce),
                      "one all-reduce per bucket (else one reduce per owner); same values"));
  k.push_back(boolean(z + "ignore_unused_parameters", ZE_FIELD(engine.zero.ignore_unused_parameters),
                      "accepted; every parameter here is used"));
  k.push_back(integer(z + "sub_group_size", ZE_FIELD(engine.zero.sub_group_size), 0, kMax,
                      "the optimizer runs over the partition in sub-groups of this many elements (NVMe: the swap "
                      "unit)"));
  k.push_back(integer(z + "prefetch_bucket_size", ZE_FIELD(engine.zero.prefetch_bucket_size), 0, kMax,
                      "stage 3: elements gathered ahead of use")
                  .also("stage3_prefetch_bucket_size"));
  k.push_back(integer(z + "param_persistence_threshold", ZE_FIELD(engine.zero.param_persistence_threshold), 0, kMax,
                      "stage 3: parameters this small stay gathered")
                  .also("stage3_param_persistence_threshold"));
  k.push_back(integer(z + "model_persistence_threshold", ZE_FIELD(engine.zero.model_persistence_threshold), 0, kMax,
                      "stage 3: total elements allowed to persist")
                  .also("stage3_model_persistence_threshold")
                  .shown("max"));
  k.push_back(integer(z + "max_live_parameters", ZE_FIELD(engine.zero.max_live_parameters), 0, kMax,
                      "stage 3: gathered elements at most")
                  .also("stage3_max_live_parameters"));
  k.push_back(integer(z + "max_reuse_distance", ZE_FIELD(engine.zero.max_reuse_distance), 0, kMax,
                      "stage 3: a parameter used again within this many elements stays gathered")
                  .also("stage3_max_reuse_distance"));
  k.push_back(boolean(z + "gather_16bit_weights_on_model_save",
                      ZE_FIELD(engine.zero.gather_16bit_weights_on_model_save),
                      "accepted; zero-ckpt consolidate gathers weights from any checkpoint")
                  .also("stage3_gather_16bit_weights_on_model_save")
                  .read_by_code());
  add_offload_keys(k, z + "offload_optimizer", false);
  add_offload_keys(k, z + "offload_param", true);
  k.push_back(refused(z + "elastic_checkpoint", false, "superseded by universal checkpoints"));
  k.push_back(refused(z + "legacy_stage1", false, "DeepSpeed removed it too"));
  k.push_back(refused(z + "zero_hpz_partition_size", 1, "ZeRO++ hierarchical partitioning is not implemented"));
  k.push_back(refused(z + "zero_quantized_weights", false, "ZeRO++ quantized weights are not implemented"));
  k.push_back(refused(z + "zero_quantized_nontrainable_weights", false, "ZeRO++ quantization is not implemented"));
  k.push_back(refused(z + "zero_quantized_gradients", false, "ZeRO++ quantized gradients are not implemented"));
  k.push_back(refused(z + "zeropp_loco_param", Json(), "ZeRO++ LoCo is not implemented"));
  k.push_back(refused(z + "mics_shard_size", -1, "MiCS is not implemented"));
  k.push_back(refused(z + "mics_hierarchical_params_gather", false, "MiCS is not implemented"));
  k.push_back(refused(z + "module_granularity_threshold", 0, "leaf-module grouping is not implemented")
                  .also("stage3_module_granularity_threshold"));
  k.push_back(refused(z + "use_all_reduce_for_fetch_params", false, "parameters are always gathered with all-gather")
                  .also("stage3_use_all_reduce_for_fetch_params"));
  k.push_back(refused(z + "allgather_sequential", false, "parameters are gathered in buckets")
                  .also("stage3_allgather_sequential"));
  k.push_back(refused(z + "zenflow", Json(), "ZenFlow is not implemented"));
  k.push_back(refused(z + "pipeline_loading_checkpoint", false, "there is no pipeline parallelism"));
  k.push_back(refused(z + "save_muon_momentum_buffer_in_memory", false, "there is no Muon optimizer"));
  k.push_back(refused(z + "leaf_module", Json::object(), "leaf-module grouping is not implemented"));
  for (const char* name : {"memory_efficient_linear", "override_module_apply"}) {
    k.push_back(accepted(z + name, KeyKind::kBool, true, "accepted; about torch modules, no meaning here"));
  }
  for (const char* name : {"log_trace_cache_warnings", "enable_sanity_checks"}) {
    k.push_back(accepted(z + name, KeyKind::kBool, false, "accepted; about torch modules, no meaning here"));
  }

  // ---- aio, activation checkpointing, checkpoint.
  k.push_back(integer("aio.block_size", ZE_FIELD(engine.aio.block_size), 1, kMax, "bytes per io_uring request"));
  k.push_back(integer("aio.queue_depth", ZE_FIELD(engine.aio.queue_depth), 1, kMax, "requests in flight"));
  k.push_back(integer("aio.intra_op_parallelism", ZE_FIELD(engine.aio.intra_op_parallelism), 1, kMax,
                      "multiplies the requests in flight (DeepSpeed's worker threads)"));
  k.push_back(boolean("aio.single_submit", ZE_FIELD(engine.aio.single_submit),
                      "one submit per request (else per batch)"));
  k.push_back(boolean("aio.overlap_events", ZE_FIELD(engine.aio.overlap_events),
                      "refill as each request completes (else per batch)"));
  k.push_back(refused("aio.use_gds", false, "GPUDirect Storage needs CUDA and cuFile"));
  const std::string ac = "activation_checkpointing.";
  k.push_back(refused(ac + "partition_activations", false,
                      "it splits checkpoints across tensor-parallel ranks, and ZeroEngine has no tensor "
                      "parallelism"));
  k.push_back(boolean(ac + "contiguous_memory_optimization",
                      ZE_FIELD(engine.activation_checkpointing.contiguous_memory_optimization),
                      "needs partition_activations (DeepSpeed's rule)"));
  k.push_back(integer(ac + "number_checkpoints", ZE_FIELD(engine.activation_checkpointing.number_checkpoints), 1,
                      kMax, "the model's blocks in this many recomputed segments")
                  .shown("off"));
  k.push_back(boolean(ac + "synchronize_checkpoint_boundary",
                      ZE_FIELD(engine.activation_checkpointing.synchronize_checkpoint_boundary),
                      "accepted; ops complete in order"));
  k.push_back(boolean(ac + "profile", ZE_FIELD(engine.activation_checkpointing.profile),
                      "recompute time in the wall-clock line"));
  k.push_back(boolean(ac + "cpu_checkpointing", ZE_FIELD(engine.activation_checkpointing.cpu_checkpointing),
                      "segment inputs in pinned host memory on GPU ranks"));
  k.push_back(text_choice("checkpoint.tag_validation", ZE_FIELD(switches.tag_validation),
                          {"WARN", "IGNORE", "FAIL", "warn", "ignore", "fail"},
                          "checked; tags are validated by the manifest anyway"));
  k.push_back(accepted("checkpoint.load_universal", KeyKind::kBool, false,
                       "accepted; every checkpoint here loads at any world size"));
  k.push_back(refused("checkpoint.use_node_local_storage", false, "ranks share one checkpoint directory"));
  k.push_back(refused("checkpoint.parallel_write.pipeline_stage", false, "there is no pipeline parallelism"));
  return k;
}

std::string kind_name(const ConfigKey& k) {
  switch (k.kind) {
    case KeyKind::kBool:
      return "bool";
    case KeyKind::kInt:
      return "integer";
    case KeyKind::kNumber:
      return "number";
    case KeyKind::kString:
      return "string";
    case KeyKind::kChoice:
      return "choice";
    case KeyKind::kNumberList:
      return cat(k.list_size, " numbers");
    case KeyKind::kRefused:
      return "";
  }
  return "";
}

std::string format_int(int64_t v) {
  if (v == INT64_MAX) return "max";
  if (v == INT32_MAX) return "2^31-1";
  return cat(v);
}

// What values the key takes: "[1, 64]", ">= 0", "\"none\", \"cpu\"".
std::string accepts(const ConfigKey& k) {
  switch (k.kind) {
    case KeyKind::kInt:
      if (k.min_int == INT64_MIN && k.max_int == INT64_MAX) return "any";
      if (k.max_int == INT64_MAX) return cat(">= ", k.min_int);
      return cat("[", format_int(k.min_int), ", ", format_int(k.max_int), "]");
    case KeyKind::kNumber:
    case KeyKind::kNumberList:
      return k.range.describe();
    case KeyKind::kChoice: {
      std::string out;
      for (const std::string& c : k.choices) out += cat(out.empty() ? "" : ", ", "`\"", c, "\"`");
      return out;
    }
    default:
      return "";
  }
}

std::string escape_cell(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

std::string default_cell(const ConfigKey& k) {
  if (!k.shown_default.empty()) return k.shown_default;
  RunConfig fresh;
  const Json v = k.get(fresh);
  if (v.is_null()) return "unset";
  if (v.is_number_integer()) return format_int(v.get<int64_t>());
  if (v.is_number_float()) {
    std::string s = absl::StrFormat("%g", v.get<double>());
    return s;
  }
  if (v.is_array()) {
    std::string out;
    for (const Json& e : v) out += cat(out.empty() ? "" : ", ", absl::StrFormat("%g", e.get<double>()));
    return "[" + out + "]";
  }
  return v.dump();
}

}  // namespace

const std::vector<ConfigKey>& config_schema() {
  static const std::vector<ConfigKey> keys = declare();
  return keys;
}

void read_declared_keys(ConfigReader& r, RunConfig& c, std::string_view section) {
  for (const ConfigKey& k : config_schema()) {
    if (k.by_code || k.section() != section) continue;
    if (k.applies && !k.applies(c)) continue;
    const std::string name = k.alias.empty() ? k.name() : r.pick(k.name(), k.alias);
    if (k.kind == KeyKind::kRefused) {
      r.refuse_unless(name, k.allowed, k.meaning);
      continue;
    }
    if (k.optional && r.get_raw(name).is_null()) continue;
    const Json def = k.get(c);
    Json v;
    switch (k.kind) {
      case KeyKind::kBool:
        v = r.get_bool(name, def.get<bool>());
        break;
      case KeyKind::kInt:
        v = r.get_int(name, def.is_null() ? 0 : def.get<int64_t>(), k.min_int, k.max_int);
        break;
      case KeyKind::kNumber:
        v = r.get_float(name, def.is_null() ? 0.0 : def.get<double>(), k.range);
        break;
      case KeyKind::kString:
        if (def.is_null()) {
          r.mark_known(name);  // accepted at any value
          continue;
        }
        v = r.get_string(name, def.get<std::string>());
        break;
      case KeyKind::kChoice:
        v = r.get_choice(name, def.is_null() ? std::string() : def.get<std::string>(), k.choices);
        break;
      case KeyKind::kNumberList:
        v = r.get_float_list(name, def.get<std::vector<double>>(), k.list_size, k.range);
        break;
      case KeyKind::kRefused:
        break;
    }
    if (k.set) k.set(c, v);
  }
}

std::string config_key_table() {
  std::string read = "| key | type | default | accepts | meaning |\n| --- | --- | --- | --- | --- |\n";
  std::string refused = "| key | accepted only at | why |\n| --- | --- | --- |\n";
  for (const ConfigKey& k : config_schema()) {
    const std::string key = k.alias.empty() ? cat("`", k.path, "`") : cat("`", k.path, "` (or `", k.alias, "`)");
    if (k.kind == KeyKind::kRefused) {
      refused += cat("| ", key, " | `", k.allowed.is_null() ? "null" : k.allowed.dump(), "` | ",
                     escape_cell(k.meaning), " |\n");
      continue;
    }
    read += cat("| ", key, " | ", kind_name(k), " | ", escape_cell(default_cell(k)), " | ", escape_cell(accepts(k)),
                " | ", escape_cell(k.meaning), " |\n");
  }
  return read + "\nRefused at any other value, with the reason:\n\n" + refused;
}

}  // namespace zero
