// The memory planner; see memory_plan.h. plan_memory() replays a run (the
// model states' initialisation, then forward, backward and step per
// micro-batch) through the simulation in memory_plan_sim.h and reads the
// peaks off the simulation's tracker.
#include "zero/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "absl/strings/str_format.h"
#include "runtime/base/status.h"
#include "runtime/base/strings.h"
#include "runtime/config/run_config.h"
#include "zero/host_step.h"
#include "zero/memory_plan_sim.h"

namespace zero {

using memsim::ContextSim;
using memsim::Sim;
using memsim::SimTensor;
using memsim::StateSim;
using memsim::WorkspaceSim;

namespace {

std::array<std::array<int64_t, kNumMemCategories>, kNumTiers> currents(const MemorySnapshot& s) {
  std::array<std::array<int64_t, kNumMemCategories>, kNumTiers> out{};
  for (int t = 0; t < kNumTiers; ++t)
    for (int c = 0; c < kNumMemCategories; ++c) out[t][c] = s.by_category[t][c].current;
  return out;
}

}  // namespace

absl::StatusOr<MemoryPlan> plan_memory(const PlanInput& in) {
  const EngineConfig& e = in.engine;
  const GptConfig& g = in.model;
  const int64_t seq = in.seq_len > 0 ? in.seq_len : g.seq_len;
  if (in.world < 1) return absl::InvalidArgumentError(cat("world size ", in.world, " must be at least 1"));
  if (in.rank < 0 || in.rank >= in.world)
    return absl::InvalidArgumentError(cat("rank ", in.rank, " is not in 0..", in.world - 1));
  if (e.zero.stage < 0 || e.zero.stage > 3)
    return absl::InvalidArgumentError(cat("zero_optimization.stage: ", e.zero.stage, " does not exist (0-3)"));
  if (g.n_layer < 1 || g.n_head < 1 || g.d_model < 1 || g.vocab_size < 1 || g.d_model % g.n_head != 0)
    return absl::InvalidArgumentError(cat("model: n_layer ", g.n_layer, ", n_head ", g.n_head, ", d_model ",
                                          g.d_model, ", vocab_size ", g.vocab_size,
                                          " is not a GPT (d_model divisible by n_head)"));
  if (seq < 1 || seq > g.seq_len)
    return absl::InvalidArgumentError(cat("sequence length ", seq, " must be between 1 and model.seq_len ", g.seq_len));
  if (in.micro_batch < 1)
    return absl::InvalidArgumentError(cat("train_micro_batch_size_per_gpu: ", in.micro_batch, " must be > 0"));
  if (e.gradient_accumulation_steps < 1)
    return absl::InvalidArgumentError(
        cat("gradient_accumulation_steps: ", e.gradient_accumulation_steps, " must be > 0"));

  const HostOffload offload = host_offload_for(e.zero, in.compute_tier, e.force_offload_path);
  ZE_RETURN_IF_ERROR(check_offload(e.zero, offload));  // as the engine
  ZE_RETURN_IF_ERROR(
      check_optimizer_precision(e.optimizer_precision, e.zero.stage, e.param_dtype, e.gradient_dtype()));

  MemoryPlan plan;
  plan.world = in.world;
  plan.rank = in.rank;
  plan.compute_tier = in.compute_tier;
  Gpt model(g);
  plan.num_parameters = g.num_parameters();

  Sim sim;
  sim.tier = in.compute_tier;
  std::unique_ptr<StateSim> state = memsim::make_state_sim(sim, model, e, in.world, in.rank, plan);
  plan.after_init = currents(sim.tracker.snapshot());

  WorkspaceSim ws(sim, e.param_dtype);
  ContextSim ctx(sim, ws, g, seq, e.param_dtype, e.gradient_dtype());
  ctx.set_hooks(state.get());
  if (const std::optional<int64_t> k = e.activation_checkpointing.number_checkpoints) {
    ZE_ASSIGN_OR_RETURN(auto segments, split_checkpoint_segments(model.checkpointable_layers(), *k));  // as Engine::init
    ctx.set_checkpoint_segments(std::move(segments));
    plan.checkpoint_segments = *k;
    ctx.set_checkpoint_offload(checkpoint_inputs_to_host(e, in.compute_tier));  // as Engine::init
  }

  // Engine::forward / backward / step, micro-step by micro-step.
  // The batch is the loader's host memory (untracked); Engine::to_compute
  // copies it into activations when the backend computes elsewhere.
  const int64_t tokens = in.micro_batch * seq;
  auto to_compute = [&](int64_t numel) {
    return SimTensor{in.compute_tier == Tier::kHost ? nullptr : sim.alloc(MemCategory::kActivations, numel * 4), numel};
  };
  SimTensor pending_dlogits;
  for (int step = 0; step < std::max(1, in.optimizer_steps); ++step) {
    for (int64_t micro = 0; micro < e.gradient_accumulation_steps; ++micro) {
      {  // forward
        ctx.clear();
        state->begin_forward();
        SimTensor logits = ctx.forward(model, to_compute(tokens));
        SimTensor losses = ctx.activation(logits.numel / g.vocab_size);
        { const SimTensor targets = to_compute(tokens); }  // cross_entropy's operand
        pending_dlogits = logits;
      }
      {  // backward
        SimTensor dlogits = std::move(pending_dlogits);
        pending_dlogits = SimTensor();
        state->begin_backward(micro + 1 == e.gradient_accumulation_steps);
        ctx.backward(model, dlogits);
        state->end_backward();
      }
      if (micro + 1 == e.gradient_accumulation_steps) state->apply_step();
    }
  }

  const MemorySnapshot s = sim.tracker.snapshot();
  for (int t = 0; t < kNumTiers; ++t) {
    for (int c = 0; c < kNumMemCategories; ++c) plan.peak[t][c] = s.by_category[t][c].peak;
    plan.total_peak[t] = s.allocated[t].peak;
  }
  if (plan.at(in.compute_tier, MemCategory::kWorkspace) > 0) {
    plan.notes.push_back(in.compute_tier == Tier::kHost
                             ? "workspace: the ops' staging buffers; oneDNN's own scratchpads come on top"
                             : "workspace: the CPU ops' staging requests; the CUDA ops' differ (not checked on a GPU)");
  }
  if (plan.checkpoint_segments > 0 && checkpoint_inputs_to_host(e, in.compute_tier)) {
    plan.notes.push_back("cpu_checkpointing: segment inputs in host memory (host activations), copied back to "
                         "the compute tier one segment ahead of their recompute");
  }
  if (e.zero.stage == 3)
    plan.notes.push_back("stage 3: peaks of a run of 2+ steps (from the second step on, the coordinator prefetches)");
  if (offload.optimizer) {
    plan.notes.push_back(cat("ZeRO-Offload: optimizer state in host memory, the step on the CPU; host comm_buffers "
                             "hold its pinned staging (2 chunks of ",
                             host_step_chunk_elems(plan.partition_numel, e.zero.sub_group_size), " elements)",
                             offload.parameters ? "; the stage-3 parameter shard in host memory" : ""));
  }
  return plan;
}

PlanInput plan_input(const RunConfig& config, int world, int rank) {
  PlanInput in;
  in.model = config.model.gpt;
  in.micro_batch = config.engine.micro_batch_size;
  in.seq_len = config.model.gpt.seq_len;
  in.engine = config.engine;
  in.world = world;
  in.rank = rank;
  return in;
}

absl::StatusOr<MemoryPlan> plan_memory(const RunConfig& config, int world, int rank) {
  if (config.model.type != "gpt")
    return absl::InvalidArgumentError(cat("model.type: \"", config.model.type, "\" cannot be planned (only \"gpt\")"));
  return plan_memory(plan_input(config, world, rank));
}

absl::Status check_memory_fits(const RunConfig& config, int world, int rank, int ranks_on_node,
                               int64_t host_available_bytes) {
  const GptConfig& g = config.model.gpt;
  const int64_t micro = config.engine.micro_batch_size;
  // One micro-batch's fp32 logits, and its activations' order of magnitude
  // (a few dozen d_model-wide tensors per layer): both must be numbers.
  int64_t tokens = 0, logits = 0, per_layer = 0, layers = 0;
  const bool overflow = __builtin_mul_overflow(micro, g.seq_len, &tokens) ||
                        __builtin_mul_overflow(tokens, g.vocab_size, &logits) ||
                        __builtin_mul_overflow(logits, int64_t{4}, &logits) ||
                        __builtin_mul_overflow(tokens, g.d_model * 4 * 64, &per_layer) ||
                        __builtin_mul_overflow(per_layer, g.n_layer, &layers);
  if (overflow) {
    return absl::InvalidArgumentError(cat("train_micro_batch_size_per_gpu: ", micro, " sequences of ", g.seq_len,
                                          " tokens (model.seq_len) make activations whose size overflows 64 bits; "
                                          "lower train_micro_batch_size_per_gpu"));
  }
  const int64_t share = host_available_bytes >= 0 ? host_available_bytes / std::max(1, ranks_on_node) : -1;
  const bool on_host = config.run.backend != "cuda";  // on a GPU the logits are device memory
  if (share >= 0 && on_host && logits > share) {
    return absl::ResourceExhaustedError(cat(
        "train_micro_batch_size_per_gpu: ", micro, " sequences of ", g.seq_len, " tokens need ", format_bytes(logits),
        " for one micro-batch's logits alone (vocabulary ", g.vocab_size, "); this rank has ", format_bytes(share),
        " of host memory. Lower train_micro_batch_size_per_gpu"));
  }
  if (share < 0 || config.model.type != "gpt") return absl::OkStatus();
  PlanInput in = plan_input(config, world, rank);
  in.compute_tier = config.run.backend == "cuda" ? Tier::kDevice : Tier::kHost;
  absl::StatusOr<MemoryPlan> plan = plan_memory(in);
  if (!plan.ok()) return absl::OkStatus();  // the engine reports what the planner cannot plan
  const int64_t need = plan->total(Tier::kHost);
  if (need <= share) return absl::OkStatus();
  std::string parts;
  for (int c = 0; c < kNumMemCategories; ++c) {
    const int64_t b = plan->at(Tier::kHost, static_cast<MemCategory>(c));
    if (b > 0) parts += cat(parts.empty() ? "" : ", ", mem_category_name(static_cast<MemCategory>(c)), " ", format_bytes(b));
  }
  return absl::ResourceExhaustedError(cat(
      "this rank needs ", format_bytes(need), " of host memory at its peak by the plan (", parts, ") and has ",
      format_bytes(share), ranks_on_node > 1 ? cat(" (", ranks_on_node, " ranks share this machine)") : "",
      "; it cannot fit. Lower train_micro_batch_size_per_gpu, raise zero_optimization.stage, use more ranks, offload "
      "to NVMe (zero_optimization.offload_optimizer / offload_param) or checkpoint activations "
      "(activation_checkpointing.number_checkpoints); zero-estimate prints the plan"));
}

std::string format_memory_plan(const MemoryPlan& plan, const std::string& title) {
  std::vector<int> tiers;
  for (int t = 0; t < kNumTiers; ++t)
    if (t == static_cast<int>(plan.compute_tier) || plan.total_peak[t] > 0) tiers.push_back(t);
  auto cell = [](int64_t b) {
    return b == 0 ? std::string("0") : absl::StrFormat("%d (%s)", b, format_bytes(b));
  };
  auto row = [&](std::string_view label, auto&& value_of) {
    std::string line = absl::StrFormat("%-16s", label);
    for (int t : tiers) line += absl::StrFormat("  %-28s", value_of(t));
    while (!line.empty() && line.back() == ' ') line.pop_back();
    return line + "\n";
  };
  std::string out = title + "\n";
  out += row("category", [](int t) { return std::string(tier_name(static_cast<Tier>(t))); });
  for (int c = 0; c < kNumMemCategories; ++c)
    out += row(mem_category_name(static_cast<MemCategory>(c)), [&](int t) { return cell(plan.peak[t][c]); });
  out += row("total (peak)", [&](int t) { return cell(plan.total_peak[t]); });
  for (const std::string& n : plan.notes) out += "note: " + n + "\n";
  return out;
}

// ---- analytic model states

ModelStateBytes model_state_bytes(double params, int64_t world, int stage, const ModelStateFactors& f) {
  const double w = static_cast<double>(world);
  ModelStateBytes b{f.param_bytes * params, f.grad_bytes * params, f.optimizer_bytes * params};
  if (stage >= 1) b.optimizer_state /= w;
  if (stage >= 2) b.gradients /= w;
  if (stage >= 3) b.parameters /= w;
  return b;
}

ModelStateFactors model_state_factors(const EngineConfig& e) {
  const bool aliased = e.zero.stage == 0 && e.param_dtype == DType::kF32;
  // K: the master (unless aliased) and each state, in their dtypes.
  const double master = aliased ? 0.0 : static_cast<double>(dtype_size(e.optimizer_precision.master));
  const double states = static_cast<double>(dtype_size(e.optimizer_precision.states));
  return {static_cast<double>(dtype_size(e.param_dtype)), static_cast<double>(dtype_size(e.gradient_dtype())),
          master + states * memsim::optimizer_state_arrays(e.optimizer)};
}

ModelStateBytes engine_model_state_bytes(int64_t params, int64_t world, int stage, const EngineConfig& engine) {
  EngineConfig e = engine;
  e.zero.stage = stage;
  const ModelStateFactors f = model_state_factors(e);
  const int64_t pad = stage == 0 ? 1 : stage == 3 ? world : 2 * world;
  const int64_t padded = (params + pad - 1) / pad * pad;
  ModelStateBytes b = model_state_bytes(static_cast<double>(padded), world, stage, f);
  return b;
}

double deepspeed_zero2_estimate(double params, int64_t world) {
  return 4.0 * params + std::floor(16.0 * params / static_cast<double>(world));
}

double deepspeed_zero3_estimate(double params, double largest_layer_params, int64_t world) {
  return 4.0 * largest_layer_params + std::floor(18.0 * params / static_cast<double>(world));
}

}  // namespace zero
