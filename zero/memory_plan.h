// The memory planner: per rank, per category and per tier, the peak bytes a
// run will hold in the tracking allocator (runtime/core/memory_tracker.h),
// computed before anything is allocated. zero-estimate prints it; the tests
// hold it to the measured peaks.
//
// It agrees with the engine by construction where it can: model states are
// sized by the layout functions the model states use (FlatLayout padded to
// 2W, plan_grad_buckets, plan_stage3_partitions, SwapLayout), and the step is
// replayed as a timeline of simulated allocations whose lifetimes mirror the
// C++ lifetimes in the GPT's layers (runtime/graph), the Context's frames and
// checkpoint segments, the stage-2 bucket buffers, the stage-3 gathers
// (the coordinator's trace, prefetch and reuse rules) and reduce-scatters.
// Each simulated byte goes through a MemoryTracker of its own, so peaks mean
// exactly what the run's peaks mean: per category, and of each tier's total.
//
// What is not modelled: oneDNN's scratchpads (the workspace figure counts the
// GEMM and layer-norm staging the ops request, and the arena's 1.25x growth),
// and tensors allocated outside a training step (checkpoint save/load,
// evaluation). The simulated run is initialisation plus two optimizer steps:
// enough for stage 3 to record its trace and then prefetch by it.
//
// model_state_bytes() is the ZeRO paper's analytic count (Table 1):
// (2 + 2 + K) Psi per rank with stage-dependent division by the DP degree.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/core/memory_tracker.h"
#include "runtime/engine/engine_config.h"
#include "runtime/graph/gpt.h"

namespace zero {

struct RunConfig;

// What the planner needs to know about a run (a RunConfig holds all of it).
struct PlanInput {
  GptConfig model;
  int64_t micro_batch = 1;  // sequences per micro-batch on this rank
  int64_t seq_len = 0;      // tokens per sequence; 0: model.seq_len
  EngineConfig engine;
  int world = 1;            // data-parallel ranks
  int rank = 0;             // which rank to plan (stage-2 receive buffers differ per rank)
  Tier compute_tier = Tier::kHost;  // where the backend computes: kHost (CPU), kDevice (CUDA)
  int optimizer_steps = 2;  // length of the simulated run (>= 2 to reach stage 3's steady state)
};

struct MemoryPlan {
  int world = 1, rank = 0;
  Tier compute_tier = Tier::kHost;
  // Peak bytes of each category in each tier over the run.
  std::array<std::array<int64_t, kNumMemCategories>, kNumTiers> peak{};
  // Peak of each tier's running total (<= the sum of its category peaks).
  std::array<int64_t, kNumTiers> total_peak{};
  // After initialisation, before the first step: the model states at rest.
  std::array<std::array<int64_t, kNumMemCategories>, kNumTiers> after_init{};

  int64_t num_parameters = 0;     // Psi
  int64_t partition_numel = 0;    // fp32 master / optimizer elements this rank holds
  int64_t checkpoint_segments = 0;
  std::vector<std::string> notes;  // assumptions worth printing beside the table

  int64_t at(Tier t, MemCategory c) const { return peak[static_cast<int>(t)][static_cast<int>(c)]; }
  int64_t total(Tier t) const { return total_peak[static_cast<int>(t)]; }
};

// Plans one rank. Errors name the config key that makes a run impossible to
// plan (a model other than the GPT, an out-of-range stage or segment count).
absl::StatusOr<MemoryPlan> plan_memory(const PlanInput& input);
// The same for a parsed run config (micro-batch, sequence length, model,
// engine sections) at `world` ranks.
absl::StatusOr<MemoryPlan> plan_memory(const RunConfig& config, int world, int rank);
PlanInput plan_input(const RunConfig& config, int world, int rank);

// The memory preflight zero-train runs before it allocates anything: the
// plan of this rank, times the ranks sharing this machine, against the host
// memory available (host_memory_available_bytes). Before planning, the sizes
// one micro-batch implies are computed with overflow checks, so absurd
// values (a micro-batch of 1e15) are refused by name instead of wrapping.
// RESOURCE_EXHAUSTED with the planned categories and what to change when the
// run cannot fit; INVALID_ARGUMENT naming the key when a size overflows.
absl::Status check_memory_fits(const RunConfig& config, int world, int rank, int ranks_on_node,
                               int64_t host_available_bytes);

// The table: one row per category, one column per tier that holds anything,
// exact bytes and a readable size; then the total row (peak of the running
// sum). `title` goes on the first line.
std::string format_memory_plan(const MemoryPlan& plan, const std::string& title);

// ---- the ZeRO paper's analytic model-state count (Rajbhandari et al., §3)

// Bytes per parameter of each model state. The paper's mixed-precision Adam:
// 2 (fp16 parameters) + 2 (fp16 gradients) + K = 12 (fp32 master, m, v).
struct ModelStateFactors {
  double param_bytes = 2;
  double grad_bytes = 2;
  double optimizer_bytes = 12;  // K
};

struct ModelStateBytes {
  double parameters = 0, gradients = 0, optimizer_state = 0;
  double total() const { return parameters + gradients + optimizer_state; }
};

// Per-rank model-state bytes of `params` parameters at ZeRO `stage` (0: plain
// data parallelism; 1: P_os; 2: P_os+g; 3: P_os+g+p) over `world` ranks,
// without padding.
ModelStateBytes model_state_bytes(double params, int64_t world, int stage, const ModelStateFactors& f = {});

// The factors of an engine config: parameter and gradient dtypes, and K =
// 4 bytes per fp32 array (the master copy unless it aliases fp32 parameters
// at stage 0, plus the optimizer's states).
ModelStateFactors model_state_factors(const EngineConfig& engine);

// What ZeroEngine itself allocates for model states of a `params`-element
// model held as one tensor: the paper's count plus DeepSpeed's padding (a
// multiple of 2W at stages 1-2, of W at stage 3) and the aliasing above.
ModelStateBytes engine_model_state_bytes(int64_t params, int64_t world, int stage, const EngineConfig& engine);

// DeepSpeed's own estimators (estimate_zero2/3_model_states_mem_needs, no
// offload), for comparison: stage 2: 4 Psi + 16 Psi / W; stage 3:
// 4 largest_layer + 18 Psi / W. Device bytes per rank.
double deepspeed_zero2_estimate(double params, int64_t world);
double deepspeed_zero3_estimate(double params, double largest_layer_params, int64_t world);

}  // namespace zero
