// The transformer pieces of every family (graph/model_features.h): causal
// self-attention, the MLP and the pre-norm block, built from the feature
// flags of BlockConfig, never from a family's name.
//
// CausalSelfAttention, for x [B, T, C] with H query heads of D (head_dim;
// C / H unless the family sets its own) and G key/value heads (G = H for
// GPT-2; G divides H for grouped-query attention, r = H / G query heads per
// key/value head):
//   fused:  qkv = c_attn(x) [B, T, 3C] -> q, k, v [B, H, T, D]   (GPT-2)
//   else:   qkv = qkv_proj(x) [B, T, (H + 2 G) D], weight [q; k; v] rows
//           (Hugging Face's q_proj, k_proj, v_proj concatenated; a fused
//           bias per qkv_bias) -> q [B, H, T, D], k, v [B, G, T, D]; with
//           qk_norm each head of q and k RMS-normalised (q_norm, k_norm,
//           weight [D]); q and k rotated by RoPE (kernels/rope.h). One GEMM
//           instead of three. When LoRA adapts q_proj, k_proj or v_proj they
//           stay three layers (PEFT's modules): q = q_proj(x) [B, T, H D],
//           k = k_proj(x), v = v_proj(x) [B, T, G D], then the same.
//   P = causal_softmax(q k^T / sqrt(D)) [B*H, T, T];  y = P v -> [B, T, H D]
//   out = c_proj(y) / o_proj(y) [B, T, C] (bias per o_bias)
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
// as ParamSlice blocks 3, Llama's qkv_proj as uneven blocks (its q, k and v
// rows of those heads: ParamSlice::runs), unfused q/k/v_proj each
// column-parallel) and the
// output projection row-parallel; the MLP's c_fc (GPT-2) or gate_proj and
// up_proj (gated) column-parallel and c_proj / down_proj row-parallel. The
// q/k norms' weights are whole on every rank, which normalises other heads
// with them: their gradients are summed over the group. Each
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
#include "graph/lora.h"
#include "graph/model_features.h"
#include "graph/moe.h"
#include "kernels/rope.h"

namespace zero {

// What one block is: the family's choices and the sizes (graph/gpt.h builds
// it from GptConfig).
struct BlockConfig {
  ModelFeatures features;  // norms, biases, MLP, q/k norms, RoPE or not, names
  int64_t d_model = 0;
  int64_t n_head = 0;
  int64_t n_kv_head = 0;   // 0: n_head
  int64_t head_dim = 0;    // 0: d_model / n_head
  int64_t d_ff = 0;        // the MLP's hidden width
  float norm_eps = 1e-5f;  // RMSNorm's (LayerNorm's is 1e-5)
  float init_std = 0.02f;  // weights N(0, init_std)
  float proj_std = 0.02f;  // the output projections' (GPT-2 scales it by 1/sqrt(2 n_layer))
  float dropout = 0.0f;    // GPT-2: residual dropout (mask streams dropout_id, dropout_id + 1)
  int64_t dropout_id = 0;
  RopeFreqs rope;          // without learned positions
  Communicator* tensor_group = nullptr;  // T > 1 ranks: this rank's heads and features
  bool sequence_parallel = false;
  // LoRA adapters on the projections lora.targets() picks (graph/lora.h),
  // matched by Hugging Face's module names: hf_prefix + our module name.
  LoraConfig lora;
  std::string hf_prefix;
  // Mixture of experts (graph/moe.h): the block's MLP is sparse when
  // moe.sparse_layer(layer); its auxiliary losses go to moe_losses.
  MoeConfig moe;
  MoeLosses* moe_losses = nullptr;
  Communicator* expert_group = nullptr;  // expert parallelism over > 1 ranks (graph/moe.h)
  int64_t layer = 0;
  int64_t kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int64_t head_width() const { return head_dim > 0 ? head_dim : d_model / n_head; }
  bool gated_mlp() const { return features.mlp != MlpKind::kGelu; }
};

// RMSNorm over the last dimension, weight [features], for what the plain
// RmsNorm layer does not do: Gemma's (1 + w) form (w starts at 0), and a
// weight whole on every rank of `sum_grads_over` whose ranks normalise other
// rows with it (other heads: Qwen3's q/k norms under tensor parallelism;
// other tokens: a sequence shard), its gradient summed over that group.
// Saves x and 1/rms (fn::rms_norm).
class GroupRmsNorm : public Module {
 public:
  GroupRmsNorm(std::string name, int64_t features, float eps, bool unit_offset, Communicator* sum_grads_over);
  Tensor forward(Context& ctx, const Tensor& x) override;
  Parameter* weight() const { return weight_; }

