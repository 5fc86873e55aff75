// The memory plan of a parsed run config (runtime/engine/memory_plan.h), and
// the preflight zero-train runs with it before it allocates anything.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "runtime/config/run_config.h"
#include "runtime/engine/memory_plan.h"

namespace zero {

// The planner's input for `config` at `world` ranks, rank `rank`; the compute
// tier follows run.backend.
PlanInput plan_input(const RunConfig& config, int world, int rank);
// The plan of that rank. model.type must be one the planner can build ("gpt").
absl::StatusOr<MemoryPlan> plan_memory(const RunConfig& config, int world, int rank);

// The memory preflight: the plan of this rank, times the ranks sharing this
// machine, against the host memory available (host_memory_available_bytes).
// Before planning, the sizes one micro-batch implies are computed with
// overflow checks, so absurd values (a micro-batch of 1e15) are refused by
// name instead of wrapping. RESOURCE_EXHAUSTED with the planned categories
// and what to change when the run cannot fit; INVALID_ARGUMENT naming the key
// when a size overflows.
absl::Status check_memory_fits(const RunConfig& config, int world, int rank, int ranks_on_node,
                               int64_t host_available_bytes);

}  // namespace zero
