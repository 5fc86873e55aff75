// Shape rules shared by every backend's ops; see ops.h.
#include "kernels/ops.h"

namespace zero {

MatmulDims matmul_dims(const Tensor& a, const Tensor& b, const Tensor& c, const MatmulSpec& spec,
                       const Tensor& bias) {
  ZE_CHECK(a.ndim() == b.ndim() && a.ndim() == c.ndim() && (a.ndim() == 2 || a.ndim() == 3))
      << a.debug_string() << " " << b.debug_string() << " " << c.debug_string();
  ZE_CHECK(dtype_is_float(a.dtype()) && dtype_is_float(b.dtype()) && dtype_is_float(c.dtype()) &&
           dtype_is_float(spec.compute))
      << a.debug_string() << " " << b.debug_string() << " " << c.debug_string();
  MatmulDims d;
  d.batch = a.ndim() == 3 ? a.dim(0) : 0;
  if (d.batch > 0) ZE_CHECK(b.dim(0) == d.batch && c.dim(0) == d.batch);
  d.m = spec.trans_a ? a.dim(-1) : a.dim(-2);
  d.k = spec.trans_a ? a.dim(-2) : a.dim(-1);
  const int64_t kb = spec.trans_b ? b.dim(-1) : b.dim(-2);
  d.n = spec.trans_b ? b.dim(-2) : b.dim(-1);
  ZE_CHECK(d.k == kb && c.dim(-2) == d.m && c.dim(-1) == d.n)
      << "matmul shapes " << a.debug_string() << (spec.trans_a ? "^T" : "") << " x " << b.debug_string()
      << (spec.trans_b ? "^T" : "") << " -> " << c.debug_string();
  ZE_CHECK(!bias.defined() || (bias.numel() == d.n && dtype_is_float(bias.dtype()) && spec.alpha == 1.0f))
      << "bias " << bias.debug_string() << " for N = " << d.n << ", alpha " << spec.alpha;
  return d;
}

void Ops::glu_rows_forward(Glu kind, const Tensor& gate_up, const Tensor& h) {
  const int64_t f = h.dim(-1), n = h.numel() / f;
  ZE_CHECK(gate_up.numel() == 2 * n * f && gate_up.dim(-1) == 2 * f) << gate_up.debug_string() << " -> " << h.debug_string();
  for (int64_t r = 0; r < n; ++r) {
    const Tensor gate = gate_up.slice(2 * r * f, {f}), up = gate_up.slice((2 * r + 1) * f, {f}), hr = h.slice(r * f, {f});
    if (kind == Glu::kSwiGlu) swiglu_forward(gate, up, hr);
    else geglu_forward(gate, up, hr);
  }
}

void Ops::glu_rows_backward(Glu kind, const Tensor& gate_up, const Tensor& dh, const Tensor& dgate_up) {
  const int64_t f = dh.dim(-1), n = dh.numel() / f;
  ZE_CHECK(gate_up.numel() == 2 * n * f && dgate_up.numel() == gate_up.numel() && gate_up.dim(-1) == 2 * f)
      << gate_up.debug_string() << " " << dh.debug_string() << " " << dgate_up.debug_string();
  for (int64_t r = 0; r < n; ++r) {
    const Tensor gate = gate_up.slice(2 * r * f, {f}), up = gate_up.slice((2 * r + 1) * f, {f});
    const Tensor dgate = dgate_up.slice(2 * r * f, {f}), dup = dgate_up.slice((2 * r + 1) * f, {f});
    if (kind == Glu::kSwiGlu) swiglu_backward(gate, up, dh.slice(r * f, {f}), dgate, dup);
    else geglu_backward(gate, up, dh.slice(r * f, {f}), dgate, dup);
  }
}

}  // namespace zero
