// Backend and communicator selection; see compute_setup.h.
#include "runtime/tools/compute_setup.h"

#include <cstdlib>

#include "core/check.h"
#include "core/status.h"
#include "core/strings.h"
#include "kernels/cpu/cpu_backend.h"
#include "zero/host_step.h"

// CMake defines both, to 0 or 1 (runtime/CMakeLists.txt).
#ifndef ZE_WITH_CUDA
#define ZE_WITH_CUDA 0
#endif
#ifndef ZE_WITH_NCCL
#define ZE_WITH_NCCL 0
#endif

#if ZE_WITH_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif
#if ZE_WITH_NCCL
#include "comm/nccl_communicator.h"
#endif

namespace zero {

int node_local_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}) {
    if (const char* v = std::getenv(name)) return std::atoi(v);
  }
  return 0;
}

absl::Status check_backend_supports(const RunConfig& c) {
  if (c.run.backend != "cuda") return absl::OkStatus();
  const ZeroConfig& z = c.engine.zero;
  // offload "cpu" is ZeRO-Offload and "nvme" ZeRO-Infinity, both through the
  // host step (zero/host_step.h); check_offload refuses what it does not run.
  // activation_checkpointing.cpu_checkpointing keeps segment inputs in pinned
  // host memory (graph/context.h).
  return check_offload(z, host_offload_for(z, Tier::kDevice, /*forced=*/false));
}

absl::StatusOr<ComputeSetup> make_compute_setup(const RunConfig& c, std::unique_ptr<Communicator>& comm) {
  ZE_CHECK(comm != nullptr);
  ComputeSetup setup;
  if (c.run.backend == "cpu") {
    setup.backend = std::make_unique<CpuBackend>();
    setup.comm = std::move(comm);
    return setup;
  }
  ZE_CHECK(c.run.backend == "cuda") << c.run.backend;
#if !ZE_WITH_CUDA
  return absl::FailedPreconditionError(
      "--backend cuda: this zero-train was built without the CUDA backend (CMake found no CUDA toolkit, or "
      "ZE_ENABLE_CUDA was OFF); rebuild where nvcc is installed (CMake's summary lists \"CUDA + cuBLAS\"), or use "
      "--backend cpu");
#else
  const int rank = comm->rank(), world = comm->world_size();
  const int device = node_local_rank();
  const std::string where = world > 1 ? cat("--backend cuda (rank ", rank, ", device ", device, ")")
                                      : cat("--backend cuda (device ", device, ")");
  absl::StatusOr<std::unique_ptr<CudaBackend>> cuda = CudaBackend::create(device);
  if (!cuda.ok()) {
    const bool no_gpu = cuda.status().code() == absl::StatusCode::kFailedPrecondition ||
                        cuda.status().code() == absl::StatusCode::kInvalidArgument;
    return annotate(cuda.status(), cat(where, no_gpu ? ": no usable GPU" : ": cannot start the CUDA backend"));
  }
  if (world == 1) {
    // One rank: every collective is the identity. The MPI communicator (under
    // `mpirun -np 1`) is finalised here rather than handed device pointers.
    setup.comm = make_local_communicator();
    comm.reset();
  } else {
#if ZE_WITH_NCCL
    double timeout_s = 600.0;
    if (const char* t = std::getenv("ZE_COMM_TIMEOUT_S")) timeout_s = std::atof(t);
    absl::StatusOr<std::unique_ptr<NcclCommunicator>> nccl =
        NcclCommunicator::create(std::move(comm), device, (*cuda)->cuda_stream(kComputeStream), timeout_s);
    if (!nccl.ok()) return annotate(nccl.status(), cat(where, ": starting NCCL"));
    setup.comm = *std::move(nccl);
#else
    return absl::FailedPreconditionError(cat(
        where, ": ", world, " ranks need NCCL for collectives on device memory, and this zero-train was built "
        "without it (CMake found no nccl.h / libnccl next to the CUDA toolkit); install NCCL and rebuild, or run "
        "one rank"));
#endif
  }
  setup.backend = *std::move(cuda);
  return setup;
#endif
}

}  // namespace zero
