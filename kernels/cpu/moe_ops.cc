// The mixture-of-experts ops of the CPU backend (kernels/ops.h): the router's
// softmax and top-k (kernels/moe_router.h's rows), the row gather and scatter of the dispatch, the weighted
// combine, and the shared expert's sigmoid gate. Rows run in parallel; a row
// is one thread's, so no two threads write one element.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/moe_router.h"

namespace zero::cpu {
namespace {

void check_f32(const Tensor& t) { ZE_CHECK(t.dtype() == DType::kF32) << t.debug_string(); }

void check_rows(const Tensor& rows, int64_t m) {
  ZE_CHECK(rows.dtype() == DType::kI32 && rows.numel() == m) << rows.debug_string() << " for " << m << " rows";
}

}  // namespace

void CpuOps::moe_router_forward(const Tensor& logits, int64_t k, bool renormalize, const Tensor& probs,
                                const Tensor& indices, const Tensor& weights, const Tensor& lse) {
  ZE_CHECK(logits.dtype() == DType::kF32 && logits.ndim() == 2) << logits.debug_string();
  const int64_t n = logits.dim(0), e = logits.dim(1);
  ZE_CHECK(k >= 1 && k <= e && probs.numel() == n * e && indices.numel() == n * k && weights.numel() == n * k &&
           lse.numel() == n && indices.dtype() == DType::kI32)
      << "moe_router_forward k " << k << " of " << logits.debug_string();
  const float* l = logits.f32();
  float* p = probs.f32();
  int32_t* idx = indices.i32();
  float* w = weights.f32();
  float* z = lse.f32();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n; ++r) {
    moe_router_row_forward(l + r * e, e, k, renormalize, p + r * e, idx + r * k, w + r * k, z + r);
  }
}

void CpuOps::moe_router_backward(const Tensor& probs, const Tensor& indices, const Tensor& dweights,
                                 bool renormalize, const Tensor& dprobs_extra, float z_scale, const Tensor& lse,
                                 const Tensor& dlogits) {
  const int64_t n = probs.dim(0), e = probs.dim(1), k = indices.numel() / std::max<int64_t>(n, 1);
  ZE_CHECK(dweights.numel() == n * k && dlogits.numel() == n * e && lse.numel() == n &&
           (!dprobs_extra.defined() || dprobs_extra.numel() == e))
      << "moe_router_backward " << probs.debug_string() << " " << dweights.debug_string();
  const float* p = probs.f32();
  const int32_t* idx = indices.i32();
  const float* dw = dweights.f32();
  const float* extra = dprobs_extra.defined() ? dprobs_extra.f32() : nullptr;
  const float* z = lse.f32();
  float* dl = dlogits.f32();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n; ++r) {
    moe_router_row_backward(p + r * e, idx + r * k, dw + r * k, e, k, renormalize, extra, z_scale, z[r], dl + r * e);
  }
}

void CpuOps::gather_rows(const Tensor& x, const Tensor& rows, const Tensor& out) {
  check_f32(x), check_f32(out);
  const int64_t c = x.dim(-1), m = out.numel() / std::max<int64_t>(c, 1), n = x.numel() / std::max<int64_t>(c, 1);
  check_rows(rows, m);
  const float* src = x.f32();
  const int32_t* ri = rows.i32();
  float* dst = out.f32();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < m; ++i) {
    ZE_CHECK(ri[i] < n) << "gather_rows: row " << ri[i] << " of " << n;
    if (ri[i] < 0) {
      std::memset(dst + i * c, 0, c * sizeof(float));
    } else {
      std::memcpy(dst + i * c, src + ri[i] * c, c * sizeof(float));
    }
  }
}

void CpuOps::scatter_add_rows(const Tensor& dy, const Tensor& rows, const Tensor& dx) {
  check_f32(dy), check_f32(dx);
  const int64_t c = dx.dim(-1), m = dy.numel() / std::max<int64_t>(c, 1);
  check_rows(rows, m);
  const float* src = dy.f32();
  const int32_t* ri = rows.i32();
  float* dst = dx.f32();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < m; ++i) {
    if (ri[i] < 0) continue;
    float* d = dst + ri[i] * c;
    const float* s = src + i * c;
    for (int64_t j = 0; j < c; ++j) d[j] += s[j];
  }
}