 private:
  float eps_;
  bool unit_offset_;
  Communicator* sum_grads_over_;
  Parameter* weight_;
};

// The logits as cap tanh(logits / cap), cap > 0 (logit soft-capping, Gemma
// 2's final_logit_softcapping). Saves its output.
class LogitSoftcap : public Module {
 public:
  LogitSoftcap(std::string name, float cap) : Module(std::move(name)), cap_(cap) {}
  Tensor forward(Context& ctx, const Tensor& x) override;

 private:
  float cap_;
};

// Token embeddings times a constant (Gemma's sqrt(d_model)), rounded to the
// model dtype first as Hugging Face's normaliser is. Saves nothing.
class EmbeddingScale : public Module {
 public:
  EmbeddingScale(std::string name, float scale) : Module(std::move(name)), scale_(scale) {}
  Tensor forward(Context& ctx, const Tensor& x) override;

 private:
  float scale_;
};

class CausalSelfAttention : public Module {
 public:
  // tensor_group of T > 1 ranks: this rank's key/value heads, split as
  // evenly as can be (even_split: the first kv_heads mod T ranks one more;
  // T must not be more than kv_heads), and the query heads of their groups
  // (n_head / kv_heads each), so grouped-query attention stays within the
  // rank: 9 query / 3 key/value heads over 2 ranks are 6 / 2 and 3 / 1.
  // GPT-2's fused q/k/v splits evenly only (T must divide n_head).
  CausalSelfAttention(std::string name, const BlockConfig& config);
  Tensor forward(Context& ctx, const Tensor& x) override;

 private:
  // This rank's q, k, v [B, H|G, T, D] from x (normalised and rotated as
  // the features say).
  void project(Context& ctx, const Tensor& x, Tensor& q, Tensor& k, Tensor& v);

  bool rotary_;
  int64_t n_head_, n_kv_head_, head_dim_;  // this rank's heads
  RopeFreqs rope_;
  int64_t width() const { return n_head_ * head_dim_; }
  Module* c_attn_ = nullptr;  // fused (GPT-2)
  Module* qkv_proj_ = nullptr;  // fused (Llama family)
  Module* q_proj_ = nullptr;  // separate
  Module* k_proj_ = nullptr;
  Module* v_proj_ = nullptr;
  Module* q_norm_ = nullptr;  // qk_norm
  Module* k_norm_ = nullptr;
  Module* c_proj_;            // o_proj when separate
  Dropout* resid_dropout_ = nullptr;
};

// GELU MLP (GPT-2): c_fc (C -> 4C), GELU, c_proj (4C -> C), then with
// dropout > 0 a Dropout "dropout" (mask stream dropout_id). Gated:
// down_proj(act(gate_proj x) * up_proj x), hidden width d_ff, act SiLU
// (SwiGLU) or the tanh GELU (GeGLU); saves the gate and up activations.
// gate_proj and up_proj run as one GEMM, gate_up_proj of weight [gate; up]
// [2 d_ff, C] (under tensor parallelism this rank's rows of each), unless
// LoRA adapts one of them.
class Mlp : public Module {
 public:
  Mlp(std::string name, const BlockConfig& config);
  Tensor forward(Context& ctx, const Tensor& x) override;

 private:
  MlpKind kind_;
  Module* c_fc_ = nullptr;  // GELU MLP
  Gelu* gelu_ = nullptr;
  Module* gate_up_proj_ = nullptr;  // gated, fused
  Module* gate_proj_ = nullptr;  // gated, separate
  Module* up_proj_ = nullptr;
  Module* c_proj_;  // down_proj when gated
  Dropout* dropout_ = nullptr;
};

// x + attn(norm_1(x)), then + mlp(norm_2(.)) (the MLP sparse, graph/moe.h,
// when the config's moe says so for this block). Saves nothing itself. The
// attention, the MLP and the block write forward only (graph/functional.h):
// the attention's GEMMs, softmax, transposes and RoPE are recorded ops whose
// rules issue the kernels the hand-written backward did, in its order. With
// GPT-2's names the children are ln_1, attn, ln_2, mlp; otherwise
// input_layernorm, self_attn, post_attention_layernorm, mlp.
class TransformerBlock : public Module {
 public:
  TransformerBlock(std::string name, const BlockConfig& config);
  Tensor forward(Context& ctx, const Tensor& x) override;

 private:
  Module* ln_1_;
  CausalSelfAttention* attn_;
  Module* ln_2_;
  Module* mlp_;  // Mlp, or MoeMlp in a sparse block
};

// The norm the features ask for, named `name`: LayerNorm or RMSNorm (its
// (1 + w) form a GroupRmsNorm), the sequence-parallel one when the
// activations are sequence shards.
std::unique_ptr<Module> make_norm(std::string name, const BlockConfig& config);

}  // namespace zero
