// Attention, MLP and transformer block; see transformer.h.
#include "graph/transformer.h"

#include <cmath>

#include "graph/parallel_layers.h"
#include "graph/sequence_parallel.h"

namespace zero {

namespace {

bool split(const Communicator* group) { return group != nullptr && group->world_size() > 1; }

// This rank's heads: all of them, or n_head / T over a tensor group of T
// (which must divide them).
int64_t local_heads(int64_t n_head, const Communicator* group) {
  if (!split(group)) return n_head;
  ZE_CHECK(n_head % group->world_size() == 0)
      << n_head << " attention heads do not divide over a tensor group of " << group->world_size();
  return n_head / group->world_size();
}

}  // namespace

CausalSelfAttention::CausalSelfAttention(std::string name, int64_t d_model, int64_t n_head,
                                         float init_std, float proj_std, float dropout,
                                         int64_t dropout_id, Communicator* tensor_group, bool sequence_parallel)
    : Module(std::move(name)), n_head_(local_heads(n_head, tensor_group)), head_dim_(d_model / n_head) {
  ZE_CHECK(d_model % n_head == 0) << d_model << " % " << n_head;
  const bool sp = sequence_parallel && split(tensor_group);
  if (split(tensor_group)) {
    c_attn_ = add_child<ColumnParallelLinear>("c_attn", d_model, 3 * d_model, true, init_std, *tensor_group, 3, sp);
    c_proj_ = add_child<RowParallelLinear>("c_proj", d_model, d_model, true, proj_std, *tensor_group, sp);
  } else {
    c_attn_ = add_child<Linear>("c_attn", d_model, 3 * d_model, true, init_std);
    c_proj_ = add_child<Linear>("c_proj", d_model, d_model, true, proj_std);
  }
  if (dropout > 0.0f) {
    resid_dropout_ = add_child<Dropout>("resid_dropout", dropout, dropout_id, sp ? tensor_group : nullptr);
  }
}

Tensor CausalSelfAttention::forward(Context& ctx, const Tensor& x) {
  Tensor qkv = ctx.forward(*c_attn_, x);  // the whole sequence (a sequence-parallel input is gathered)
  const int64_t b = qkv.dim(0), t = qkv.dim(1);
  const Shape heads{b, n_head_, t, head_dim_};
  Tensor q = ctx.activation(heads), k = ctx.activation(heads), v = ctx.activation(heads);
  ctx.ops().split_qkv(qkv, q, k, v);
  qkv = Tensor();  // free before the T x T scores are allocated

  const Shape bh3{b * n_head_, t, head_dim_};
  Tensor probs = ctx.activation({b * n_head_, t, t});
  MatmulSpec scores_spec;
  scores_spec.trans_b = true;
  scores_spec.alpha = 1.0f / std::sqrt(static_cast<float>(head_dim_));
  scores_spec.compute = ctx.param_dtype();
  ctx.ops().matmul(q.view(bh3), k.view(bh3), probs, scores_spec);
  ctx.ops().causal_softmax_forward(probs, probs);

  Tensor yh = ctx.activation(heads);
  MatmulSpec pv;
  pv.compute = ctx.param_dtype();
  ctx.ops().matmul(probs, v.view(bh3), yh.view(bh3), pv);
  Tensor y = ctx.activation({b, t, n_head_, head_dim_});
  ctx.ops().transpose12(yh, y);
  ctx.save(q);
  ctx.save(k);
  ctx.save(v);
  ctx.save(probs);
  Tensor out = ctx.forward(*c_proj_, y.view({b, t, width()}));
  return resid_dropout_ != nullptr ? ctx.forward(*resid_dropout_, out) : out;
}

Tensor CausalSelfAttention::backward(Context& ctx, const Tensor& dout) {
  const Tensor &q = ctx.saved(0), &k = ctx.saved(1), &v = ctx.saved(2), &probs = ctx.saved(3);
  const int64_t b = q.dim(0), t = q.dim(2);
  const Shape bh3{b * n_head_, t, head_dim_};
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim_));

  // [B, T, C]
  Tensor dy = ctx.backward(*c_proj_, resid_dropout_ != nullptr ? ctx.backward(*resid_dropout_, dout) : dout);
  Tensor dyh = ctx.activation({b, n_head_, t, head_dim_});
  ctx.ops().transpose12(dy.view({b, t, n_head_, head_dim_}), dyh);
  dy = Tensor();

  MatmulSpec spec;
  spec.compute = ctx.param_dtype();
  Tensor dprobs = ctx.activation({b * n_head_, t, t});
  MatmulSpec nt = spec;
  nt.trans_b = true;
  ctx.ops().matmul(dyh.view(bh3), v.view(bh3), dprobs, nt);  // dP = dY V^T
  Tensor dv = ctx.activation(q.shape());
  MatmulSpec tn = spec;
  tn.trans_a = true;
  ctx.ops().matmul(probs, dyh.view(bh3), dv.view(bh3), tn);  // dV = P^T dY
  dyh = Tensor();
  ctx.ops().causal_softmax_backward(probs, dprobs, dprobs);   // dS, in place

  Tensor dq = ctx.activation(q.shape()), dk = ctx.activation(q.shape());
  MatmulSpec nn = spec;
  nn.alpha = scale;
  ctx.ops().matmul(dprobs, k.view(bh3), dq.view(bh3), nn);    // dQ = dS K / sqrt(D)
  MatmulSpec tn_scaled = tn;
  tn_scaled.alpha = scale;
  ctx.ops().matmul(dprobs, q.view(bh3), dk.view(bh3), tn_scaled);  // dK = dS^T Q / sqrt(D)
  dprobs = Tensor();

  Tensor dqkv = ctx.activation({b, t, 3 * width()});
  ctx.ops().merge_qkv(dq, dk, dv, dqkv);
  return ctx.backward(*c_attn_, dqkv);
}

