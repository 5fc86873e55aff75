// The op launch interface: every computation the engine and the built-in
// modules perform, as one abstract class that each backend implements
// (kernels/cpu: oneDNN + our SIMD code; kernels/cuda: cuBLAS + CUDA kernels).
//
// Contract shared by every op:
//  * Operands are contiguous row-major Tensors in the backend's compute tier.
//  * Ops run on the backend's compute stream, in issue order. On the CPU backend
//    they complete before returning; on CUDA they are asynchronous, except the
//    ops that return a host value (sum_squares, count_nonfinite), which wait.
//  * Activations are fp32. Parameters and gradients are fp32, bf16 or fp16 (the
//    model dtype); ops that read a parameter or write a parameter gradient
//    accept any of the three.
//  * Outputs named d<param> (parameter gradients) are ACCUMULATED (+=), so a
//    parameter used twice (tied embeddings) or over several micro-batches sums
//    its gradient in place. All other outputs are overwritten.
//  * Shapes are checked (internal invariant: a mismatch aborts with file:line).
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/dropout_mask.h"
#include "kernels/optimizer_hyper.h"
#include "kernels/rope.h"

namespace zero {

struct MatmulSpec {
  bool trans_a = false;     // use A^T; A is stored [.., K, M]
  bool trans_b = false;     // use B^T; B is stored [.., N, K]
  float alpha = 1.0f;       // C = alpha * op(A) op(B) (+ bias)
  bool accumulate = false;  // C += ... instead of C = ...
  // Precision of the multiply: operands are converted to this dtype first when
  // they are not already in it. fp32 accumulation always. On CPUs without fp16
  // GEMMs an fp16 compute dtype runs as fp32, and bf16 runs as fp32 where
  // that is faster (operands widened, not rounded: kernels/cpu/bf16_gemm_policy.h).
  DType compute = DType::kF32;
};

// The GEMM dimensions of a matmul call, checked (shapes, transposes, batch,
// bias length, alpha only without bias): every backend's matmul starts here.
struct MatmulDims {
  int64_t batch;  // 0 for a 2-D GEMM
  int64_t m, n, k;
};
MatmulDims matmul_dims(const Tensor& a, const Tensor& b, const Tensor& c, const MatmulSpec& spec,
                       const Tensor& bias);

class Ops {
 public:
  virtual ~Ops() = default;

  // C[b] = alpha * op(A[b]) @ op(B[b]) (+ bias) (+ C). 2-D, or 3-D with a shared
  // leading batch dimension on A, B and C. A and B: fp32/bf16/fp16; C: fp32 or
  // the compute dtype; bias: [N] any float dtype, or an undefined Tensor.
  // Counts its 2·M·N·K (per batch entry) in gemm_flops(), then runs the
  // backend's run_matmul.
  void matmul(const Tensor& a, const Tensor& b, const Tensor& c, const MatmulSpec& spec,
              const Tensor& bias = Tensor()) {
    gemm_flops_ += static_cast<uint64_t>(2 * c.numel() * (spec.trans_a ? a.dim(-2) : a.dim(-1)));
    run_matmul(a, b, c, spec, bias);
  }
  // The GEMM floating-point operations issued through matmul() since this
  // Ops was made (multiply and add each count one), modulo 2^64 (a GPU
  // passes 2^63 in hours): take differences, as the FLOPs profiler does when
  // it attributes them to modules. Issued, not completed: on an asynchronous
  // backend, synchronise first.
  uint64_t gemm_flops() const { return gemm_flops_; }

