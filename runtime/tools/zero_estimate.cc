// zero-estimate: per-rank memory of a run before running it, from the memory
// planner (runtime/engine/memory_plan.h) that the tests hold to the engine's measured
// peaks; or, for a bare parameter count, the ZeRO paper's model-state bytes
// per stage beside ZeroEngine's own (padding, aliasing) and DeepSpeed's
// estimators.
//
//   zero-estimate --config run.json [--config ds.json] [--set k=v]... [--init-from DIR] --world N [--rank R] [--json]
//   zero-estimate --params 7.5e9 --world 1,4,16,64 [--dtype bf16] [--optimizer adamw]
//
// Configs load exactly as zero-train loads them (load_merged_config,
// parse_run_config at the given world size): --init-from DIR's config.json
// is the model unless the model section names one, and a run that resumes
// a checkpoint (run.resume) plans the checkpoint's model. Exit status: 0
// success; 2 bad usage or a config that cannot be planned; 1 anything else.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/strings.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/config/config_reader.h"
#include "runtime/config/memory_preflight.h"
#include "runtime/config/run_config.h"
#include "runtime/engine/model_state_bytes.h"
#include "runtime/tools/cli.h"
#include "runtime/tools/model_family.h"

namespace {

constexpr const char* kUsage = R"(usage: zero-estimate --config FILE... [--set KEY.PATH=VALUE]... [--init-from DIR]
                     --world N [options]
       zero-estimate --params P --world N[,N...] [options]

Per-rank peak memory of a zero-train run (parameters, gradients, optimizer
state, activations under the checkpoint policy, communication buckets and
gathered stage-3 parameters, swap buffers, workspace; per tier), from the
planner the tests check against the engine's tracking allocator.
)";

constexpr const char* kParamsGroup = "Model states only, for a parameter count (the ZeRO paper's Table 1)";

// The CLI::App of main(), for usage errors found after parsing.
const CLI::App* g_app = nullptr;

int usage_error(const std::string& msg) { return zero::cli::usage_error(*g_app, msg); }

int fail(int code, const absl::Status& s) {
  std::fprintf(stderr, "zero-estimate: %s\n", std::string(s.message()).c_str());
  return code;
}

// A positive number written as an integer or in exponent form ("7.5e9").
bool parse_positive(const std::string& s, double& out) {
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size() && out > 0 && out < 1e18;
}

bool parse_count(const std::string& s, int64_t& out) {
  double d;
  if (!parse_positive(s, d) || d != static_cast<double>(static_cast<int64_t>(d))) return false;
  out = static_cast<int64_t>(d);
  return true;
}

double gb(double bytes) { return bytes / 1e9; }

struct Args {
  std::vector<std::string> configs;
  std::vector<zero::ConfigOverride> overrides;
  std::vector<int64_t> worlds;
  std::string world_text;
  int rank = -1;
  bool json = false, all_ranks = false, allow_unknown = false;
  zero::Tier tier = zero::Tier::kHost;
  double params = 0;
  zero::DType dtype = zero::DType::kBF16;
  std::string optimizer = "adamw";
  double largest_layer = 0;
};

