// The communicator of a dry run (kernels/dry_run/dry_run_backend.h): it plays
// rank `rank` of `world` without any other process. Every collective
// completes at once and moves nothing (its buffers are a dry run's, which hold
// no memory); sizes, counts and the bytes a real run would send are what the
// engine asks for, so a plan sees rank r's own padding, last shard and
// receive buffers. Reductions of host doubles leave this rank's value.
// It allows early receives, as MPI does, so a pipeline's plan is the
// early-receive program's (runtime/engine/pipeline_schedule.h; the bytes
// sent are the same either way): exact for CPU ranks; over NCCL a run keeps
// the in-order program, whose receive buffers may differ from the plan's by
// about one activation.
// A CommLog attached to it records nothing: no collective runs, so there is
// no latency to report (bytes_communicated() has the volumes).
#pragma once

#include <memory>

#include "comm/communicator.h"

namespace zero {

std::unique_ptr<Communicator> make_dry_run_communicator(int rank, int world);

}  // namespace zero
