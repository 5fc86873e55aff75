// The transformer pieces of GPT-2: causal self-attention, the GELU MLP and
// the pre-LN block.
//
// CausalSelfAttention, for x [B, T, C] with H heads of D = C / H:
//   qkv = c_attn(x) [B, T, 3C] -> q, k, v [B, H, T, D]
//   P = causal_softmax(q k^T / sqrt(D)) [B*H, T, T];  y = P v -> [B, T, C]
//   out = c_proj(y)
// Saves q, k, v and P (B*H*T*T floats per layer; the memory that flash-style
// recomputation would trade away). With dropout > 0, out = resid_dropout(out).
//
// Tensor parallelism (a tensor group of T > 1 ranks, Megatron's split): the
// attention's c_attn is column-parallel by heads (each rank computes q, k, v
// of H/T heads: ParamSlice blocks 3) and c_proj row-parallel; the MLP's c_fc
// column-parallel and c_proj row-parallel. Each sublayer then costs one
// all-reduce of [B, T, C] forward (c_proj's) and one backward (c_attn's or
// c_fc's dx); the layer norms, residuals and dropouts run on the full,
// identical activations of every rank. With sequence_parallel those run on
// this rank's sequence shard instead (graph/sequence_parallel.h): the block's
// input and output are [B, S/T, C], the pairs gather and reduce-scatter
// along the sequence, and the layer norms sum their gradients over the group.
#pragma once

#include "comm/communicator.h"
#include "graph/layers.h"

namespace zero {

class CausalSelfAttention : public Module {
 public:
  // proj_std: init std of the output projection (GPT-2 scales it by 1/sqrt(2 n_layer)).
  // dropout > 0: a Dropout "resid_dropout" (mask stream dropout_id) on the output.
  // tensor_group of T > 1 ranks: this rank's n_head / T heads (T must divide n_head).
  CausalSelfAttention(std::string name, int64_t d_model, int64_t n_head, float init_std,
                      float proj_std, float dropout = 0.0f, int64_t dropout_id = 0,
                      Communicator* tensor_group = nullptr, bool sequence_parallel = false);
  Tensor forward(Context& ctx, const Tensor& x) override;
  Tensor backward(Context& ctx, const Tensor& dy) override;

 private:
  int64_t n_head_, head_dim_;  // n_head_: this rank's heads
  int64_t width() const { return n_head_ * head_dim_; }
  Module* c_attn_;
  Module* c_proj_;
  Dropout* resid_dropout_ = nullptr;
};

// c_fc (C -> 4C), GELU, c_proj (4C -> C), then with dropout > 0 a Dropout
// "dropout" (mask stream dropout_id).
class Mlp : public Module {
 public:
  Mlp(std::string name, int64_t d_model, float init_std, float proj_std, float dropout = 0.0f,
      int64_t dropout_id = 0, Communicator* tensor_group = nullptr, bool sequence_parallel = false);
  Tensor forward(Context& ctx, const Tensor& x) override;
  Tensor backward(Context& ctx, const Tensor& dy) override;

 private:
  Module* c_fc_;
  Gelu* gelu_;
  Module* c_proj_;
  Dropout* dropout_ = nullptr;
};

// x + attn(ln_1(x)), then + mlp(ln_2(.)). Saves nothing itself.
class TransformerBlock : public Module {
 public:
  // dropout > 0: residual dropout on attention (mask stream dropout_id) and
  // MLP (dropout_id + 1) outputs.
  TransformerBlock(std::string name, int64_t d_model, int64_t n_head, float init_std,
                   float proj_std, float dropout = 0.0f, int64_t dropout_id = 0,
                   Communicator* tensor_group = nullptr, bool sequence_parallel = false);
  Tensor forward(Context& ctx, const Tensor& x) override;
  Tensor backward(Context& ctx, const Tensor& dy) override;

 private:
  Module* ln_1_;
  CausalSelfAttention* attn_;
  Module* ln_2_;
  Mlp* mlp_;
};

}  // namespace zero
