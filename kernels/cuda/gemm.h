// Ops::matmul on cuBLAS (cublasGemmEx / cublasGemmStridedBatchedEx), fp32
// accumulation always (CUBLAS_COMPUTE_32F, reduced-precision split-K
// reductions disallowed, no TF32: an fp32 compute dtype means fp32 products).
//
// Row-major operands, column-major cuBLAS: a row-major [r, c] matrix is a
// column-major [c, r] one, so C = op(A) op(B) is issued as
// C^T = op(B)^T op(A)^T, i.e. cuBLAS gets (B, A) swapped with m and n swapped
// and the same transpose flags.
//
// Dtypes: A and B are converted into the workspace when they are not in the
// compute dtype. C is written directly when it is fp32, or in the compute
// dtype without a bias; otherwise the product goes to an fp32 staging buffer
// and is then added to or cast into C, so a 16-bit C is rounded once. The
// bias (any float dtype) is added to the fp32 result by a broadcast kernel
// after the GEMM (alpha must be 1 with a bias, as on the CPU).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <memory>

#include "kernels/workspace_arena.h"
#include "kernels/ops.h"

namespace zero {
class Backend;
}

namespace zero::cuda {

class CublasGemm {
 public:
  // cuBLAS gets a tracked workspace of this size (cuBLAS's own default on Hopper).
  static constexpr size_t kCublasWorkspaceBytes = 32u << 20;

  // `handle` is bound to `stream` by the caller and outlives this object.
  CublasGemm(Backend& backend, cublasHandle_t handle, cudaStream_t stream);

  void run(const Tensor& a, const Tensor& b, const Tensor& c, const MatmulSpec& spec,
           const Tensor& bias, WorkspaceArena& workspace);

 private:
  void ensure_cublas_workspace();

  Backend& backend_;
  cublasHandle_t handle_;
  cudaStream_t stream_;
  std::shared_ptr<Storage> cublas_workspace_;
};

}  // namespace zero::cuda
