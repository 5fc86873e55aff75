// CPU Ops: shape checks, then oneDNN or the SIMD kernel table.
#include "kernels/cpu/cpu_ops.h"

#include <omp.h>

#include "kernels/cpu/attention_glue.h"

namespace zero::cpu {

namespace {

void check_f32(const Tensor& t) { ZE_CHECK(t.dtype() == DType::kF32) << t.debug_string(); }
void check_float(const Tensor& t) { ZE_CHECK(dtype_is_float(t.dtype())) << t.debug_string(); }
void check_same_numel(const Tensor& a, const Tensor& b) {
  ZE_CHECK(a.numel() == b.numel()) << a.debug_string() << " vs " << b.debug_string();
}

// dst = keep ? src * scale : 0 over [B, T, C] (dropout and its backward are
// the same map). Threads split the B*T rows; one hash per element, scalar:
// ~3 ns per element per thread (measured: [8, 1024, 768] fp32 in 10 ms on 2
// threads, 7x an add), 1-2% of a GPT-2 124M micro-step on the CPU.
template <typename Load, typename Store>
void dropout_rows(int64_t b, int64_t t, int64_t c, float p, const DropoutKey& key, Load load, Store store) {
  const uint64_t call = dropout_call_key(key.seed, key.layer);
  const uint32_t threshold = dropout_threshold(p);
  const float scale = dropout_scale(p);
  const int64_t rows = b * t;
#pragma omp parallel for schedule(static) if (rows * c >= 16384)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t bi = r / t, ti = r % t;
    const uint64_t row_key = dropout_row_key(call, key.first_sample + bi);
    for (int64_t ci = 0; ci < c; ++ci) {
      const int64_t i = r * c + ci;
      store(i, dropout_bits(row_key, key.first_position + ti, key.first_feature + ci) >= threshold ? load(i) * scale
                                                                                              : 0.0f);
    }
  }
}

void dropout_map(const Tensor& src, const Tensor& dst, float p, const DropoutKey& key) {
  ZE_CHECK(src.ndim() == 3 && src.shape() == dst.shape() && src.dtype() == dst.dtype())
      << src.debug_string() << " -> " << dst.debug_string();
  ZE_CHECK(p >= 0.0f && p < 1.0f) << "dropout p " << p;
  check_float(src);
  const int64_t b = src.dim(0), t = src.dim(1), c = src.dim(2);
  if (src.dtype() == DType::kF32) {
    const float* s = src.f32();
    float* d = dst.f32();
    dropout_rows(b, t, c, p, key, [&](int64_t i) { return s[i]; }, [&](int64_t i, float v) { d[i] = v; });
    return;
  }
  const void* s = src.data();
  void* d = dst.data();
  const DType dtype = src.dtype();
  dropout_rows(
      b, t, c, p, key, [&](int64_t i) { return load_as_float(s, dtype, static_cast<size_t>(i)); },
      [&](int64_t i, float v) { store_from_float(d, dtype, static_cast<size_t>(i), v); });
}

}  // namespace

CpuOps::CpuOps(Backend& backend)
    : simd_(simd_kernels()),
      workspace_(backend),
      matmul_(workspace_),
      layernorm_(workspace_),
      gelu_(workspace_) {}

void CpuOps::run_matmul(const Tensor& a, const Tensor& b, const Tensor& c, const MatmulSpec& spec,
                        const Tensor& bias) {
  matmul_.run(a, b, c, spec, bias);
}

void CpuOps::layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                               const Tensor& y, const Tensor& mean, const Tensor& var) {
  check_f32(x), check_f32(y), check_f32(mean), check_f32(var);
  layernorm_.forward(x, gamma, beta, eps, y, mean, var);
}

void CpuOps::layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                const Tensor& mean, const Tensor& var, float eps, const Tensor& dx,
                                const Tensor& dgamma, const Tensor& dbeta) {
  check_f32(dy), check_f32(x), check_f32(dx);
  layernorm_.backward(dy, x, gamma, mean, var, eps, dx, dgamma, dbeta);
}

