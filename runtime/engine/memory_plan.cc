// The memory planner: the engine's dry run; see memory_plan.h.
#include "runtime/engine/memory_plan.h"

#include <memory>

#include "absl/strings/str_format.h"
#include "comm/device_mesh.h"
#include "core/status.h"
#include "core/strings.h"
#include "graph/build_model.h"
#include "graph/freeze.h"
#include "kernels/dry_run/dry_run_backend.h"
#include "runtime/engine/engine.h"
#include "zero/host_step.h"

namespace zero {

namespace {

std::array<std::array<int64_t, kNumMemCategories>, kNumTiers> currents(const MemorySnapshot& s) {
  std::array<std::array<int64_t, kNumMemCategories>, kNumTiers> out{};
  for (int t = 0; t < kNumTiers; ++t)
    for (int c = 0; c < kNumMemCategories; ++c) out[t][c] = s.by_category[t][c].current;
  return out;
}

}  // namespace

absl::StatusOr<MemoryPlan> plan_memory(const PlanInput& in) {
  const GptConfig& g = in.model;
  const int64_t seq = in.seq_len > 0 ? in.seq_len : g.seq_len;
  if (in.world < 1) return absl::InvalidArgumentError(cat("world size ", in.world, " must be at least 1"));
  if (in.rank < 0 || in.rank >= in.world)
    return absl::InvalidArgumentError(cat("rank ", in.rank, " is not in 0..", in.world - 1));
  if (seq < 1 || seq > g.seq_len)
    return absl::InvalidArgumentError(cat("sequence length ", seq, " must be between 1 and model.seq_len ", g.seq_len));
  if (in.micro_batch < 1)
    return absl::InvalidArgumentError(cat("train_micro_batch_size_per_gpu: ", in.micro_batch, " must be > 0"));

  if (in.world % in.tensor != 0)
    return absl::InvalidArgumentError(cat("tensor_parallel.autotp_size ", in.tensor, " must divide the world of ",
                                          in.world, " ranks"));
  if (in.sequence_parallel && seq % in.tensor != 0)
    return absl::InvalidArgumentError(cat("tensor_parallel.sequence_parallel: the sequence of ", seq,
                                          " does not divide by autotp_size ", in.tensor));

  const int stages = in.engine.pipeline.stages;
  if (stages < 1 || in.world % (in.tensor * stages) != 0)
    return absl::InvalidArgumentError(cat("pipeline.stages ", stages, " x tensor_parallel.autotp_size ", in.tensor,
                                          " must divide the world of ", in.world, " ranks"));

  const int data = in.world / (in.tensor * stages);
  if (in.expert < 1 || data % in.expert != 0)
    return absl::InvalidArgumentError(cat("model.ep_size ", in.expert, " must divide the ", data,
                                          " data-parallel ranks"));
  DryRunBackend backend(in.compute_tier);
  ZE_ASSIGN_OR_RETURN(const std::unique_ptr<DeviceMesh> mesh,
                      DeviceMesh::dry_run({data, in.tensor, stages, in.expert}, in.rank));
  EngineConfig e = in.engine;
  e.micro_batch_size = in.micro_batch;
  // This rank's stage and tensor slice, built as zero-train builds it (first
  // and last stages hold the embeddings and the head, so their plans differ
  // from the middle ones').
  ZE_ASSIGN_OR_RETURN(std::unique_ptr<Gpt> model,
                      build_model(g, *mesh, {in.sequence_parallel, e.pipeline.partition_method,
                                                   e.pipeline.num_layers_per_virtual_stage}));
  if (!in.freeze.empty()) {
    // The patterns are zero-train's model.freeze: errors name the key.
    const absl::Status frozen =
        freeze_matching(*model, in.freeze, stages > 1 ? UnmatchedPattern::kAllow : UnmatchedPattern::kRefuse).status();
    if (!frozen.ok()) return absl::InvalidArgumentError(cat("model.freeze: ", frozen.message()));
  }
  ZE_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::create(std::move(model), e, backend, *mesh));
  MemoryTracker& tracker = backend.process_tracker();

