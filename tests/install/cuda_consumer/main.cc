// Links the CUDA backend and (when the package has it) the NCCL communicator
// from the installed package and runs the backend's creation: on a machine
// with a GPU it prints the device, without one the backend's own error. Exit 0
// either way; what is checked is that it builds, links and starts.
#include <cstdio>
#include <string>

#include "kernels/cuda/cuda_backend.h"
#ifdef CONSUMER_HAS_NCCL
#include "comm/nccl_communicator.h"
#endif

int main(int argc, char**) {
  absl::StatusOr<std::unique_ptr<zero::CudaBackend>> backend = zero::CudaBackend::create(0);
  if (backend.ok()) {
    std::printf("cuda backend: %s\n", (*backend)->description().c_str());
  } else {
    std::printf("no cuda backend: %s\n", std::string(backend.status().message()).c_str());
  }
#ifdef CONSUMER_HAS_NCCL
  // Never true here (argc is 1): references the NCCL communicator, so NCCL
  // must link, without running it (it needs several ranks).
  if (argc > 1000) return zero::NcclCommunicator::create(nullptr, 0, nullptr, 1.0).ok() ? 0 : 1;
#endif
  return 0;
}
