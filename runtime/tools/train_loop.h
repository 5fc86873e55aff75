// The zero-train loop: builds the model and the engine from a RunConfig, runs
// run.steps optimizer steps on the data given (open_training_data, opened
// before: bad data is a usage error found before anything is built) and
// reports progress. It runs as named phases (train_loop.cc's TrainingRun):
// take the inputs, choose MFU's
// peak, attach the comms logger, build (mesh, build_model, Engine::create: the
// calls zero-estimate's dry run and the benchmarks make too), describe,
// restore, open the outputs, train, finish.
#pragma once

#include <ostream>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "kernels/backend.h"
#include "runtime/config/run_config.h"
#include "runtime/tools/training_data.h"

namespace zero {

// Every rank runs this; only rank 0 writes progress and metrics to `out`.
// Returns 0 when the run did its steps, or the signal that stopped it at a
// step boundary (core/signals.h: every rank stops at the same step).
absl::StatusOr<int> run_training(const RunConfig& config, TrainingData data, Backend& backend, Communicator& comm,
                                 std::ostream& out);

}  // namespace zero
