// One row of the mixture-of-experts router (kernels/ops.h moe_router_forward
// and moe_router_backward), written once for both backends: the CPU kernel
// runs it per row on a thread, the CUDA kernel per row on a device thread
// (both include this header), so the two compute the same arithmetic.
//
// Forward, logits l [E] -> probabilities p = softmax(l), the k largest
// (largest first; ties to the lower expert) into idx [k] and their weights w
// [k] (divided by their sum when renormalising), lse = logsumexp(l).
// Backward, from dw [k]: dp_s = dw_s (or, renormalised, (dw_s - sum_t dw_t
// w_t) / Z with Z the sum of the chosen p), plus extra [E] on every expert
// (the load-balancing loss's), then dl = p (dp - <p, dp>) + 2 z_scale lse p
// (the z-loss's).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define ZE_MOE_HD __host__ __device__ __forceinline__
#else
#define ZE_MOE_HD inline
#endif

namespace zero {

ZE_MOE_HD void moe_router_row_forward(const float* l, int64_t e, int64_t k, bool renormalize, float* p,
                                      int32_t* idx, float* w, float* lse) {
  float mx = l[0];
  for (int64_t j = 1; j < e; ++j) mx = l[j] > mx ? l[j] : mx;
  double sum = 0;
  for (int64_t j = 0; j < e; ++j) {
    p[j] = expf(l[j] - mx);
    sum += p[j];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t j = 0; j < e; ++j) p[j] *= inv;
  *lse = mx + static_cast<float>(log(sum));
  // Top-k by selection: k passes, each the largest not yet taken (k is small).
  float picked = 0;
  for (int64_t s = 0; s < k; ++s) {
    int32_t best = -1;
    for (int64_t j = 0; j < e; ++j) {
      bool taken = false;
      for (int64_t t = 0; t < s; ++t) taken = taken || idx[t] == j;
      if (!taken && (best < 0 || p[j] > p[best])) best = static_cast<int32_t>(j);
    }
    idx[s] = best;
    w[s] = p[best];
    picked += p[best];
  }
  if (renormalize) {
    for (int64_t s = 0; s < k; ++s) w[s] /= picked;
  }
}

// extra: nullptr or [e].
ZE_MOE_HD void moe_router_row_backward(const float* p, const int32_t* idx, const float* dw, int64_t e, int64_t k,
                                       bool renormalize, const float* extra, float z_scale, float lse, float* dl) {
  for (int64_t j = 0; j < e; ++j) dl[j] = extra != nullptr ? extra[j] : 0.0f;
  if (renormalize) {
    float zsum = 0, dot = 0;
    for (int64_t s = 0; s < k; ++s) zsum += p[idx[s]];
    for (int64_t s = 0; s < k; ++s) dot += dw[s] * p[idx[s]] / zsum;
    for (int64_t s = 0; s < k; ++s) dl[idx[s]] += (dw[s] - dot) / zsum;
  } else {
    for (int64_t s = 0; s < k; ++s) dl[idx[s]] += dw[s];
  }
  float pdp = 0;
  for (int64_t j = 0; j < e; ++j) pdp += p[j] * dl[j];
  const float zterm = 2.0f * z_scale * lse;
  for (int64_t j = 0; j < e; ++j) dl[j] = p[j] * (dl[j] - pdp + zterm);
}

}  // namespace zero