void CpuOps::gelu_forward(const Tensor& x, const Tensor& y) { gelu_.forward(x, y); }

void CpuOps::gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  check_f32(dy), check_f32(dx);
  gelu_.backward(x, dy, dx);
}

void CpuOps::rmsnorm_forward(const Tensor& x, const Tensor& gamma, float eps, const Tensor& y, const Tensor& rstd,
                             bool unit_offset) {
  check_f32(x), check_f32(y), check_f32(rstd), check_float(gamma), check_same_numel(x, y);
  const int64_t cols = x.dim(-1), rows = x.numel() / cols;
  ZE_CHECK(gamma.numel() == cols && rstd.numel() == rows) << x.debug_string() << " " << gamma.debug_string()
                                                          << " " << rstd.debug_string();
  simd_.rmsnorm_forward(x.f32(), gamma.data(), gamma.dtype(), unit_offset ? 1.0f : 0.0f, eps, y.f32(), rstd.f32(),
                        rows, cols);
}

void CpuOps::rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& rstd,
                              const Tensor& dx, const Tensor& dgamma, bool unit_offset) {
  check_f32(dy), check_f32(x), check_f32(rstd), check_f32(dx), check_float(gamma), check_float(dgamma);
  check_same_numel(x, dy), check_same_numel(x, dx), check_same_numel(gamma, dgamma);
  const int64_t cols = x.dim(-1), rows = x.numel() / cols;
  ZE_CHECK(gamma.numel() == cols && rstd.numel() == rows) << x.debug_string() << " " << gamma.debug_string();
  simd_.rmsnorm_backward(dy.f32(), x.f32(), gamma.data(), gamma.dtype(), unit_offset ? 1.0f : 0.0f, rstd.f32(),
                         dx.f32(), dgamma.data(),
                         dgamma.dtype(), rows, cols);
}

void CpuOps::rope(const Tensor& x, const Tensor& y, const RopeFreqs& freqs, int64_t first_position,
                  bool inverse) {
  check_f32(x), check_f32(y), check_same_numel(x, y);
  ZE_CHECK(x.ndim() == 4 && x.dim(3) == 2 * int64_t{freqs.half} && freqs.half <= RopeFreqs::kMaxHalf &&
           first_position >= 0)
      << x.debug_string() << " half " << freqs.half << " from position " << first_position;
  simd_.rope(x.f32(), y.f32(), x.dim(0) * x.dim(1), x.dim(2), freqs.half, freqs.inv_freq, first_position, inverse);
}

void CpuOps::swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& h) {
  check_f32(gate), check_f32(up), check_f32(h), check_same_numel(gate, up), check_same_numel(gate, h);
  simd_.swiglu_forward(gate.f32(), up.f32(), h.f32(), gate.numel());
}

void CpuOps::swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dh, const Tensor& dgate,
                             const Tensor& dup) {
  check_f32(gate), check_f32(up), check_f32(dh), check_f32(dgate), check_f32(dup);
  check_same_numel(gate, up), check_same_numel(gate, dh), check_same_numel(gate, dgate), check_same_numel(gate, dup);
  simd_.swiglu_backward(gate.f32(), up.f32(), dh.f32(), dgate.f32(), dup.f32(), gate.numel());
}

void CpuOps::geglu_forward(const Tensor& gate, const Tensor& up, const Tensor& h) {
  check_f32(gate), check_f32(up), check_f32(h), check_same_numel(gate, up), check_same_numel(gate, h);
  simd_.geglu_forward(gate.f32(), up.f32(), h.f32(), gate.numel());
}

void CpuOps::geglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dh, const Tensor& dgate,
                            const Tensor& dup) {
  check_f32(gate), check_f32(up), check_f32(dh), check_f32(dgate), check_f32(dup);
  check_same_numel(gate, up), check_same_numel(gate, dh), check_same_numel(gate, dgate), check_same_numel(gate, dup);
  simd_.geglu_backward(gate.f32(), up.f32(), dh.f32(), dgate.f32(), dup.f32(), gate.numel());
}