int params_mode(const Args& a) {
  zero::EngineConfig e;
  e.param_dtype = a.dtype;
  if (a.optimizer == "sgd" || a.optimizer == "sgd-momentum") {
    e.optimizer.type = zero::OptimizerType::kSGD;
    e.optimizer.momentum = a.optimizer == "sgd" ? 0.0f : 0.9f;
  }
  if (a.optimizer == "lion") e.optimizer.type = zero::OptimizerType::kLion;
  const zero::ModelStateFactors f0 = zero::model_state_factors(e);
  std::printf("model states per rank for %.4g parameters: %s parameters and gradients, %s (GB = 1e9 bytes)\n",
              a.params, std::string(zero::dtype_name(a.dtype)).c_str(),
              a.optimizer == "adamw"  ? "fp32 master weights + AdamW's m and v"
              : a.optimizer == "lion" ? "fp32 master weights + Lion's m"
              : a.optimizer == "sgd"  ? "fp32 master weights, plain SGD"
                                      : "fp32 master weights + SGD momentum");
  std::printf("ZeRO formula: stage 0 (%g+%g+K)Psi, 1: %g Psi + K Psi/W, 2: %g Psi + (%g+K) Psi/W, 3: (%g+%g+K) Psi/W,"
              " K = %g (%s)\n",
              f0.param_bytes, f0.grad_bytes, f0.param_bytes + f0.grad_bytes, f0.param_bytes, f0.grad_bytes,
              f0.param_bytes, f0.grad_bytes, f0.optimizer_bytes,
              a.dtype == zero::DType::kF32 ? "at stage 0 an fp32 model's master copy is the parameters themselves"
                                           : "the ZeRO paper's mixed precision");
  std::printf("%6s %5s | %12s | %-51s |\n", "", "", "", "ZeroEngine allocates");
  std::printf("%6s %5s | %12s | %12s %12s %12s %12s | %s\n", "ranks", "stage", "ZeRO formula", "parameters",
              "gradients", "optimizer", "total", "DeepSpeed estimator");
  const int64_t params = static_cast<int64_t>(a.params);
  for (int64_t w : a.worlds) {
    for (int stage = 0; stage <= 3; ++stage) {
      zero::EngineConfig es = e;
      es.zero.stage = zero::zero_stage(stage);
      const zero::ModelStateBytes formula = zero::model_state_bytes(a.params, w, stage, zero::model_state_factors(es));
      const zero::ModelStateBytes ours = zero::engine_model_state_bytes(params, w, stage, e);
      std::string ds = "-";
      if (stage == 2) ds = absl::StrFormat("%.2f (4 Psi + 16 Psi/W)", gb(zero::deepspeed_zero2_estimate(a.params, w)));
      if (stage == 3) {
        ds = absl::StrFormat("%.2f (4 largest layer + 18 Psi/W%s)",
                             gb(zero::deepspeed_zero3_estimate(a.params, a.largest_layer, w)),
                             a.largest_layer > 0 ? "" : ", largest layer 0: pass --largest-layer");
      }
      std::printf("%6lld %5d | %12.2f | %12.2f %12.2f %12.2f %12.2f | %s\n", static_cast<long long>(w), stage,
                  gb(formula.total()), gb(ours.parameters), gb(ours.gradients), gb(ours.optimizer_state),
                  gb(ours.total()), ds.c_str());
    }
  }
  std::printf("model states only; for activations, buckets, gathered parameters and workspace plan a run config:\n"
              "  zero-estimate --config run.json --world N\n");
  return 0;
}

zero::Json plan_json(const zero::MemoryPlan& p) {
  zero::Json j;
  j["rank"] = p.rank;
  j["num_parameters"] = p.num_parameters;  // this rank's (its tensor slice of its pipeline stage)
  j["trainable_parameters"] = p.trainable_parameters;  // of those, the ones model.freeze leaves training
  for (int t = 0; t < zero::kNumTiers; ++t) {
    const zero::Tier tier = static_cast<zero::Tier>(t);
    if (tier != p.compute_tier && p.total(tier) == 0) continue;
    const std::string tn(zero::tier_name(tier));
    for (int c = 0; c < zero::kNumMemCategories; ++c) {
      const std::string cn(zero::mem_category_name(static_cast<zero::MemCategory>(c)));
      j["peak"][tn][cn] = p.peak[t][c];
      j["after_init"][tn][cn] = p.after_init[t][c];
    }
    j["total"][tn] = p.total(tier);
  }
  return j;
}

