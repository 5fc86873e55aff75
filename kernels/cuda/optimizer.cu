// Adam/AdamW, SGD and Lion steps over flat fp32 master weights, fused with the
// write of the 16-bit (or fp32) parameter copy: one pass reads p, g and the
// states and writes p, the states and the copy.
//
// The arithmetic is kernels/cpu/adamw_impl.h's (lion_impl.h's for Lion),
// operation for operation, with the same fused multiply-adds and the
// host-side constants computed the same way (in double, then rounded to
// float). Every step is spelled with an explicit rounding intrinsic
// (__fmul_rn, __fdiv_rn, __fsqrt_rn, fmaf), so the compiler cannot contract or
// approximate differently from the CPU and the two backends produce the same
// bits for the same inputs.
#include <cmath>
#include <type_traits>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_math.cuh"

namespace zero::cuda {

namespace {

struct AdamWConsts {
  float beta1, beta2, one_minus_beta1, one_minus_beta2;
  float eps, weight_decay, grad_scale;
  float bc2_rsqrt;  // 1 / sqrt(1 - beta2^t), or 1
  float step_size;  // -lr / (1 - beta1^t)
  float decay;      // -lr * weight_decay
  bool l2;          // Adam: weight decay added to the gradient
  bool decoupled;   // AdamW: decay applied to p before the update
};

struct SgdConsts {
  float lr, momentum, one_minus_dampening, weight_decay, grad_scale;
  bool use_momentum, nesterov, first_step;
};

struct LionConsts {
  float beta1, one_minus_beta1, beta2, one_minus_beta2, grad_scale;
  float decay;  // -lr * weight_decay
  float step;   // -lr
  bool decoupled;
};

// torch.sign: 1, -1, 0 for +-0, and a NaN as itself (the CPU's Scalar::sign).
__device__ __forceinline__ float sign_of(float x) {
  return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : x != x ? x : 0.0f;
}

template <DType G, DType P, bool kWriteParam>
__global__ void adamw_kernel(float* __restrict__ master, const void* __restrict__ grad,
                             float* __restrict__ m, float* __restrict__ v,
                             void* __restrict__ param_out, int64_t n, AdamWConsts k) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    float p = master[i];
    float g = __fmul_rn(load_elem<G>(grad, i), k.grad_scale);
    if (k.l2) g = fmaf(p, k.weight_decay, g);
    const float mi = fmaf(g, k.one_minus_beta1, __fmul_rn(m[i], k.beta1));
    const float vi = fmaf(__fmul_rn(g, g), k.one_minus_beta2, __fmul_rn(v[i], k.beta2));
    const float denom = fmaf(__fsqrt_rn(vi), k.bc2_rsqrt, k.eps);
    if (k.decoupled) p = fmaf(p, k.decay, p);
    p = fmaf(__fdiv_rn(mi, denom), k.step_size, p);
    master[i] = p;
    m[i] = mi;
    v[i] = vi;
    if constexpr (kWriteParam) store_elem<P>(param_out, i, p);
  }
}

template <DType G, DType P, bool kWriteParam>
__global__ void sgd_kernel(float* __restrict__ master, const void* __restrict__ grad,
                           float* __restrict__ buf, void* __restrict__ param_out, int64_t n,
                           SgdConsts k) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    float p = master[i];
    float d = __fmul_rn(load_elem<G>(grad, i), k.grad_scale);
    if (k.weight_decay != 0.0f) d = fmaf(p, k.weight_decay, d);
    if (k.use_momentum) {
      const float b =
          k.first_step ? d : fmaf(d, k.one_minus_dampening, __fmul_rn(buf[i], k.momentum));
      buf[i] = b;
      d = k.nesterov ? fmaf(b, k.momentum, d) : b;
    }
    p = fmaf(d, -k.lr, p);
    master[i] = p;
    if constexpr (kWriteParam) store_elem<P>(param_out, i, p);
  }
}

// One Lion step per element (grid-stride), lion_impl.h's operations in order.
template <DType G, DType P, bool kWriteParam>
__global__ void lion_kernel(float* __restrict__ master, const void* __restrict__ grad,
                            float* __restrict__ exp_avg, void* __restrict__ param_out, int64_t n,
                            LionConsts k) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    float p = master[i];
    const float g = __fmul_rn(load_elem<G>(grad, i), k.grad_scale);
    const float m = exp_avg[i];
    const float c = fmaf(g, k.one_minus_beta1, __fmul_rn(m, k.beta1));
    if (k.decoupled) p = fmaf(p, k.decay, p);
    p = fmaf(sign_of(c), k.step, p);
    master[i] = p;
    exp_avg[i] = fmaf(g, k.one_minus_beta2, __fmul_rn(m, k.beta2));
    if constexpr (kWriteParam) store_elem<P>(param_out, i, p);
  }
}

