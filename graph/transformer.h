// The transformer pieces of GPT-2 and the Llama family: causal
// self-attention, the MLP and the pre-norm block.
//
// CausalSelfAttention, for x [B, T, C] with H query heads of D = C / H and
// G key/value heads (G = H for GPT-2; G divides H for Llama's grouped-query
// attention, r = H / G query heads per key/value head):
//   GPT-2:  qkv = c_attn(x) [B, T, 3C] -> q, k, v [B, H, T, D]
//   Llama:  q = q_proj(x) [B, T, H D], k = k_proj(x), v = v_proj(x) [B, T, G D]
//           -> [B, H|G, T, D]; q and k rotated by RoPE (kernels/rope.h)
//   P = causal_softmax(q k^T / sqrt(D)) [B*H, T, T];  y = P v -> [B, T, H D]
//   out = c_proj(y) / o_proj(y)
// Grouped-query attention needs no copy of k and v: the r query heads of a
// group are adjacent in [B, H, T, D], so q viewed as [B G, r T, D] against k
// [B G, T, D] is one batched GEMM per group, and the backward's dk and dv sum
// over the group's heads by the same GEMMs.
// Saves q, k, v and P (B*H*T*T floats per layer; the memory that flash-style
// recomputation would trade away). With dropout > 0 (GPT-2 only), out =
// resid_dropout(out).
//
// Tensor parallelism (a tensor group of T > 1 ranks, Megatron's split): the
// attention's input projections are column-parallel by heads (each rank
// computes q, k, v of H/T query and G/T key/value heads: GPT-2's fused c_attn
// as ParamSlice blocks 3, Llama's q/k/v_proj each column-parallel) and the
// output projection row-parallel; the MLP's c_fc (GPT-2) or gate_proj and
// up_proj (Llama) column-parallel and c_proj / down_proj row-parallel. Each
// sublayer then costs one all-reduce of [B, T, C] forward (the row-parallel
// layer's) and one backward per column-parallel layer's dx; the norms,
// residuals and dropouts run on the full, identical activations of every
// rank. With sequence_parallel those run on this rank's sequence shard
// instead (graph/sequence_parallel.h): the block's input and output are
// [B, S/T, C], the pairs gather and reduce-scatter along the sequence, and
// the norms sum their gradients over the group.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "graph/layers.h"
#include "kernels/rope.h"

namespace zero {

// What one block is: the family's choices and the sizes (graph/gpt.h builds
// it from GptConfig).
struct BlockConfig {
  bool llama = false;      // RMSNorm, RoPE, SwiGLU, separate q/k/v, no biases, Hugging Face's names
  int64_t d_model = 0;
  int64_t n_head = 0;
  int64_t n_kv_head = 0;   // 0: n_head
  int64_t d_ff = 0;        // the MLP's hidden width
  float norm_eps = 1e-5f;
  float init_std = 0.02f;  // weights N(0, init_std)
  float proj_std = 0.02f;  // the output projections' (GPT-2 scales it by 1/sqrt(2 n_layer))
  float dropout = 0.0f;    // GPT-2: residual dropout (mask streams dropout_id, dropout_id + 1)
  int64_t dropout_id = 0;
  RopeFreqs rope;          // Llama
  Communicator* tensor_group = nullptr;  // T > 1 ranks: this rank's heads and features
  bool sequence_parallel = false;
  int64_t kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
};

class CausalSelfAttention : public Module {
 public:
  // tensor_group of T > 1 ranks: this rank's n_head / T query heads and
  // kv_heads / T key/value heads (T must divide both).
  CausalSelfAttention(std::string name, const BlockConfig& config);
  Tensor forward(Context& ctx, const Tensor& x) override;

 private:
  // This rank's q, k, v [B, H|G, T, D] from x (rotated for Llama).
  void project(Context& ctx, const Tensor& x, Tensor& q, Tensor& k, Tensor& v);

  bool llama_;
  int64_t n_head_, n_kv_head_, head_dim_;  // this rank's heads
  RopeFreqs rope_;
  int64_t width() const { return n_head_ * head_dim_; }
  Module* c_attn_ = nullptr;  // GPT-2
  Module* q_proj_ = nullptr;  // Llama
  Module* k_proj_ = nullptr;
  Module* v_proj_ = nullptr;
  Module* c_proj_;            // o_proj for Llama
  Dropout* resid_dropout_ = nullptr;
};

// GPT-2: c_fc (C -> 4C), GELU, c_proj (4C -> C), then with dropout > 0 a
// Dropout "dropout" (mask stream dropout_id). Llama: down_proj(silu(gate_proj
// x) * up_proj x), hidden width d_ff; saves the gate and up activations.
class Mlp : public Module {
 public:
  Mlp(std::string name, const BlockConfig& config);
  Tensor forward(Context& ctx, const Tensor& x) override;

 private:
  Module* c_fc_ = nullptr;  // GPT-2
  Gelu* gelu_ = nullptr;
  Module* gate_proj_ = nullptr;  // Llama
  Module* up_proj_ = nullptr;
  Module* c_proj_;  // down_proj for Llama
  Dropout* dropout_ = nullptr;
};

// x + attn(norm_1(x)), then + mlp(norm_2(.)). Saves nothing itself. The
// attention, the MLP and the block write forward only (graph/functional.h):
// the attention's GEMMs, softmax, transposes and RoPE are recorded ops whose
// rules issue the kernels the hand-written backward did, in its order. GPT-2's
// children are ln_1, attn, ln_2, mlp (LayerNorm); Llama's input_layernorm,
// self_attn, post_attention_layernorm, mlp (RMSNorm).
class TransformerBlock : public Module {
 public:
  TransformerBlock(std::string name, const BlockConfig& config);
  Tensor forward(Context& ctx, const Tensor& x) override;

 private:
  Module* ln_1_;
  CausalSelfAttention* attn_;
  Module* ln_2_;
  Mlp* mlp_;
};

// The norm of this config's family, named `name`: LayerNorm or RMSNorm, the
// sequence-parallel one when the activations are sequence shards.
std::unique_ptr<Module> make_norm(std::string name, const BlockConfig& config);

}  // namespace zero