Mlp::Mlp(std::string name, int64_t d_model, float init_std, float proj_std, float dropout,
         int64_t dropout_id, Communicator* tensor_group, bool sequence_parallel)
    : Module(std::move(name)) {
  const bool sp = sequence_parallel && split(tensor_group);
  if (split(tensor_group)) {
    c_fc_ = add_child<ColumnParallelLinear>("c_fc", d_model, 4 * d_model, true, init_std, *tensor_group, 1, sp);
    gelu_ = add_child<Gelu>("gelu");
    c_proj_ = add_child<RowParallelLinear>("c_proj", 4 * d_model, d_model, true, proj_std, *tensor_group, sp);
  } else {
    c_fc_ = add_child<Linear>("c_fc", d_model, 4 * d_model, true, init_std);
    gelu_ = add_child<Gelu>("gelu");
    c_proj_ = add_child<Linear>("c_proj", 4 * d_model, d_model, true, proj_std);
  }
  if (dropout > 0.0f) dropout_ = add_child<Dropout>("dropout", dropout, dropout_id, sp ? tensor_group : nullptr);
}

Tensor Mlp::forward(Context& ctx, const Tensor& x) {
  Tensor y = ctx.forward(*c_proj_, ctx.forward(*gelu_, ctx.forward(*c_fc_, x)));
  return dropout_ != nullptr ? ctx.forward(*dropout_, y) : y;
}

Tensor Mlp::backward(Context& ctx, const Tensor& dy) {
  const Tensor d = dropout_ != nullptr ? ctx.backward(*dropout_, dy) : dy;
  return ctx.backward(*c_fc_, ctx.backward(*gelu_, ctx.backward(*c_proj_, d)));
}

TransformerBlock::TransformerBlock(std::string name, int64_t d_model, int64_t n_head,
                                   float init_std, float proj_std, float dropout, int64_t dropout_id,
                                   Communicator* tensor_group, bool sequence_parallel)
    : Module(std::move(name)) {
  const bool sp = sequence_parallel && split(tensor_group);
  auto layer_norm = [&](const char* local) -> Module* {
    if (sp) return add_child<SequenceParallelLayerNorm>(local, d_model, *tensor_group);
    return add_child<LayerNorm>(local, d_model);
  };
  ln_1_ = layer_norm("ln_1");
  attn_ = add_child<CausalSelfAttention>("attn", d_model, n_head, init_std, proj_std, dropout, dropout_id,
                                         tensor_group, sp);
  ln_2_ = layer_norm("ln_2");
  mlp_ = add_child<Mlp>("mlp", d_model, init_std, proj_std, dropout, dropout_id + 1, tensor_group, sp);
}

Tensor TransformerBlock::forward(Context& ctx, const Tensor& x) {
  Tensor a = ctx.forward(*attn_, ctx.forward(*ln_1_, x));
  Tensor x2 = ctx.activation(x.shape());
  ctx.ops().add(x, a, x2);
  a = Tensor();
  Tensor m = ctx.forward(*mlp_, ctx.forward(*ln_2_, x2));
  ctx.ops().add(m, x2, m);  // m is ours alone: the MLP did not save its output
  return m;
}

Tensor TransformerBlock::backward(Context& ctx, const Tensor& dy) {
  // dx2 = dy + ln_2'(mlp'(dy)); dx = dx2 + ln_1'(attn'(dx2))
  Tensor dx2 = ctx.backward(*ln_2_, ctx.backward(*mlp_, dy));
  ctx.ops().add(dx2, dy, dx2);
  Tensor dx = ctx.backward(*ln_1_, ctx.backward(*attn_, dx2));
  ctx.ops().add(dx, dx2, dx);
  return dx;
}

}  // namespace zero