// One pass over the rows, each thread a run of them (the kernels' own
// threading stays off inside: a row of F is below its threshold, or nested).
void CpuOps::glu_rows_forward(Glu kind, const Tensor& gate_up, const Tensor& h) {
  check_f32(gate_up), check_f32(h);
  const int64_t f = h.dim(-1), n = h.numel() / f;
  ZE_CHECK(gate_up.numel() == 2 * n * f && gate_up.dim(-1) == 2 * f) << gate_up.debug_string() << " -> " << h.debug_string();
  const auto fn = kind == Glu::kSwiGlu ? simd_.swiglu_forward : simd_.geglu_forward;
  const float* gu = gate_up.f32();
  float* out = h.f32();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n; ++r) fn(gu + 2 * r * f, gu + (2 * r + 1) * f, out + r * f, f);
}

void CpuOps::glu_rows_backward(Glu kind, const Tensor& gate_up, const Tensor& dh, const Tensor& dgate_up) {
  check_f32(gate_up), check_f32(dh), check_f32(dgate_up);
  const int64_t f = dh.dim(-1), n = dh.numel() / f;
  ZE_CHECK(gate_up.numel() == 2 * n * f && dgate_up.numel() == gate_up.numel() && gate_up.dim(-1) == 2 * f)
      << gate_up.debug_string() << " " << dh.debug_string() << " " << dgate_up.debug_string();
  const auto fn = kind == Glu::kSwiGlu ? simd_.swiglu_backward : simd_.geglu_backward;
  const float* gu = gate_up.f32();
  const float* d = dh.f32();
  float* dgu = dgate_up.f32();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n; ++r) {
    fn(gu + 2 * r * f, gu + (2 * r + 1) * f, d + r * f, dgu + 2 * r * f, dgu + (2 * r + 1) * f, f);
  }
}

void CpuOps::softcap_forward(const Tensor& x, float cap, const Tensor& y) {
  check_f32(x), check_f32(y), check_same_numel(x, y);
  ZE_CHECK(cap > 0.0f) << "soft-cap " << cap;
  simd_.softcap_forward(x.f32(), cap, y.f32(), x.numel());
}

void CpuOps::softcap_backward(const Tensor& y, const Tensor& dy, float cap, const Tensor& dx) {
  check_f32(y), check_f32(dy), check_f32(dx), check_same_numel(y, dy), check_same_numel(y, dx);
  ZE_CHECK(cap > 0.0f) << "soft-cap " << cap;
  simd_.softcap_backward(y.f32(), dy.f32(), cap, dx.f32(), y.numel());
}

void CpuOps::causal_softmax_forward(const Tensor& scores, const Tensor& probs) {
  ZE_CHECK(scores.ndim() == 3 && scores.dim(1) == scores.dim(2)) << scores.debug_string();
  check_f32(scores), check_f32(probs), check_same_numel(scores, probs);
  simd_.causal_softmax_forward(scores.f32(), probs.f32(), scores.dim(0), scores.dim(1));
}

void CpuOps::causal_softmax_backward(const Tensor& probs, const Tensor& dprobs,
                                     const Tensor& dscores) {
  ZE_CHECK(probs.ndim() == 3 && probs.dim(1) == probs.dim(2)) << probs.debug_string();
  check_f32(probs), check_f32(dprobs), check_f32(dscores);
  check_same_numel(probs, dprobs), check_same_numel(probs, dscores);
  simd_.causal_softmax_backward(probs.f32(), dprobs.f32(), dscores.f32(), probs.dim(0),
                                probs.dim(1));
}

