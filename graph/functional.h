// The ops a module's forward calls to get its backward for free: each runs
// the backend's kernel and records itself on the module call's tape
// (graph/tape.h) with its backward rule, keeping only what that rule needs
// (each op says what). With grad disabled, or
// inside a checkpointed forward, they only compute. Activations are fp32;
// parameter gradients accumulate (+=). A module whose forward is built from
// these and from child modules (ctx.forward) needs no backward of its own:
//
//   Tensor Block::forward(Context& ctx, const Tensor& x) {
//     Tensor h = fn::gelu(ctx, fn::linear(ctx, fn::layer_norm(ctx, x, *ln_w_, *ln_b_, 1e-5f), *w1_, b1_));
//     return fn::add(ctx, x, fn::linear(ctx, h, *w2_, b2_));
//   }
//
// Inputs that are not values of the call (a parameter's data, a tensor made
// elsewhere) get no gradient.
#pragma once

#include <array>
#include <cstdint>

#include "graph/context.h"
#include "kernels/rope.h"

namespace zero::fn {

// x [..., in] -> [..., out] = x W^T + b, W [out, in] (bias may be null).
// Saves x. GEMMs run in the context's parameter dtype.
Tensor linear(Context& ctx, const Tensor& x, Parameter& weight, Parameter* bias = nullptr);
// a + b, same shapes. Saves nothing.
Tensor add(Context& ctx, const Tensor& a, const Tensor& b);
// Rows of the table weight [V, C] for int32 ids [...] -> [..., C]. The ids
// get no gradient; the rule scatters dy into weight's gradient (when it has
// one). Saves the ids.
Tensor embedding(Context& ctx, const Tensor& ids, Parameter& weight);
// The same with weight [n, C] holding rows [first, first + n) of the table
// only (a vocabulary-parallel slice): other ids give zero rows and add
// nothing to the gradient. Saves the ids.
Tensor embedding_slice(Context& ctx, const Tensor& ids, Parameter& weight, int64_t first);
// x [B, T, C] + rows [first_row, first_row + T) of the position table [P, C]
// (first_row: a sequence shard's first position). The rule passes dy through
// and adds it into the table's rows; sum_grads_over as layer_norm's. Saves
// nothing.
Tensor add_positional(Context& ctx, const Tensor& x, Parameter& table, int64_t first_row = 0,
                      Communicator* sum_grads_over = nullptr);
// GPT-2's tanh GELU. Saves x.
Tensor gelu(Context& ctx, const Tensor& x);
// LayerNorm over the last dimension. Saves x, the mean and the variance.
// sum_grads_over: the weight and bias are replicated over that group but each
// rank saw other tokens (a sequence shard): the rule computes their gradient
// contribution into zeroed buffers, sums it over the group and then adds it
// (a failed all-reduce is noted on the context).
Tensor layer_norm(Context& ctx, const Tensor& x, Parameter& weight, Parameter& bias, float eps,
                  Communicator* sum_grads_over = nullptr);
// RMSNorm over the last dimension (Llama's). Saves x and 1/rms.
// sum_grads_over: as layer_norm's. unit_offset: Gemma's form, scaling by
// (1 + weight) (computed in fp32), the weight's gradient the same.
Tensor rms_norm(Context& ctx, const Tensor& x, Parameter& weight, float eps, Communicator* sum_grads_over = nullptr,
                bool unit_offset = false);
// silu(gate) * up. Saves gate and up.
Tensor swiglu(Context& ctx, const Tensor& gate, const Tensor& up);
// gelu(gate) * up, GELU's tanh form (Gemma's GeGLU). Saves gate and up.
Tensor geglu(Context& ctx, const Tensor& gate, const Tensor& up);
// x * s. Saves nothing.
Tensor scale(Context& ctx, const Tensor& x, float s);
// cap * tanh(x / cap): logit soft-capping (Gemma 2's), cap > 0. Saves x (the
// output is a model's logits, which the engine overwrites with their
// gradient); the rule recomputes the output from it.
Tensor softcap(Context& ctx, const Tensor& x, float cap);
// Dropout with probability p of x [B, T, ...], its mask a function of the
// run's seed, the global sample, the position (counted from first_position:
// a sequence-parallel shard's first), the feature (counted from
// first_feature: a row-parallel layer's input slice's first) and `site` (a
// number the model gives each dropout site; kernels/dropout_mask.h);
// identity with grad disabled. Saves nothing (backward redraws the mask).
Tensor dropout(Context& ctx, const Tensor& x, float p, int64_t site, int64_t first_position = 0,
               int64_t first_feature = 0);
// a + b into a's buffer, which the caller hands over (an activation nothing
// saved: the output of a layer that does not keep it, as a residual branch's
// last); when something else still holds it, into a new buffer. Saves nothing.
Tensor add_(Context& ctx, Tensor&& a, const Tensor& b);

// C = alpha op(A) op(B), spec as the backend's matmul (no bias, no
// accumulate): A [G, M, K] (or [G, K, M] with trans_a), B [G, K, N] (or [G,
// N, K] with trans_b) -> C [G, M, N]; or the same without the batch. Saves A
// and B; the rule issues the two GEMMs of dA and dB.
Tensor matmul(Context& ctx, const Tensor& a, const Tensor& b, MatmulSpec spec);
// Causal softmax of scores viewed as `shape` [N, T, T] (row t sees columns
// <= t), into the buffer handed over when nothing else holds it. Saves the
// probabilities; the rule works in place on dy when it may.
Tensor causal_softmax_(Context& ctx, Tensor&& scores, const Shape& shape);
// [A, B, C, D] -> [A, C, B, D]. Saves nothing.
Tensor transpose12(Context& ctx, const Tensor& x);
// RoPE of x [B, H, T, D] (positions from 0), into the buffer handed over when
// nothing else holds it. Saves nothing (the rule rotates back, in place on dy
// when it may).
Tensor rope_(Context& ctx, Tensor&& x, const RopeFreqs& freqs);
// A fused qkv [B, T, (H + 2 G) D] -> q [B, H, T, D], k and v [B, G, T, D]
// (G = kv_heads, grouped-query attention; 0: G = H, GPT-2's). Saves nothing;
// the gradients of q, k and v are merged into qkv's by one kernel when the
// last of the three (q's, in backward order) arrives.
std::array<Tensor, 3> split_qkv(Context& ctx, const Tensor& qkv, int64_t heads, int64_t head_dim,
                                int64_t kv_heads = 0);

}  // namespace zero::fn