int config_mode(const Args& a) {
  const int world = static_cast<int>(a.worlds[0]);
  zero::ConfigSources sources;
  absl::StatusOr<zero::Json> merged = zero::load_layered_config(a.configs, a.overrides, &sources);
  if (!merged.ok()) return fail(2, merged.status());
  zero::ConfigOptions options;
  options.world_size = world;
  options.allow_unknown_keys = a.allow_unknown;
  options.auto_filled = sources.auto_filled();
  options.resumed_model = zero::resumed_checkpoint_model;  // as zero-train: a resumed checkpoint's model
  absl::StatusOr<zero::RunConfig> config = zero::parse_run_config(*merged, options);
  if (!config.ok()) return fail(2, sources.annotate(config.status()));
  for (const std::string& w : config->warnings) {
    std::fprintf(stderr, "zero-estimate: warning: %s\n", (sources.layered() ? sources.annotate(w) : w).c_str());
  }
  if (a.rank >= world) return usage_error(zero::cat("--rank ", a.rank, " is not a rank of --world ", world));
  // run.init_from names the model only through its config.json: never plan
  // another model silently.
  const std::string& init_from = config->run.init_from;
  std::error_code ec;
  if (!init_from.empty() && !std::filesystem::exists(init_from, ec)) {
    return fail(2, absl::InvalidArgumentError(zero::cat("run.init_from (--init-from): ", init_from,
                                                        " does not exist; give a Hugging Face model directory")));
  }
  if (!init_from.empty() && config->model.hf_config.empty() && config->model.hf_source.is_null()) {
    const bool no_config = std::filesystem::is_directory(init_from, ec) &&
                           !std::filesystem::exists(init_from + "/config.json", ec);
    std::fprintf(stderr, "zero-estimate: warning: planning the model section's model: run.init_from %s %s\n",
                 init_from.c_str(),
                 no_config ? "has no config.json" : "gives weights only: the section names the architecture");
  }

  if (config->model.type != "gpt") {
    return fail(2, absl::InvalidArgumentError(
                       zero::cat("model.type: \"", config->model.type, "\" cannot be planned (only \"gpt\")")));
  }
  std::vector<zero::MemoryPlan> plans;
  for (int r = 0; r < world; ++r) {
    zero::PlanInput in = zero::plan_input(*config, world, r);
    in.compute_tier = a.tier;
    absl::StatusOr<zero::MemoryPlan> p = zero::plan_memory(in);
    if (!p.ok()) return fail(p.status().code() == absl::StatusCode::kInternal ? 1 : 2, p.status());
    plans.push_back(*std::move(p));
  }
  // The rank that needs the most (over all tiers); the first one on a tie.
  auto sum = [](const zero::MemoryPlan& p) {
    int64_t s = 0;
    for (int64_t t : p.total_peak) s += t;
    return s;
  };
  int max_rank = 0;
  for (int r = 1; r < world; ++r)
    if (sum(plans[r]) > sum(plans[max_rank])) max_rank = r;
  const zero::EngineConfig& e = config->engine;

  if (a.json) {
    zero::Json j;
    j["world"] = world;
    j["tensor"] = config->tensor_size();
    j["pipeline"] = config->pipeline_size();
    j["stage"] = zero::stage_number(e.zero.stage);
    j["num_parameters"] = config->model.gpt.num_parameters();  // the whole model's; each rank's below
    j["max_rank"] = max_rank;
    j["ranks"] = zero::Json::array();
    for (const zero::MemoryPlan& p : plans) j["ranks"].push_back(plan_json(p));
    std::cout << j.dump(1) << "\n";
    return 0;
  }

  const zero::GptConfig& g = config->model.gpt;
  const int shown = a.rank >= 0 ? a.rank : max_rank;
  const zero::MemoryPlan& plan = plans[shown];
  const int tensor = config->tensor_size(), data = config->data_size(), stages = config->pipeline_size();
  // World rank r is pipeline stage r / (T D) (comm/device_mesh.h).
  const int stage_of_shown = shown / (tensor * data);
  std::printf("model: %s vocab=%lld seq_len=%lld, %.2fM parameters%s\n", zero::model_family_description(g).c_str(),
              static_cast<long long>(g.vocab_size), static_cast<long long>(g.seq_len),
              static_cast<double>(g.num_parameters()) / 1e6,
              tensor > 1 || stages > 1
                  ? zero::cat(", ", absl::StrFormat("%.2fM", static_cast<double>(plan.num_parameters) / 1e6), " on rank ",
                              shown, " (its ", tensor > 1 ? "tensor slice" : "", tensor > 1 && stages > 1 ? " of " : "",
                              stages > 1 ? zero::cat("pipeline stage ", stage_of_shown, " of ", stages) : "", ")")
                        .c_str()
                  : "");
  std::printf("run: micro-batch %lld x accumulation %lld x %d %srank%s%s; ZeRO stage %d%s; %s parameters, %s "
              "gradients, %s; activation checkpointing: %s%s\n",
              static_cast<long long>(e.micro_batch_size), static_cast<long long>(e.gradient_accumulation_steps), data,
              tensor * stages > 1 ? "data-parallel " : "", data == 1 ? "" : "s",
              zero::cat(tensor > 1 ? zero::cat(" x tensor-parallel ", tensor) : "",
                        stages > 1 ? zero::cat(" x pipeline ", stages, " (", zero::pipeline_schedule_name(e.pipeline.schedule), ")")
                                   : "")
                  .c_str(),
              zero::stage_number(e.zero.stage),
              e.zero.overlap_comm ? " (overlap_comm)" : "",
              std::string(zero::dtype_name(e.param_dtype)).c_str(),
              std::string(zero::dtype_name(e.gradient_dtype())).c_str(), std::string(zero::optimizer_type_name(e.optimizer.type)).c_str(),
              plan.checkpoint_segments > 0 ? zero::cat(plan.checkpoint_segments, " segments").c_str() : "off",
              e.zero.offload_optimizer.device == zero::OffloadDevice::kNvme ? "; optimizer state on NVMe"
              : e.zero.offload_optimizer.device == zero::OffloadDevice::kCpu && a.tier != zero::Tier::kHost
                  ? "; optimizer state in host memory (ZeRO-Offload)"
                  : "");
  const std::string title =
      zero::cat("per-rank peak memory in bytes, rank ", shown, " of ", world,
                shown == max_rank ? (world > 1 ? " (the rank with the largest total)" : "")
                                  : zero::cat(" (rank ", max_rank, " has the largest total)"));
  std::fputs(zero::format_memory_plan(plan, title).c_str(), stdout);
  // Gradients and optimizer state of the trainable parameters (model.freeze
  // leaves the frozen ones their weights only), parameters of them all.
  zero::ModelStateBytes formula =
      zero::model_state_bytes(static_cast<double>(plan.trainable_parameters), data, zero::stage_number(e.zero.stage),
                              zero::model_state_factors(e));
  formula.parameters = zero::model_state_bytes(static_cast<double>(plan.num_parameters), data,
                                               zero::stage_number(e.zero.stage), zero::model_state_factors(e))
                           .parameters;
  // Over every tier: offloaded state counts where it went.
  auto init = [&](zero::MemCategory c) {
    int64_t b = 0;
    for (const auto& tier : plan.after_init) b += tier[static_cast<int>(c)];
    return b;
  };
  std::printf("model states at rest: parameters %s, gradients %s, optimizer state %s; the ZeRO formula without "
              "padding: %s, %s, %s\n",
              zero::format_bytes(init(zero::MemCategory::kParameters)).c_str(),
              zero::format_bytes(init(zero::MemCategory::kGradients)).c_str(),
              zero::format_bytes(init(zero::MemCategory::kOptimizerState)).c_str(),
              zero::format_bytes(static_cast<int64_t>(formula.parameters)).c_str(),
              zero::format_bytes(static_cast<int64_t>(formula.gradients)).c_str(),
              zero::format_bytes(static_cast<int64_t>(formula.optimizer_state)).c_str());
  if (a.all_ranks) {
    for (const zero::MemoryPlan& p : plans) {
      std::printf("rank %d: total %lld (%s)\n", p.rank, static_cast<long long>(p.total(p.compute_tier)),
                  zero::format_bytes(p.total(p.compute_tier)).c_str());
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app;
  g_app = &app;
  zero::cli::init_app(app, "zero-estimate", kUsage);
  Args a;
  std::string world, rank, backend, params, dtype, optimizer, largest_layer;
  const CLI::Option* config_opt = app.add_option("--config")
                                      ->type_name("FILE")
                                      ->description("run config, loaded as zero-train loads it (repeat to layer files)")
                                      ->take_all();
  const CLI::Option* set_opt =
      app.add_option("--set")->type_name("KEY.PATH=VALUE")->description("override one key (repeatable)")->take_all();
  const CLI::Option* init_from_opt =
      app.add_option("--init-from")
          ->type_name("DIR|FILE")
          ->description("as zero-train's: a Hugging Face directory whose config.json is the model unless the model "
                        "section names one (run.init_from)")
          ->take_all();
  app.add_option("--world", world,
                 "ranks: data-parallel x tensor_parallel.autotp_size x pipeline.stages (with --params: "
                 "data-parallel ranks, a comma list, e.g. 1,4,16,64)")
      ->type_name("N")
      ->take_last();
  app.add_option("--rank", rank, "show rank R (default: the rank with the largest total)")
      ->type_name("R")
      ->take_last();
  app.add_flag("--all-ranks", a.all_ranks, "also one line of totals per rank");
  app.add_flag("--json", a.json, "every rank's peaks as JSON (with --config)");
  app.add_option("--backend", backend, "compute tier: host memory (cpu, the default) or device memory (cuda)")
      ->type_name("cpu|cuda")
      ->take_last();
  app.add_flag("--allow-unknown-keys", a.allow_unknown, "warn about unknown config keys instead of failing");
  app.add_option("--params", params, "number of parameters, e.g. 7.5e9")
      ->type_name("P")
      ->group(kParamsGroup)
      ->take_last();
  app.add_option("--dtype", dtype, "model dtype of parameters and gradients (default bf16)")
      ->type_name("bf16|fp16|fp32")
      ->group(kParamsGroup)
      ->take_last();
  app.add_option("--optimizer", optimizer, "optimizer state (default adamw: K = 12; lion: 8)")
      ->type_name("adamw|lion|sgd|sgd-momentum")
      ->group(kParamsGroup)
      ->take_last();
  app.add_option("--largest-layer", largest_layer, "parameters of the largest layer, for DeepSpeed's stage-3 estimate")
      ->type_name("N")
      ->group(kParamsGroup)
      ->take_last();
  if (const std::optional<int> exit_code = zero::cli::parse(app, argc, argv)) return *exit_code;
  for (const zero::cli::Occurrence& o : zero::cli::options_in_order(app)) {
    if (o.option == config_opt) a.configs.push_back(o.value);
    if (o.option == set_opt) a.overrides.push_back({o.value, "--set"});
    if (o.option == init_from_opt) {
      a.overrides.push_back({zero::cat("run.init_from=", zero::Json(o.value).dump()), "--init-from"});
    }
  }
  if (app.count("--world")) {
    a.world_text = world;
    size_t start = 0;
    while (true) {
      const size_t comma = world.find(',', start);
      const std::string item = world.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      int64_t w;
      if (!parse_count(item, w) || w > (int64_t{1} << 24))
        return usage_error(zero::cat("--world: \"", item, "\" is not a number of ranks (1 or more)"));
      a.worlds.push_back(w);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  if (app.count("--rank")) {
    int64_t r = 0;
    if (rank != "0" && !parse_count(rank, r)) return usage_error(zero::cat("--rank: \"", rank, "\" is not a rank"));
    a.rank = static_cast<int>(r);
  }
  if (app.count("--backend")) {
    if (backend != "cpu" && backend != "cuda") return usage_error("--backend must be cpu or cuda");
    a.tier = backend == "cpu" ? zero::Tier::kHost : zero::Tier::kDevice;
  }
  if (app.count("--params") && (!parse_positive(params, a.params) || a.params < 1))
    return usage_error(zero::cat("--params: \"", params, "\" is not a number of parameters (e.g. 7.5e9)"));
  if (app.count("--dtype")) {
    absl::StatusOr<zero::DType> t = zero::parse_float_dtype(dtype);
    if (!t.ok()) return usage_error(zero::cat("--dtype: \"", dtype, "\" is not bf16, fp16 or fp32"));
    a.dtype = *t;
  }
  if (app.count("--optimizer")) {
    if (optimizer != "adamw" && optimizer != "lion" && optimizer != "sgd" && optimizer != "sgd-momentum")
      return usage_error("--optimizer must be adamw, lion, sgd or sgd-momentum");
    a.optimizer = optimizer;
  }
  if (app.count("--largest-layer") && !parse_positive(largest_layer, a.largest_layer))
    return usage_error(zero::cat("--largest-layer: \"", largest_layer, "\" is not a number of parameters"));
  if (app.count("--init-from") && a.params > 0) {
    return usage_error("--init-from plans a run's model: give it with --config FILE, not --params");
  }
  if (a.configs.empty() && app.count("--init-from")) {
    return usage_error("--init-from needs --config FILE too (the run's batch, precision and ZeRO settings)");
  }
  if (a.configs.empty() && a.params == 0) return usage_error("give --config FILE (a run) or --params P (model states)");
  if (!a.configs.empty() && a.params > 0) return usage_error("give --config or --params, not both");
  if (a.worlds.empty()) return usage_error("--world N is required (the number of data-parallel ranks)");
  if (a.params > 0) {
    if (a.json || a.rank >= 0) return usage_error("--json and --rank need --config");
    return params_mode(a);
  }
  if (a.worlds.size() != 1)
    return usage_error(zero::cat("--world: give one world size with --config, not ", a.world_text));
  return config_mode(a);
}
