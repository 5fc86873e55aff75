// cuBLAS matmul; see gemm.h.
#include "kernels/cuda/gemm.h"

#include <climits>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace zero::cuda {

namespace {

cudaDataType_t cuda_data_type(DType t) {
  switch (t) {
    case DType::kF32: return CUDA_R_32F;
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
    case DType::kI32: break;
  }
  ZE_CHECK(false) << "no cuBLAS GEMM type for " << dtype_name(t);
  return CUDA_R_32F;
}

int as_int(int64_t v, const char* what) {
  ZE_CHECK(v >= 0 && v <= INT_MAX) << "matmul " << what << " = " << v << " does not fit cuBLAS's int";
  return static_cast<int>(v);
}

}  // namespace

CublasGemm::CublasGemm(Backend& backend, cublasHandle_t handle, cudaStream_t stream)
    : backend_(backend), handle_(handle), stream_(stream) {}

void CublasGemm::ensure_cublas_workspace() {
  if (cublas_workspace_ != nullptr) return;
  absl::StatusOr<std::shared_ptr<Storage>> s =
      backend_.allocate(kCublasWorkspaceBytes, Tier::kDevice, MemCategory::kWorkspace, 256);
  ZE_CHECK(s.ok()) << s.status().ToString();
  cublas_workspace_ = *std::move(s);
  ZE_CUBLAS_CHECK(cublasSetWorkspace(handle_, cublas_workspace_->data(), kCublasWorkspaceBytes));
}

void CublasGemm::run(const Tensor& a, const Tensor& b, const Tensor& c, const MatmulSpec& spec,
                     const Tensor& bias, WorkspaceArena& workspace) {
  const MatmulDims dims = matmul_dims(a, b, c, spec, bias);
  ZE_CHECK(!bias.defined() || bias.tier() == Tier::kDevice) << "bias " << bias.debug_string();
  const bool batched = dims.batch > 0;
  const int64_t batch = batched ? dims.batch : 1;
  const int64_t m = dims.m, n = dims.n, k = dims.k;
  if (c.numel() == 0) return;

  const DType gemm = spec.compute;
  const bool direct_out = c.dtype() == DType::kF32 || (c.dtype() == gemm && !bias.defined());
  const DType out = direct_out ? c.dtype() : DType::kF32;
  const size_t gemm_size = dtype_size(gemm);
  const size_t sizes[3] = {
      a.dtype() == gemm ? 0 : static_cast<size_t>(a.numel()) * gemm_size,
      b.dtype() == gemm ? 0 : static_cast<size_t>(b.numel()) * gemm_size,
      direct_out ? 0 : static_cast<size_t>(c.numel()) * sizeof(float),
  };
  void* buf[3];
  workspace.carve(sizes, buf);
  const void* a_ptr = a.data();
  const void* b_ptr = b.data();
  void* c_ptr = direct_out ? c.data() : buf[2];
  if (buf[0] != nullptr) {
    launch_cast(a.data(), a.dtype(), buf[0], gemm, a.numel(), stream_);
    a_ptr = buf[0];
  }
  if (buf[1] != nullptr) {
    launch_cast(b.data(), b.dtype(), buf[1], gemm, b.numel(), stream_);
    b_ptr = buf[1];
  }

  ensure_cublas_workspace();
  // Column-major view (see gemm.h): C^T[n, m] = op(B)^T[n, k] op(A)^T[k, m].
  const cublasOperation_t op_b = spec.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = spec.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int cm = as_int(n, "N"), cn = as_int(m, "M"), ck = as_int(k, "K");
  const int ldb = as_int(spec.trans_b ? k : n, "ldb");
  const int lda = as_int(spec.trans_a ? m : k, "lda");
  const int ldc = cm;
  const float alpha = spec.alpha;
  const float beta = spec.accumulate && direct_out ? 1.0f : 0.0f;
  const cudaDataType_t ab_type = cuda_data_type(gemm), c_type = cuda_data_type(out);
  if (!batched) {
    ZE_CUBLAS_CHECK(cublasGemmEx(handle_, op_b, op_a, cm, cn, ck, &alpha, b_ptr, ab_type, ldb,
                                 a_ptr, ab_type, lda, &beta, c_ptr, c_type, ldc,
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  } else {
    ZE_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        handle_, op_b, op_a, cm, cn, ck, &alpha, b_ptr, ab_type, ldb, k * n, a_ptr, ab_type, lda,
        m * k, &beta, c_ptr, c_type, ldc, m * n, as_int(batch, "batch"), CUBLAS_COMPUTE_32F,
        CUBLAS_GEMM_DEFAULT));
  }

  if (bias.defined()) {
    launch_add_bias_rows(static_cast<float*>(c_ptr), batch * m, n, bias.data(), bias.dtype(),
                         stream_);
  }
  if (!direct_out) {
    if (spec.accumulate) {
      launch_accumulate(c.data(), c.dtype(), static_cast<const float*>(c_ptr), c.numel(), stream_);
    } else {
      launch_cast(c_ptr, DType::kF32, c.data(), c.dtype(), c.numel(), stream_);
    }
  }
}

}  // namespace zero::cuda
