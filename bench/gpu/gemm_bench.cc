// GEMM rates on the GPU: the denominator of the GPU MFU figures
// (bench/gpu/check.sh), measured in the same run as the training they judge.
//
//  * BM_CublasBf16/<m>x<n>x<k>: cublasGemmEx straight, bf16 operands and
//    output, fp32 accumulation (CUBLAS_COMPUTE_32F) — the bf16 tensor-core
//    rate this GPU reaches; at large squares it is the achievable peak. Also
//    at GPT-2 124M's forward shapes for 8192 tokens (qkv, attention
//    projection, fc, fc projection, LM head).
//  * BM_OpsMatmulBf16/<shape>: the CUDA backend's Ops::matmul as a bf16
//    training step calls it (fp32 activations x bf16 weight, bf16 compute,
//    fp32 output), at the same GPT-2 shapes: what this engine's GEMMs get,
//    conversions of the fp32 operand included.
//
// Timing: CUDA events around a batch of launches on one stream (manual time;
// no host synchronisation inside the batch). Counter TFLOP/s = 2 m n k per
// GEMM over the event time. Without a GPU every benchmark reports an error
// and the program exits 0.
#include <benchmark/benchmark.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <memory>
#include <string>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"

namespace zero {
namespace {

constexpr int kLaunchesPerBatch = 20;

struct Shape {
  const char* name;
  int64_t m, n, k;
};

// GPT-2 124M, 8192 tokens (e.g. micro-batch 8 x seq 1024): y[tokens, out] = x[tokens, in] W^T.
constexpr int64_t kTokens = 8192;
const Shape kGptShapes[] = {{"qkv", kTokens, 2304, 768},
                            {"attn_proj", kTokens, 768, 768},
                            {"fc", kTokens, 3072, 768},
                            {"fc_proj", kTokens, 768, 3072},
                            {"lm_head", kTokens, 50304, 768}};

// One CUDA backend for the whole program (context and cuBLAS set up once),
// made in main() and destroyed there, before the CUDA runtime unloads.
std::unique_ptr<CudaBackend> g_gpu;
CudaBackend* gpu() { return g_gpu.get(); }

// Times `launch` (kLaunchesPerBatch GEMMs per iteration) with events on `stream`.
template <typename Launch>
void time_gemms(benchmark::State& state, cudaStream_t stream, double flops_per_gemm, Launch launch) {
  cudaEvent_t start, stop;
  ZE_CUDA_CHECK(cudaEventCreate(&start));
  ZE_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) launch();  // warm-up: heuristics, lazily loaded kernels
  ZE_CUDA_CHECK(cudaStreamSynchronize(stream));
  double seconds_total = 0;
  for (auto _ : state) {
    ZE_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < kLaunchesPerBatch; ++i) launch();
    ZE_CUDA_CHECK(cudaEventRecord(stop, stream));
    ZE_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    ZE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(ms / 1e3);
    seconds_total += ms / 1e3;
  }
  ZE_CUDA_CHECK(cudaEventDestroy(start));
  ZE_CUDA_CHECK(cudaEventDestroy(stop));
  const double gemms = static_cast<double>(state.iterations()) * kLaunchesPerBatch;
  state.counters["TFLOP/s"] = seconds_total > 0 ? flops_per_gemm * gemms / seconds_total / 1e12 : 0.0;
}

void BM_CublasBf16(benchmark::State& state, Shape s) {
  CudaBackend* b = gpu();
  if (b == nullptr) {
    state.SkipWithError("no CUDA device");
    for (auto _ : state) {
    }
    return;
  }
  // Column-major C[m, n] = A[m, k] B[k, n]; any layout gives the same work.
  Tensor a = b->zeros({s.m, s.k}, DType::kBF16, MemCategory::kWorkspace);
  Tensor bm = b->zeros({s.k, s.n}, DType::kBF16, MemCategory::kWorkspace);
  Tensor c = b->zeros({s.m, s.n}, DType::kBF16, MemCategory::kWorkspace);
  Tensor ws = b->empty({32 << 20}, DType::kI32, MemCategory::kWorkspace);  // 128 MiB cuBLAS workspace
  const cudaStream_t stream = b->cuda_stream(kComputeStream);
  cublasHandle_t handle;
  ZE_CUBLAS_CHECK(cublasCreate(&handle));
  ZE_CUBLAS_CHECK(cublasSetStream(handle, stream));
  ZE_CUBLAS_CHECK(cublasSetWorkspace(handle, ws.data(), ws.nbytes()));
  const float alpha = 1.0f, beta = 0.0f;
  const int m = static_cast<int>(s.m), n = static_cast<int>(s.n), k = static_cast<int>(s.k);
  time_gemms(state, stream, 2.0 * s.m * s.n * s.k, [&] {
    ZE_CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, a.data(), CUDA_R_16BF, m,
                                 bm.data(), CUDA_R_16BF, k, &beta, c.data(), CUDA_R_16BF, m, CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT));
  });
  ZE_CUDA_CHECK(cudaStreamSynchronize(stream));
  ZE_CUBLAS_CHECK(cublasDestroy(handle));
}

void BM_OpsMatmulBf16(benchmark::State& state, Shape s) {
  CudaBackend* b = gpu();
  if (b == nullptr) {
    state.SkipWithError("no CUDA device");
    for (auto _ : state) {
    }
    return;
  }
  Tensor x = b->zeros({s.m, s.k}, DType::kF32, MemCategory::kActivations);
  Tensor w = b->zeros({s.n, s.k}, DType::kBF16, MemCategory::kParameters);
  Tensor y = b->zeros({s.m, s.n}, DType::kF32, MemCategory::kActivations);
  time_gemms(state, b->cuda_stream(kComputeStream), 2.0 * s.m * s.n * s.k,
             [&] { b->ops().matmul(x, w, y, {.trans_b = true, .compute = DType::kBF16}); });
}

void register_all() {
  for (int64_t n : {4096, 8192}) {
    const Shape s{"square", n, n, n};
    benchmark::RegisterBenchmark(("BM_CublasBf16/" + std::to_string(n) + "^3").c_str(), BM_CublasBf16, s)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond)
        ->MinTime(0.5);
  }
  for (const Shape& s : kGptShapes) {
    benchmark::RegisterBenchmark((std::string("BM_CublasBf16/gpt2_") + s.name).c_str(), BM_CublasBf16, s)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond)
        ->MinTime(0.3);
    benchmark::RegisterBenchmark((std::string("BM_OpsMatmulBf16/gpt2_") + s.name).c_str(), BM_OpsMatmulBf16, s)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond)
        ->MinTime(0.3);
  }
}

}  // namespace
}  // namespace zero

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (zero::cuda_device_available()) {
    absl::StatusOr<std::unique_ptr<zero::CudaBackend>> made = zero::CudaBackend::create(0);
    if (made.ok()) zero::g_gpu = *std::move(made);
    else std::fprintf(stderr, "gemm_bench: %s\n", made.status().ToString().c_str());
  } else {
    std::fprintf(stderr, "gemm_bench: no CUDA device visible; every benchmark reports an error\n");
  }
  zero::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  zero::g_gpu.reset();
  return 0;
}
