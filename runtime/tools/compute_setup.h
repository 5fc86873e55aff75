// Which backend and communicator a zero-train rank runs on (run.backend,
// --backend):
//   cpu   the CPU backend; collectives over the communicator it was given
//         (MPI under mpirun, else the single-process one).
//   cuda  the CUDA backend on device = this rank's index on its node
//         (OMPI_COMM_WORLD_LOCAL_RANK, else SLURM_LOCALID, else 0). On more
//         than one rank collectives go through NCCL, bootstrapped over the MPI
//         communicator (which keeps the host-scalar reductions); on one rank
//         through the single-process communicator, so no MPI call ever sees a
//         device pointer.
// Everything CUDA-specific stays in compute_setup.cc, compiled with
// ZE_WITH_CUDA / ZE_WITH_NCCL as CMake found them, so the training loop sees
// only the Backend and Communicator interfaces.
#pragma once

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "kernels/backend.h"
#include "runtime/config/run_config.h"

namespace zero {

struct ComputeSetup {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Communicator> comm;  // declared after backend: destroyed first
};

// This rank's index among the ranks of its node, from the launcher's
// environment (0 without a launcher).
int node_local_rank();

// Config keys the chosen backend cannot honour yet, refused with the key path
// (INVALID_ARGUMENT): on cuda, the offload combinations the host step does
// not run (zero/host_step.h: offload_optimizer "cpu" at stage 0, offload_param
// "cpu" without offload_optimizer "cpu"). offload "cpu" itself is
// ZeRO-Offload; cpu_checkpointing keeps segment inputs in pinned host memory.
absl::Status check_backend_supports(const RunConfig& config);

// Builds the backend named by config.run.backend and the communicator to use
// with it, taking `comm` (from create_communicator()) over when it succeeds.
// Fails with FAILED_PRECONDITION when the binary lacks CUDA (or NCCL for
// several ranks) or no usable GPU is visible, naming what to do; `comm` then
// stays with the caller, who must not finalise MPI while other ranks may be
// waiting in a collective (zero-train exits without finalising).
absl::StatusOr<ComputeSetup> make_compute_setup(const RunConfig& config, std::unique_ptr<Communicator>& comm);

}  // namespace zero