  MemoryPlan plan;
  plan.world = in.world;
  plan.rank = in.rank;
  plan.compute_tier = in.compute_tier;
  plan.num_parameters = engine->num_parameters();
  plan.trainable_parameters = engine->num_trainable_parameters();
  for (ModelState* state : engine->states()) plan.partition_numel += state->state_store().numel();
  plan.checkpoint_segments = static_cast<int64_t>(engine->num_checkpoint_segments());
  plan.after_init = currents(tracker.snapshot());

  // The batch is the loader's host memory (untracked, as in a run): token 0
  // everywhere, every target counted.
  const std::vector<int32_t> tokens(static_cast<size_t>(in.micro_batch * seq), 0);
  const Batch batch{Tensor::wrap(const_cast<int32_t*>(tokens.data()), {in.micro_batch, seq}, DType::kI32),
                    Tensor::wrap(const_cast<int32_t*>(tokens.data()), {in.micro_batch, seq}, DType::kI32)};
  for (int step = 0; step < std::max(1, in.optimizer_steps); ++step) {
    ZE_ASSIGN_OR_RETURN(const StepResult r, engine->train_batch([&](int) -> absl::StatusOr<Batch> { return batch; }));
    plan.comm_bytes_per_step = r.comm_bytes;
  }

  const MemorySnapshot s = tracker.snapshot();
  for (int t = 0; t < kNumTiers; ++t) {
    for (int c = 0; c < kNumMemCategories; ++c) plan.peak[t][c] = s.by_category[t][c].peak;
    plan.total_peak[t] = s.allocated[t].peak;
  }
  if (in.compute_tier != Tier::kHost && plan.at(in.compute_tier, MemCategory::kWorkspace) > 0)
    plan.notes.push_back("workspace: the CPU ops' requests at these shapes; the CUDA ops' differ (not checked on a GPU)");
  if (plan.checkpoint_segments > 0 && checkpoint_inputs_to_host(e, in.compute_tier)) {
    plan.notes.push_back("cpu_checkpointing: segment inputs in host memory (host activations), copied back to "
                         "the compute tier one segment ahead of their recompute");
  }
  if (plan.trainable_parameters < plan.num_parameters) {
    plan.notes.push_back(cat("frozen: ", plan.num_parameters - plan.trainable_parameters, " of ", plan.num_parameters,
                             " parameters (weights only: no gradients or optimizer state for them)"));
  }
  if (e.zero.stage == ZeroStage::k3)
    plan.notes.push_back("stage 3: peaks of a run of 2+ steps (from the second step on, the coordinator prefetches)");
  // The windows the config left unset, as the stage sized them (zero/window_sizes.h).
  const ZeroConfig& used = engine->state().zero_config();
  if (used.reduce_bucket_size != e.zero.reduce_bucket_size || used.prefetch_bucket_size != e.zero.prefetch_bucket_size ||
      used.max_live_parameters != e.zero.max_live_parameters || used.max_reuse_distance != e.zero.max_reuse_distance) {
    plan.notes.push_back(cat("windows unset, sized to the model (an eighth of the elements the partitioning saves): ",
                             "reduce_bucket_size ", used.reduce_bucket_size,
                             e.zero.stage == ZeroStage::k3
                                 ? cat(", stage3_prefetch_bucket_size ", used.prefetch_bucket_size,
                                       ", stage3_max_live_parameters ", used.max_live_parameters,
                                       ", stage3_max_reuse_distance ", used.max_reuse_distance)
                                 : std::string()));
  }
  const HostOffload offload = engine->state().host_offload();
  if (offload.optimizer) {
    plan.notes.push_back(cat(e.zero.offload_optimizer.device == OffloadDevice::kNvme
                                 ? "ZeRO-Infinity: optimizer state on NVMe, swapped through host memory, the step on "
                                   "the CPU; host comm_buffers "
                                 : "ZeRO-Offload: optimizer state in host memory, the step on the CPU; host comm_buffers ",
                             "hold its pinned staging (2 chunks of ",
                             host_step_chunk_elems(plan.partition_numel, e.zero.sub_group_size), " elements)",
                             offload.parameters ? "; the stage-3 parameter shard in host memory" : ""));
  }
  return plan;
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

}  // namespace zero
