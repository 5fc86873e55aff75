// The one place where CUDA runtime and cuBLAS return codes become errors.
//
// Two mappings, for the two kinds of failure (see STYLE.md):
//  * cuda_status() / cublas_status() turn a code into an absl::Status naming
//    the call, the code's name and its description. Used where a user can
//    cause the failure (no device, no driver, out of memory at start-up).
//  * ZE_CUDA_CHECK / ZE_CUBLAS_CHECK abort with the call, the code and
//    file:line through the same path as ZE_CHECK. Used for everything after
//    start-up, where a failure is a bug or a dead device. ZE_CUDA_CHECK_LAUNCH()
//    follows every kernel launch; it catches bad launch configurations at once
//    and sticky errors of earlier asynchronous work at the next launch.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "core/check.h"
#include "core/strings.h"

namespace zero::cuda {

inline std::string cuda_error_text(cudaError_t err) {
  return cat(cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
}

inline std::string cublas_error_text(cublasStatus_t st) {
  return cat(cublasGetStatusName(st), " (", cublasGetStatusString(st), ")");
}

inline absl::Status cuda_status(cudaError_t err, std::string_view call) {
  if (err == cudaSuccess) return absl::OkStatus();
  const std::string msg = cat(call, " failed: ", cuda_error_text(err));
  switch (err) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(msg);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
      return absl::FailedPreconditionError(
          cat(msg, "; check the driver and CUDA_VISIBLE_DEVICES (nvidia-smi lists the devices)"));
    default:
      return absl::InternalError(msg);
  }
}

inline absl::Status cublas_status(cublasStatus_t st, std::string_view call) {
  if (st == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const std::string msg = cat(call, " failed: ", cublas_error_text(st));
  if (st == CUBLAS_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(msg);
  if (st == CUBLAS_STATUS_NOT_INITIALIZED || st == CUBLAS_STATUS_ARCH_MISMATCH) {
    return absl::FailedPreconditionError(msg);
  }
  return absl::InternalError(msg);
}

[[noreturn]] inline void cuda_check_failed(cudaError_t err, const char* call, const char* file,
                                           int line) {
  ::zero::internal::check_failed(file, line, call, cat("CUDA error ", cuda_error_text(err)));
}

[[noreturn]] inline void cublas_check_failed(cublasStatus_t st, const char* call, const char* file,
                                             int line) {
  ::zero::internal::check_failed(file, line, call, cat("cuBLAS error ", cublas_error_text(st)));
}

}  // namespace zero::cuda

#define ZE_CUDA_CHECK(expr)                                                       \
  do {                                                                            \
    const cudaError_t ze_cuda_err_ = (expr);                                      \
    if (ze_cuda_err_ != cudaSuccess) {                                            \
      ::zero::cuda::cuda_check_failed(ze_cuda_err_, #expr, __FILE__, __LINE__);   \
    }                                                                             \
  } while (0)

#define ZE_CUBLAS_CHECK(expr)                                                     \
  do {                                                                            \
    const cublasStatus_t ze_cublas_st_ = (expr);                                  \
    if (ze_cublas_st_ != CUBLAS_STATUS_SUCCESS) {                                 \
      ::zero::cuda::cublas_check_failed(ze_cublas_st_, #expr, __FILE__, __LINE__); \
    }                                                                             \
  } while (0)

#define ZE_CUDA_CHECK_LAUNCH() ZE_CUDA_CHECK(cudaGetLastError())

// Evaluates a CUDA call and returns its Status from the enclosing function on failure.
#define ZE_CUDA_RETURN_IF_ERROR(expr)                                              \
  do {                                                                             \
    const ::absl::Status ze_cuda_st_ = ::zero::cuda::cuda_status((expr), #expr);   \
    if (!ze_cuda_st_.ok()) return ze_cuda_st_;                                     \
  } while (0)