void CpuOps::split_qkv(const Tensor& qkv, const Tensor& q, const Tensor& k, const Tensor& v) {
  ZE_CHECK(q.ndim() == 4 && k.ndim() == 4 && qkv.ndim() == 3) << q.debug_string() << " " << qkv.debug_string();
  const int64_t b = q.dim(0), h = q.dim(1), g = k.dim(1), t = q.dim(2), d = q.dim(3);
  ZE_CHECK(qkv.dim(0) == b && qkv.dim(1) == t && qkv.dim(2) == (h + 2 * g) * d && k.shape() == Shape({b, g, t, d}))
      << q.debug_string() << " " << k.debug_string() << " " << qkv.debug_string();
  check_same_numel(k, v);
  cpu::split_qkv(qkv.f32(), q.f32(), k.f32(), v.f32(), b, t, h, g, d);
}

void CpuOps::merge_qkv(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dqkv) {
  ZE_CHECK(dq.ndim() == 4 && dk.ndim() == 4 && dqkv.ndim() == 3);
  const int64_t b = dq.dim(0), h = dq.dim(1), g = dk.dim(1), t = dq.dim(2), d = dq.dim(3);
  ZE_CHECK(dqkv.dim(0) == b && dqkv.dim(1) == t && dqkv.dim(2) == (h + 2 * g) * d && dk.shape() == Shape({b, g, t, d}))
      << dq.debug_string() << " " << dk.debug_string() << " " << dqkv.debug_string();
  check_same_numel(dk, dv);
  cpu::merge_qkv(dq.f32(), dk.f32(), dv.f32(), dqkv.f32(), b, t, h, g, d);
}

void CpuOps::transpose12(const Tensor& src, const Tensor& dst) {
  ZE_CHECK(src.ndim() == 4 && dst.ndim() == 4 && dst.dim(0) == src.dim(0) &&
           dst.dim(1) == src.dim(2) && dst.dim(2) == src.dim(1) && dst.dim(3) == src.dim(3))
      << src.debug_string() << " -> " << dst.debug_string();
  cpu::transpose12(src.f32(), dst.f32(), src.dim(0), src.dim(1), src.dim(2), src.dim(3));
}

void CpuOps::embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out) {
  ZE_CHECK(table.ndim() == 2 && out.numel() == ids.numel() * table.dim(1));
  check_float(table), check_f32(out);
  simd_.embedding_forward(ids.i32(), ids.numel(), table.data(), table.dtype(), table.dim(1),
                          out.f32(), 0, -1);
}

void CpuOps::embedding_slice_forward(const Tensor& ids, int64_t first, const Tensor& table, const Tensor& out) {
  ZE_CHECK(table.ndim() == 2 && out.numel() == ids.numel() * table.dim(1) && first >= 0);
  check_float(table), check_f32(out);
  simd_.embedding_forward(ids.i32(), ids.numel(), table.data(), table.dtype(), table.dim(1), out.f32(), first,
                          table.dim(0));
}

void CpuOps::embedding_slice_backward(const Tensor& ids, int64_t first, const Tensor& dout, const Tensor& dtable) {
  ZE_CHECK(dtable.ndim() == 2 && dout.numel() == ids.numel() * dtable.dim(1) && first >= 0);
  check_f32(dout), check_float(dtable);
  simd_.embedding_backward(ids.i32(), ids.numel(), dout.f32(), dtable.dim(1), dtable.data(), dtable.dtype(), first,
                           dtable.dim(0));
}

void CpuOps::embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable) {
  ZE_CHECK(dtable.ndim() == 2 && dout.numel() == ids.numel() * dtable.dim(1));
  check_f32(dout), check_float(dtable);
  simd_.embedding_backward(ids.i32(), ids.numel(), dout.f32(), dtable.dim(1), dtable.data(),
                           dtable.dtype(), 0, -1);
}

void CpuOps::add_positional(const Tensor& x, const Tensor& table) {
  ZE_CHECK(x.ndim() == 3 && table.ndim() == 2 && table.dim(1) == x.dim(2) &&
           table.dim(0) >= x.dim(1));
  check_f32(x);
  simd_.add_positional(x.f32(), x.dim(0), x.dim(1), x.dim(2), table.data(), table.dtype());
}

