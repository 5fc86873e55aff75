// The memory plan of a run config and zero-train's preflight; see memory_preflight.h.
#include "runtime/config/memory_preflight.h"

#include <algorithm>

#include "core/strings.h"

namespace zero {

PlanInput plan_input(const RunConfig& config, int world, int rank) {
  PlanInput in;
  in.model = config.model.gpt;
  in.micro_batch = config.engine.micro_batch_size;
  in.seq_len = config.model.gpt.seq_len;
  in.engine = config.engine;
  in.world = world;
  in.tensor = config.tensor_size();
  in.expert = config.expert_size();
  in.sequence_parallel = config.sequence_parallel;
  in.rank = rank;
  in.compute_tier = config.run.backend == "cuda" ? Tier::kDevice : Tier::kHost;
  in.freeze = config.model.freeze;  // frozen parameters hold no gradients or optimizer state
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
  absl::StatusOr<MemoryPlan> plan = plan_memory(plan_input(config, world, rank));
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

}  // namespace zero
