// The zero-train loop: builds the data loader, the model and the engine from
// a RunConfig, runs run.steps optimizer steps and reports progress.
#pragma once

#include <ostream>

#include "absl/status/status.h"
#include "runtime/backend/backend.h"
#include "runtime/comm/communicator.h"
#include "runtime/config/run_config.h"

namespace zero {

// Every rank runs this; only rank 0 writes progress and metrics to `out`.
absl::Status run_training(const RunConfig& config, Backend& backend, Communicator& comm, std::ostream& out);

}  // namespace zero