void CpuOps::positional_backward(const Tensor& dy, const Tensor& dtable) {
  ZE_CHECK(dy.ndim() == 3 && dtable.ndim() == 2 && dtable.dim(1) == dy.dim(2) &&
           dtable.dim(0) >= dy.dim(1));
  check_f32(dy);
  simd_.positional_backward(dy.f32(), dy.dim(0), dy.dim(1), dy.dim(2), dtable.data(),
                            dtable.dtype());
}

void CpuOps::add(const Tensor& a, const Tensor& b, const Tensor& out) {
  check_f32(a), check_f32(b), check_f32(out);
  check_same_numel(a, b), check_same_numel(a, out);
  simd_.add(a.f32(), b.f32(), out.f32(), a.numel());
}

void CpuOps::accumulate(const Tensor& dst, const Tensor& src) {
  check_float(dst), check_f32(src), check_same_numel(dst, src);
  simd_.accumulate(dst.data(), dst.dtype(), src.f32(), src.numel());
}

void CpuOps::bias_backward(const Tensor& dy, const Tensor& dbias) {
  check_f32(dy), check_float(dbias);
  const int64_t cols = dbias.numel();
  ZE_CHECK(dy.dim(-1) == cols);
  simd_.bias_backward(dy.f32(), dy.numel() / cols, cols, dbias.data(), dbias.dtype());
}

void CpuOps::scale(const Tensor& x, float s) {
  check_float(x);
  simd_.scale(x.data(), x.dtype(), s, x.numel());
}

void CpuOps::fill(const Tensor& x, float v) {
  check_float(x);
  simd_.fill(x.data(), x.dtype(), v, x.numel());
}

void CpuOps::cast(const Tensor& src, const Tensor& dst) {
  check_float(src), check_float(dst), check_same_numel(src, dst);
  simd_.cast(src.data(), src.dtype(), dst.data(), dst.dtype(), src.numel());
}

void CpuOps::dropout(const Tensor& x, const Tensor& y, float p, const DropoutKey& key) {
  dropout_map(x, y, p, key);
}


void CpuOps::cross_entropy(const Tensor& logits, const Tensor& targets, float grad_scale,
                           const Tensor& losses) {
  check_f32(logits), check_f32(losses);
  const int64_t vocab = logits.dim(-1), n = logits.numel() / vocab;
  ZE_CHECK(targets.numel() == n && losses.numel() == n);
  const int32_t* t = targets.i32();
  for (int64_t i = 0; i < n; ++i) ZE_CHECK(t[i] < vocab) << "target " << t[i] << " >= vocab " << vocab;
  simd_.cross_entropy(logits.f32(), t, n, vocab, grad_scale, losses.f32());
}

void CpuOps::row_max(const Tensor& x, const Tensor& max) {
  check_f32(x), check_f32(max);
  const int64_t cols = x.dim(-1), n = cols == 0 ? 0 : x.numel() / cols;
  ZE_CHECK(max.numel() == n) << x.debug_string() << " " << max.debug_string();
  simd_.row_max(x.f32(), n, cols, max.f32());
}

namespace {
// The rows of a vocabulary slice and checks of the phases' operands.
int64_t slice_rows(const Tensor& logits, const Tensor& targets, const Tensor& max, const Tensor& sums) {
  const int64_t cols = logits.dim(-1), n = cols == 0 ? 0 : logits.numel() / cols;
  ZE_CHECK(targets.dtype() == DType::kI32 && targets.numel() == n && max.numel() == n && sums.numel() == 2 * n)
      << logits.debug_string() << " " << targets.debug_string() << " " << max.debug_string() << " "
      << sums.debug_string();
  return n;
}
}  // namespace

void CpuOps::cross_entropy_slice_exp(const Tensor& logits, const Tensor& targets, int64_t first, const Tensor& max,
                                     const Tensor& sums) {
  check_f32(logits), check_f32(max), check_f32(sums);
  const int64_t n = slice_rows(logits, targets, max, sums);
  simd_.cross_entropy_slice_exp(logits.f32(), targets.i32(), n, logits.dim(-1), first, max.f32(), sums.f32());
}

