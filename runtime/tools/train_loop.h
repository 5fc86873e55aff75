// The zero-train loop: builds the data loader, the model and the engine from
// a RunConfig, runs run.steps optimizer steps and reports progress.
#pragma once

#include <ostream>

#include "absl/status/status.h"
#include "runtime/backend/backend.h"
#include "runtime/config/run_config.h"

namespace zero {

absl::Status run_training(const RunConfig& config, Backend& backend, std::ostream& out);

}  // namespace zero
