// The memory planner: per rank, per category and per tier, the peak bytes a
// run will hold in the tracking allocator (core/memory_tracker.h),
// known before anything is allocated. zero-estimate prints it, zero-train's
// preflight checks it against the machine, the tests hold it to the measured
// peaks.
//
// The plan is not a model of the engine: it is the engine. plan_memory()
// builds the real Engine for the real model and config on a dry-run backend
// (kernels/dry_run/dry_run_backend.h: allocations tracked, nothing touched,
// ops and copies do nothing) and a dry-run communicator playing rank r of W
// (comm/dry_run_communicator.h), skips parameter initialisation, runs
// the real step path (train_batch: the pipeline schedule, or forward,
// backward, step per micro-batch) for
// `optimizer_steps` optimizer steps, and reads the dry run's tracker. So the
// plan follows every layout, bucket, prefetch, swap and recompute rule by
// construction, and a new feature is planned the day it runs.
//
// What the plan cannot know: on a device, the CUDA ops' own workspace (the dry
// run carves what the CPU ops carve for the same shapes); tensors allocated
// outside a training step (checkpoint save/load, evaluation).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/memory_tracker.h"
#include "graph/gpt.h"
#include "runtime/engine/engine_config.h"

namespace zero {

// What the planner needs to know about a run (a RunConfig holds all of it:
// runtime/config/memory_preflight.h).
struct PlanInput {
  GptConfig model;
  int64_t micro_batch = 1;  // sequences per micro-batch on this rank
  int64_t seq_len = 0;      // tokens per sequence; 0: model.seq_len
  EngineConfig engine;
  int world = 1;            // ranks: data x tensor x pipeline (engine.pipeline.stages)
  int tensor = 1;           // tensor-parallel size T (dividing world and the model's heads)
  int expert = 1;           // expert-parallel size (model.ep_size: dividing the data ranks and the experts)
  bool sequence_parallel = false;  // Megatron-SP over the tensor group (T > 1)
  int rank = 0;             // which rank to plan (padding, the last shard and the vocabulary slice differ per rank)
  Tier compute_tier = Tier::kHost;  // where the backend computes: kHost (CPU), kDevice (CUDA)
  int optimizer_steps = 2;  // length of the dry run (>= 2 to reach stage 3's steady state)
  // Parameters to freeze, by name (graph/freeze.h's freeze_matching: whole-
  // name regular expressions; each must match some parameter of this rank's
  // stage when there is one stage). Frozen parameters hold no gradient or
  // optimizer state, so the plan counts those for the trainable ones only.
  std::vector<std::string> freeze;
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
  int64_t trainable_parameters = 0;  // of Psi, the elements that train (not frozen)
  int64_t partition_numel = 0;    // master / optimizer elements this rank holds
  int64_t checkpoint_segments = 0;
  int64_t comm_bytes_per_step = 0;  // bytes this rank sends into collectives per optimizer step (the last)
  std::vector<std::string> notes;  // assumptions worth printing beside the table

  int64_t at(Tier t, MemCategory c) const { return peak[static_cast<int>(t)][static_cast<int>(c)]; }
  int64_t total(Tier t) const { return total_peak[static_cast<int>(t)]; }
};

// Plans one rank by a dry run of the engine. Errors are the engine's own
// (naming the config key that makes the run impossible), or name the model
// or batch field the planner cannot build.
absl::StatusOr<MemoryPlan> plan_memory(const PlanInput& input);

// The table: one row per category, one column per tier that holds anything,
// exact bytes and a readable size; then the total row (peak of the running
// sum). `title` goes on the first line.
std::string format_memory_plan(const MemoryPlan& plan, const std::string& title);

}  // namespace zero