void CpuOps::moe_combine(const Tensor& h, const Tensor& rows, const Tensor& slots, const Tensor& weights,
                         const Tensor& y) {
  check_f32(h), check_f32(y), check_f32(weights);
  const int64_t c = y.dim(-1), m = h.numel() / std::max<int64_t>(c, 1);
  check_rows(rows, m), check_rows(slots, m);
  const float* hs = h.f32();
  const int32_t* ri = rows.i32();
  const int32_t* si = slots.i32();
  const float* w = weights.f32();
  float* out = y.f32();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < m; ++i) {
    if (ri[i] < 0) continue;
    const float wi = w[si[i]];
    float* d = out + ri[i] * c;
    const float* s = hs + i * c;
    for (int64_t j = 0; j < c; ++j) d[j] += wi * s[j];
  }
}

void CpuOps::moe_combine_backward(const Tensor& dy, const Tensor& h, const Tensor& rows, const Tensor& slots,
                                  const Tensor& weights, const Tensor& dh, const Tensor& dweights) {
  check_f32(dy), check_f32(h), check_f32(dh), check_f32(dweights);
  const int64_t c = dy.dim(-1), m = h.numel() / std::max<int64_t>(c, 1);
  check_rows(rows, m), check_rows(slots, m);
  const float* g = dy.f32();
  const float* hs = h.f32();
  const int32_t* ri = rows.i32();
  const int32_t* si = slots.i32();
  const float* w = weights.f32();
  float* dhs = dh.f32();
  float* dw = dweights.f32();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < m; ++i) {
    float* d = dhs + i * c;
    if (ri[i] < 0) {
      std::memset(d, 0, c * sizeof(float));
      continue;
    }
    const float* gr = g + ri[i] * c;
    const float* s = hs + i * c;
    const float wi = w[si[i]];
    double dot = 0;
    for (int64_t j = 0; j < c; ++j) {
      dot += static_cast<double>(gr[j]) * s[j];
      d[j] = wi * gr[j];
    }
    dw[si[i]] = static_cast<float>(dot);
  }
}

void CpuOps::sigmoid_gate_forward(const Tensor& g, const Tensor& x, const Tensor& y) {
  check_f32(g), check_f32(x), check_f32(y);
  const int64_t n = g.numel(), c = x.numel() / std::max<int64_t>(n, 1);
  ZE_CHECK(x.numel() == n * c && y.numel() == x.numel()) << g.debug_string() << " " << x.debug_string();
  const float* gs = g.f32();
  const float* xs = x.f32();
  float* ys = y.f32();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n; ++r) {
    const float s = 1.0f / (1.0f + std::exp(-gs[r]));
    for (int64_t j = 0; j < c; ++j) ys[r * c + j] = s * xs[r * c + j];
  }
}

void CpuOps::sigmoid_gate_backward(const Tensor& g, const Tensor& x, const Tensor& dy, const Tensor& dg,
                                   const Tensor& dx) {
  check_f32(g), check_f32(x), check_f32(dy), check_f32(dg), check_f32(dx);
  const int64_t n = g.numel(), c = x.numel() / std::max<int64_t>(n, 1);
  ZE_CHECK(dy.numel() == n * c && dx.numel() == n * c && dg.numel() == n)
      << g.debug_string() << " " << x.debug_string();
  const float* gs = g.f32();
  const float* xs = x.f32();
  const float* d = dy.f32();
  float* dgs = dg.f32();
  float* dxs = dx.f32();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n; ++r) {
    const float s = 1.0f / (1.0f + std::exp(-gs[r]));
    double dot = 0;
    for (int64_t j = 0; j < c; ++j) {
      dot += static_cast<double>(d[r * c + j]) * xs[r * c + j];
      dxs[r * c + j] = s * d[r * c + j];
    }
    dgs[r] = static_cast<float>(dot) * s * (1.0f - s);
  }
}

}  // namespace zero::cpu