void CpuOps::cross_entropy_slice_finish(const Tensor& probs, const Tensor& targets, int64_t first, const Tensor& max,
                                        const Tensor& sums, float grad_scale, const Tensor& losses) {
  check_f32(probs), check_f32(max), check_f32(sums), check_f32(losses);
  const int64_t n = slice_rows(probs, targets, max, sums);
  ZE_CHECK(losses.numel() == n) << losses.debug_string();
  simd_.cross_entropy_slice_finish(probs.f32(), targets.i32(), n, probs.dim(-1), first, max.f32(), sums.f32(),
                                   grad_scale, losses.f32());
}

void CpuOps::adamw(const Tensor& master, const Tensor& grad, const Tensor& m, const Tensor& v,
                   const Tensor& param_out, const AdamWHyper& hyper) {
  check_same_numel(master, grad), check_same_numel(master, m), check_same_numel(master, v);
  if (param_out.defined()) check_same_numel(master, param_out);
  if (master.dtype() != DType::kF32) {  // 16-bit master: see Ops::adamw_takes_narrow_master
    ZE_CHECK(m.dtype() == v.dtype() && (m.dtype() == DType::kF32 || master.dtype() == DType::kBF16))
        << master.debug_string() << " " << m.debug_string() << " " << v.debug_string();
    ZE_CHECK(grad.dtype() == master.dtype()) << grad.debug_string();
    if (param_out.defined()) ZE_CHECK(param_out.dtype() == master.dtype()) << param_out.debug_string();
    simd_.adamw_narrow(master.data(), master.dtype(), m.data(), v.data(), m.dtype(), grad.data(),
                       param_out.defined() ? param_out.data() : nullptr, master.numel(), hyper);
    return;
  }
  check_f32(m), check_f32(v), check_float(grad);
  if (param_out.defined()) check_float(param_out);
  simd_.adamw(master.f32(), grad.data(), grad.dtype(), m.f32(), v.f32(),
              param_out.defined() ? param_out.data() : nullptr, param_out.dtype(), master.numel(),
              hyper);
}

void CpuOps::sgd(const Tensor& master, const Tensor& grad, const Tensor& momentum_buf,
                 const Tensor& param_out, const SgdHyper& hyper) {
  check_f32(master), check_float(grad), check_same_numel(master, grad);
  if (hyper.momentum != 0.0f) check_f32(momentum_buf), check_same_numel(master, momentum_buf);
  if (param_out.defined()) check_float(param_out), check_same_numel(master, param_out);
  simd_.sgd(master.f32(), grad.data(), grad.dtype(),
            hyper.momentum != 0.0f ? momentum_buf.f32() : nullptr,
            param_out.defined() ? param_out.data() : nullptr, param_out.dtype(), master.numel(),
            hyper);
}

void CpuOps::lion(const Tensor& master, const Tensor& grad, const Tensor& exp_avg, const Tensor& param_out,
                  const LionHyper& hyper) {
  check_f32(master), check_f32(exp_avg), check_float(grad);
  check_same_numel(master, grad), check_same_numel(master, exp_avg);
  if (param_out.defined()) check_float(param_out), check_same_numel(master, param_out);
  simd_.lion(master.f32(), grad.data(), grad.dtype(), exp_avg.f32(),
             param_out.defined() ? param_out.data() : nullptr, param_out.dtype(), master.numel(), hyper);
}

double CpuOps::sum_squares(const Tensor& x) {
  check_float(x);
  return simd_.sum_squares(x.data(), x.dtype(), x.numel());
}

int64_t CpuOps::count_nonfinite(const Tensor& x) {
  check_float(x);
  return simd_.count_nonfinite(x.data(), x.dtype(), x.numel());
}

}  // namespace zero::cpu