// Calls fn(grad tag, param tag, write-param flag) for the runtime dtypes.
template <class Fn>
void with_optimizer_dtypes(DType grad_dtype, const void* param_out, DType param_dtype, Fn&& fn) {
  with_float_dtype(grad_dtype, [&](auto gtag) {
    if (param_out == nullptr) {
      fn(gtag, DTypeTag<DType::kF32>{}, std::false_type{});
    } else {
      with_float_dtype(param_dtype, [&](auto ptag) { fn(gtag, ptag, std::true_type{}); });
    }
  });
}

}  // namespace

void launch_adamw(float* master, const void* grad, DType grad_dtype, float* m, float* v,
                  void* param_out, DType param_dtype, int64_t n, const AdamWHyper& h,
                  cudaStream_t stream) {
  if (n == 0) return;
  // Host-side constants exactly as adamw_impl.h computes them.
  const double t = static_cast<double>(h.step);
  const float bc1 = h.bias_correction ? static_cast<float>(1.0 - std::pow(h.beta1, t)) : 1.0f;
  AdamWConsts k;
  k.beta1 = h.beta1;
  k.beta2 = h.beta2;
  k.one_minus_beta1 = 1.0f - h.beta1;
  k.one_minus_beta2 = 1.0f - h.beta2;
  k.eps = h.eps;
  k.weight_decay = h.weight_decay;
  k.grad_scale = h.grad_scale;
  k.bc2_rsqrt =
      h.bias_correction ? static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(h.beta2, t))) : 1.0f;
  k.step_size = -h.lr / bc1;
  k.decay = -h.lr * h.weight_decay;
  k.l2 = !h.adamw_mode && h.weight_decay > 0.0f;
  k.decoupled = h.adamw_mode && h.weight_decay > 0.0f;
  with_optimizer_dtypes(grad_dtype, param_out, param_dtype, [&](auto gtag, auto ptag, auto write) {
    adamw_kernel<decltype(gtag)::value, decltype(ptag)::value, decltype(write)::value>
        <<<grid_blocks(n), kBlockThreads, 0, stream>>>(master, grad, m, v, param_out, n, k);
  });
  ZE_CUDA_CHECK_LAUNCH();
}

void launch_sgd(float* master, const void* grad, DType grad_dtype, float* momentum_buf,
                void* param_out, DType param_dtype, int64_t n, const SgdHyper& h,
                cudaStream_t stream) {
  if (n == 0) return;
  SgdConsts k;
  k.lr = h.lr;
  k.momentum = h.momentum;
  k.one_minus_dampening = 1.0f - h.dampening;
  k.weight_decay = h.weight_decay;
  k.grad_scale = h.grad_scale;
  k.use_momentum = h.momentum != 0.0f;
  k.nesterov = h.nesterov;
  k.first_step = h.first_step;
  ZE_CHECK(!k.use_momentum || momentum_buf != nullptr) << "sgd with momentum needs its buffer";
  with_optimizer_dtypes(grad_dtype, param_out, param_dtype, [&](auto gtag, auto ptag, auto write) {
    sgd_kernel<decltype(gtag)::value, decltype(ptag)::value, decltype(write)::value>
        <<<grid_blocks(n), kBlockThreads, 0, stream>>>(master, grad, momentum_buf, param_out, n, k);
  });
  ZE_CUDA_CHECK_LAUNCH();
}

void launch_lion(float* master, const void* grad, DType grad_dtype, float* exp_avg, void* param_out,
                 DType param_dtype, int64_t n, const LionHyper& h, cudaStream_t stream) {
  if (n == 0) return;
  // Host-side constants exactly as lion_impl.h computes them.
  LionConsts k;
  k.beta1 = h.beta1;
  k.one_minus_beta1 = 1.0f - h.beta1;
  k.beta2 = h.beta2;
  k.one_minus_beta2 = 1.0f - h.beta2;
  k.grad_scale = h.grad_scale;
  k.decay = -h.lr * h.weight_decay;
  k.step = -h.lr;
  k.decoupled = h.weight_decay != 0.0f;
  with_optimizer_dtypes(grad_dtype, param_out, param_dtype, [&](auto gtag, auto ptag, auto write) {
    lion_kernel<decltype(gtag)::value, decltype(ptag)::value, decltype(write)::value>
        <<<grid_blocks(n), kBlockThreads, 0, stream>>>(master, grad, exp_avg, param_out, n, k);
  });
  ZE_CUDA_CHECK_LAUNCH();
}

}  // namespace zero::cuda