  // Layer norm over the last dimension of x [N, C]:
  //   y = (x - mean) / sqrt(var + eps) * gamma + beta
  // mean and var [N] (fp32, biased variance) are written for the backward pass.
  virtual void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                 float eps, const Tensor& y, const Tensor& mean,
                                 const Tensor& var) = 0;
  // dx is overwritten; dgamma, dbeta accumulate.
  virtual void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                  const Tensor& mean, const Tensor& var, float eps,
                                  const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta) = 0;

  // RMSNorm over the last dimension of x [N, C] (Llama's; T5's layer norm
  // without the mean), in fp32:
  //   rstd[n] = 1 / sqrt(mean_c x[n, c]^2 + eps);  y[n, c] = x[n, c] rstd[n] gamma[c]
  // or with unit_offset (Gemma's) y[n, c] = x[n, c] rstd[n] (1 + gamma[c]),
  // the 1 + gamma in fp32. rstd [N] (fp32) is written for the backward pass.
  // y may not alias x.
  virtual void rmsnorm_forward(const Tensor& x, const Tensor& gamma, float eps, const Tensor& y,
                               const Tensor& rstd, bool unit_offset = false) = 0;
  // dx is overwritten; dgamma accumulates (dgamma[c] += sum_n dy x rstd, with
  // or without the offset).
  virtual void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& rstd,
                                const Tensor& dx, const Tensor& dgamma, bool unit_offset = false) = 0;

  // Rotary position embedding (kernels/rope.h) of x [B, H, T, D] (fp32),
  // row t of every head at position first_position + t: y = R(p) x, or with
  // inverse y = R(p)^T x = R(-p) x, which is also the backward (dx = R^T dy).
  // D must be 2 * freqs.half. y may alias x.
  virtual void rope(const Tensor& x, const Tensor& y, const RopeFreqs& freqs, int64_t first_position,
                    bool inverse) = 0;

  // SwiGLU's gate (Shazeer, "GLU Variants Improve Transformer"), fp32, same
  // shapes: h = silu(gate) * up, silu(g) = g / (1 + exp(-g)).
  virtual void swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& h) = 0;
  // dgate = dh * up * silu'(gate), dup = dh * silu(gate); both overwritten
  // (they may alias gate and up, which are then consumed).
  virtual void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dh, const Tensor& dgate,
                               const Tensor& dup) = 0;
  // GeGLU's gate (the same paper; Gemma's MLP), fp32, same shapes:
  // h = gelu(gate) * up with GELU's tanh form (below).
  virtual void geglu_forward(const Tensor& gate, const Tensor& up, const Tensor& h) = 0;
  // dgate = dh * up * gelu'(gate), dup = dh * gelu(gate); both overwritten
  // (they may alias gate and up, which are then consumed).
  virtual void geglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dh, const Tensor& dgate,
                              const Tensor& dup) = 0;
  // The same two from a fused gate/up projection's output gate_up [N, 2F]
  // (row n: its gate's F features, then its up's) into h [N, F], and back
  // into dgate_up [N, 2F] of that layout (which may alias gate_up, then
  // consumed). The defaults run the ops above on each row's views; a backend
  // may do all rows in one pass.
  enum class Glu { kSwiGlu, kGeGlu };
  virtual void glu_rows_forward(Glu kind, const Tensor& gate_up, const Tensor& h);
  virtual void glu_rows_backward(Glu kind, const Tensor& gate_up, const Tensor& dh, const Tensor& dgate_up);
  // Logit soft-capping (Gemma 2's), fp32, same shapes: y = cap tanh(x / cap)
  // (y may alias x); its backward from y: dx = dy (1 - (y / cap)^2) (dx may
  // alias dy).
  virtual void softcap_forward(const Tensor& x, float cap, const Tensor& y) = 0;
  virtual void softcap_backward(const Tensor& y, const Tensor& dy, float cap, const Tensor& dx) = 0;

  // GELU, GPT-2's tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
  virtual void gelu_forward(const Tensor& x, const Tensor& y) = 0;
  virtual void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) = 0;

  // Row softmax of scores [BH, T, T] where row t only sees columns <= t (the
  // rest of the row is written as 0). probs may alias scores.
  virtual void causal_softmax_forward(const Tensor& scores, const Tensor& probs) = 0;
  // dscores = probs * (dprobs - sum(probs * dprobs)); dscores may alias dprobs.
  virtual void causal_softmax_backward(const Tensor& probs, const Tensor& dprobs,
                                       const Tensor& dscores) = 0;

  // qkv [B, T, (H + 2 G) D] -> q [B, H, T, D], k, v [B, G, T, D]   (the
  // attention glue; G = H for GPT-2, G key/value heads for grouped-query
  // attention's fused projection)
  virtual void split_qkv(const Tensor& qkv, const Tensor& q, const Tensor& k, const Tensor& v) = 0;
  // dq [B, H, T, D], dk, dv [B, G, T, D] -> dqkv [B, T, (H + 2 G) D] (overwritten)
  virtual void merge_qkv(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                         const Tensor& dqkv) = 0;
  // dst[a, c, b, d] = src[a, b, c, d]: [B,H,T,D] <-> [B,T,H,D]
  virtual void transpose12(const Tensor& src, const Tensor& dst) = 0;

  // out[n, :] = table[ids[n], :]; ids int32 [N], table [V, C], out fp32 [N, C].
  virtual void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out) = 0;
  // dtable[ids[n], :] += dout[n, :]
  virtual void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable) = 0;
  // Megatron's vocabulary-parallel embedding, whose table [R, C] on this rank
  // is rows [first, first + R) of the vocabulary: out[n, :] = table[ids[n] -
  // first, :] for the ids in the slice, zeros for the others (another rank of
  // the tensor group has them; the all-reduce of out completes the lookup).
  virtual void embedding_slice_forward(const Tensor& ids, int64_t first, const Tensor& table, const Tensor& out) = 0;
  // dtable[ids[n] - first, :] += dout[n, :] for the ids in the slice.
  virtual void embedding_slice_backward(const Tensor& ids, int64_t first, const Tensor& dout,
                                        const Tensor& dtable) = 0;
  // x[b, t, :] += table[t, :] in place; x [B, T, C], table [>=T, C].
  virtual void add_positional(const Tensor& x, const Tensor& table) = 0;
  // dtable[t, :] += sum_b dy[b, t, :]
  virtual void positional_backward(const Tensor& dy, const Tensor& dtable) = 0;

  // out = a + b (fp32; out may alias a or b).
  virtual void add(const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // dst += src; dst any float dtype, src fp32, same numel.
  virtual void accumulate(const Tensor& dst, const Tensor& src) = 0;
  // dbias[c] += sum_n dy[n, c]; dy [N, C].
  virtual void bias_backward(const Tensor& dy, const Tensor& dbias) = 0;
  // x *= s in place (any float dtype).
  virtual void scale(const Tensor& x, float s) = 0;
  // x = v (any float dtype).
  virtual void fill(const Tensor& x, float v) = 0;
  // dst = convert(src) between any two float dtypes of equal numel (round to
  // nearest even).
  virtual void cast(const Tensor& src, const Tensor& dst) = 0;

  // Dropout of x [B, T, C] (any float dtype; y the same dtype and shape, may
  // alias x): y = keep ? x * dropout_scale(p) : 0, in fp32 then rounded once,
  // where keep is the mask of kernels/dropout_mask.h under `key` (row b is
  // global sample key.first_sample + b). 0 <= p < 1. Nothing is stored: the
  // backward regenerates the mask from the same key.
  virtual void dropout(const Tensor& x, const Tensor& y, float p, const DropoutKey& key) = 0;
  // dx = keep ? dy * dropout_scale(p) : 0 with the mask of the same key.
  // (The same map as dropout, so every backend's dropout serves both.)
  void dropout_backward(const Tensor& dy, const Tensor& dx, float p, const DropoutKey& key) { dropout(dy, dx, p, key); }

  // Fused softmax cross-entropy over the last dimension of logits [N, V]:
  // losses[n] = -log softmax(logits[n])[targets[n]], and logits is overwritten
  // with grad_scale * (softmax(logits[n]) - onehot(targets[n])). A negative
  // target marks an ignored row: loss 0 and gradient 0.
  virtual void cross_entropy(const Tensor& logits, const Tensor& targets, float grad_scale,
                             const Tensor& losses) = 0;

  // Megatron's vocabulary-parallel softmax cross-entropy, in three phases for
  // logits [N, w] that hold vocabulary columns [first, first + w) of each row
  // (the other columns on the other ranks of the tensor group); the caller
  // (graph/vocab_parallel.h) reduces over the group between them, so the full
  // logits are never gathered:
  //   row_max(logits, max [N])                              then max over the group
  //   cross_entropy_slice_exp(logits, targets, first, max, sums [N, 2]):
  //     logits := exp(logits - max); sums[n] = {sum of the row, the target's
  //     logit when it is in this slice, else 0}              then sum over the group
  //   cross_entropy_slice_finish(logits, targets, first, max, sums, grad_scale, losses):
  //     losses[n] = (max - target logit) + log(sum), and the slice of the
  //     gradient grad_scale * (softmax - onehot) in place of logits.
  // A negative target marks an ignored row (loss 0, gradient 0), as cross_entropy.
  virtual void row_max(const Tensor& x, const Tensor& max) = 0;
  virtual void cross_entropy_slice_exp(const Tensor& logits, const Tensor& targets, int64_t first,
                                       const Tensor& max, const Tensor& sums) = 0;
  virtual void cross_entropy_slice_finish(const Tensor& probs, const Tensor& targets, int64_t first,
                                          const Tensor& max, const Tensor& sums, float grad_scale,
                                          const Tensor& losses) = 0;

  // One AdamW/Adam step on fp32 master weights with fp32 moments m, v; grad in
  // any float dtype. When param_out is defined (bf16/fp16/fp32, same numel) the
  // updated master is also written there, fused into the same pass. Where
  // adamw_takes_narrow_master(), also on bf16/fp16 master weights with grad and
  // param_out in their dtype and fp32 or (bf16 master) bf16 moments: the fp32
  // step over the widened values, rounded to nearest even, in one pass.
  virtual void adamw(const Tensor& master, const Tensor& grad, const Tensor& m, const Tensor& v,
                     const Tensor& param_out, const AdamWHyper& hyper) = 0;
  virtual bool adamw_takes_narrow_master() const { return false; }

  // One SGD step (SgdHyper) on fp32 master weights; momentum_buf (fp32) is
  // ignored when hyper.momentum == 0; param_out as for adamw.
  virtual void sgd(const Tensor& master, const Tensor& grad, const Tensor& momentum_buf,
                   const Tensor& param_out, const SgdHyper& hyper) = 0;

  // One Lion step (LionHyper) on fp32 master weights with the fp32 momentum
  // exp_avg; grad in any float dtype; param_out as for adamw.
  virtual void lion(const Tensor& master, const Tensor& grad, const Tensor& exp_avg, const Tensor& param_out,
                    const LionHyper& hyper) = 0;

  // ---- mixture of experts (graph/moe.h). N tokens, E experts, k of them per
  // token; fp32 activations, int32 indices.
  // The router: probs [N, E] = softmax of each row of logits [N, E]; its k
  // largest into indices [N, k] (largest first; ties to the lower expert)
  // and weights [N, k], those probabilities divided by their sum when
  // `renormalize` (Mixtral's; Qwen-MoE's norm_topk_prob); lse [N] each row's
  // logsumexp (the router z-loss's).
  virtual void moe_router_forward(const Tensor& logits, int64_t k, bool renormalize, const Tensor& probs,
                                  const Tensor& indices, const Tensor& weights, const Tensor& lse) = 0;
  // dlogits [N, E] (overwritten) from dweights [N, k], back through the
  // renormalisation and the softmax, plus dprobs_extra [E] (when defined)
  // added to every row's gradient of the probabilities (the load-balancing
  // loss's), plus z_scale * 2 lse p (the z-loss's; z_scale 0: none).
  virtual void moe_router_backward(const Tensor& probs, const Tensor& indices, const Tensor& dweights,
                                   bool renormalize, const Tensor& dprobs_extra, float z_scale, const Tensor& lse,
                                   const Tensor& dlogits) = 0;
  // out [M, C] row i = x [N, C] row rows[i] (int32 [M]), zeros where rows[i] < 0.
  virtual void gather_rows(const Tensor& x, const Tensor& rows, const Tensor& out) = 0;
  // dx [N, C] row rows[i] += dy [M, C] row i, for rows[i] >= 0; the rows >= 0
  // are distinct (no two threads add into one row).
  virtual void scatter_add_rows(const Tensor& dy, const Tensor& rows, const Tensor& dx) = 0;
  // The combine: y [N, C] row rows[i] += weights[slots[i]] * h [M, C] row i
  // (weights [N, k] read flat), for rows[i] >= 0; rows >= 0 distinct.
  virtual void moe_combine(const Tensor& h, const Tensor& rows, const Tensor& slots, const Tensor& weights,
                           const Tensor& y) = 0;
  // Its backward: dh row i = weights[slots[i]] dy row rows[i] (zeros where
  // rows[i] < 0), dweights[slots[i]] = <dy row rows[i], h row i> (set; the
  // other entries of dweights are left as they are).
  virtual void moe_combine_backward(const Tensor& dy, const Tensor& h, const Tensor& rows, const Tensor& slots,
                                    const Tensor& weights, const Tensor& dh, const Tensor& dweights) = 0;
  // A gate per row: y [N, C] = sigmoid(g [N]) * x [N, C] (Qwen2-MoE's shared
  // expert gate); backward dx = sigmoid(g) dy, dg = <dy, x> sigmoid'(g), both
  // overwritten.
  virtual void sigmoid_gate_forward(const Tensor& g, const Tensor& x, const Tensor& y) = 0;
  virtual void sigmoid_gate_backward(const Tensor& g, const Tensor& x, const Tensor& dy, const Tensor& dg,
                                     const Tensor& dx) = 0;

  // Sum of squares of x (any float dtype), accumulated in double. Waits.
  virtual double sum_squares(const Tensor& x) = 0;
  // Number of inf/NaN elements of x (any float dtype). Waits.
  virtual int64_t count_nonfinite(const Tensor& x) = 0;

 protected:
  // The backend's GEMM (matmul's contract).
  virtual void run_matmul(const Tensor& a, const Tensor& b, const Tensor& c, const MatmulSpec& spec,
                          const Tensor& bias) = 0;

 private:
  uint64_t gemm_flops_ = 0;
};

}  // namespace zero
