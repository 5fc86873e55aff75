// Attention, MLP and transformer block; see transformer.h.
#include "graph/transformer.h"

#include <cmath>

#include "graph/functional.h"
#include "graph/parallel_layers.h"
#include "graph/sequence_parallel.h"

namespace zero {

namespace {

bool split(const Communicator* group) { return group != nullptr && group->world_size() > 1; }

// This rank's share of `count` heads: all of them, or count / T over a
// tensor group of T (which must divide them).
int64_t local_heads(int64_t count, const char* what, const Communicator* group) {
  if (!split(group)) return count;
  ZE_CHECK(count % group->world_size() == 0)
      << count << " " << what << " do not divide over a tensor group of " << group->world_size();
  return count / group->world_size();
}

bool sequence_sharded(const BlockConfig& c) { return c.sequence_parallel && split(c.tensor_group); }

// The column-parallel (input) and row-parallel (output) projections of a
// block, or plain Linears without a tensor group; biases for GPT-2 only.
// blocks: the column layer's equal parts that split separately (GPT-2's
// fused q, k, v).
struct Projections {
  const BlockConfig& c;
  bool bias() const { return !c.llama; }
  std::unique_ptr<Module> column(std::string name, int64_t in, int64_t out, int64_t blocks = 1) const {
    if (split(c.tensor_group)) {
      return std::make_unique<ColumnParallelLinear>(std::move(name), in, out, bias(), c.init_std, *c.tensor_group,
                                                    blocks, sequence_sharded(c));
    }
    return std::make_unique<Linear>(std::move(name), in, out, bias(), c.init_std);
  }
  std::unique_ptr<Module> row(std::string name, int64_t in, int64_t out) const {
    if (split(c.tensor_group)) {
      return std::make_unique<RowParallelLinear>(std::move(name), in, out, bias(), c.proj_std, *c.tensor_group,
                                                 sequence_sharded(c));
    }
    return std::make_unique<Linear>(std::move(name), in, out, bias(), c.proj_std);
  }
};

}  // namespace

std::unique_ptr<Module> make_norm(std::string name, const BlockConfig& c) {
  if (sequence_sharded(c)) {
    if (c.llama) return std::make_unique<SequenceParallelRmsNorm>(std::move(name), c.d_model, c.norm_eps, *c.tensor_group);
    return std::make_unique<SequenceParallelLayerNorm>(std::move(name), c.d_model, *c.tensor_group);
  }
  if (c.llama) return std::make_unique<RmsNorm>(std::move(name), c.d_model, c.norm_eps);
  return std::make_unique<LayerNorm>(std::move(name), c.d_model);
}

CausalSelfAttention::CausalSelfAttention(std::string name, const BlockConfig& c)
    : Module(std::move(name)),
      llama_(c.llama),
      n_head_(local_heads(c.n_head, "attention heads", c.tensor_group)),
      n_kv_head_(local_heads(c.kv_heads(), "key/value heads", c.tensor_group)),
      head_dim_(c.d_model / c.n_head),
      rope_(c.rope) {
  ZE_CHECK(c.d_model % c.n_head == 0) << c.d_model << " % " << c.n_head;
  ZE_CHECK(c.n_head % c.kv_heads() == 0) << c.kv_heads() << " key/value heads for " << c.n_head << " query heads";
  ZE_CHECK(!llama_ || rope_.half * 2 == head_dim_) << "RoPE frequencies for head_dim " << 2 * rope_.half;
  const Projections p{c};
  const int64_t d = c.d_model, kv = c.kv_heads() * head_dim_;
  if (llama_) {
    q_proj_ = adopt_child(p.column(child_name("q_proj"), d, d));
    k_proj_ = adopt_child(p.column(child_name("k_proj"), d, kv));
    v_proj_ = adopt_child(p.column(child_name("v_proj"), d, kv));
    c_proj_ = adopt_child(p.row(child_name("o_proj"), d, d));
  } else {
    c_attn_ = adopt_child(p.column(child_name("c_attn"), d, 3 * d, 3));
    c_proj_ = adopt_child(p.row(child_name("c_proj"), d, d));
  }
  if (c.dropout > 0.0f) {
    resid_dropout_ = add_child<Dropout>("resid_dropout", c.dropout, c.dropout_id,
                                        sequence_sharded(c) ? c.tensor_group : nullptr);
  }
}

void CausalSelfAttention::project(Context& ctx, const Tensor& x, Tensor& q, Tensor& k, Tensor& v) {
  if (!llama_) {
    Tensor qkv = ctx.forward(*c_attn_, x);  // the whole sequence (a sequence-parallel input is gathered)
    const Shape heads{qkv.dim(0), n_head_, qkv.dim(1), head_dim_};
    q = ctx.activation(heads), k = ctx.activation(heads), v = ctx.activation(heads);
    ctx.ops().split_qkv(qkv, q, k, v);
    return;
  }
  // [B, T, n D] -> [B, n, T, D], rotated in place for q and k.
  auto heads = [&](Module& proj, int64_t n, bool rotate) {
    Tensor lin = ctx.forward(proj, x);
    const int64_t b = lin.dim(0), t = lin.dim(1);
    Tensor h = ctx.activation({b, n, t, head_dim_});
    ctx.ops().transpose12(lin.view({b, t, n, head_dim_}), h);
    if (rotate) ctx.ops().rope(h, h, rope_, 0, false);
    return h;
  };
  q = heads(*q_proj_, n_head_, true);
  k = heads(*k_proj_, n_kv_head_, true);
  v = heads(*v_proj_, n_kv_head_, false);
}

Tensor CausalSelfAttention::forward(Context& ctx, const Tensor& x) {
  Tensor q, k, v;
  project(ctx, x, q, k, v);
  const int64_t b = q.dim(0), t = q.dim(2), groups = b * n_kv_head_, r = n_head_ / n_kv_head_;
  // A group's r query heads against its one key/value head.
  const Shape q3{groups, r * t, head_dim_}, kv3{groups, t, head_dim_};
  Tensor probs = ctx.activation({b * n_head_, t, t});
  MatmulSpec scores_spec;
  scores_spec.trans_b = true;
  scores_spec.alpha = 1.0f / std::sqrt(static_cast<float>(head_dim_));
  scores_spec.compute = ctx.param_dtype();
  ctx.ops().matmul(q.view(q3), k.view(kv3), probs.view({groups, r * t, t}), scores_spec);
  ctx.ops().causal_softmax_forward(probs, probs);

  Tensor yh = ctx.activation(q.shape());
  MatmulSpec pv;
  pv.compute = ctx.param_dtype();
  ctx.ops().matmul(probs.view({groups, r * t, t}), v.view(kv3), yh.view(q3), pv);
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
  const int64_t b = q.dim(0), t = q.dim(2), groups = b * n_kv_head_, r = n_head_ / n_kv_head_;
  const Shape q3{groups, r * t, head_dim_}, kv3{groups, t, head_dim_}, p3{groups, r * t, t};
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim_));

  // [B, T, C]
  Tensor dy = ctx.backward(*c_proj_, resid_dropout_ != nullptr ? ctx.backward(*resid_dropout_, dout) : dout);
  Tensor dyh = ctx.activation(q.shape());
  ctx.ops().transpose12(dy.view({b, t, n_head_, head_dim_}), dyh);
  dy = Tensor();

  MatmulSpec spec;
  spec.compute = ctx.param_dtype();
  Tensor dprobs = ctx.activation({b * n_head_, t, t});
  MatmulSpec nt = spec;
  nt.trans_b = true;
  ctx.ops().matmul(dyh.view(q3), v.view(kv3), dprobs.view(p3), nt);  // dP = dY V^T
  Tensor dv = ctx.activation(v.shape());
  MatmulSpec tn = spec;
  tn.trans_a = true;
  ctx.ops().matmul(probs.view(p3), dyh.view(q3), dv.view(kv3), tn);  // dV = P^T dY (summed over the group)
  dyh = Tensor();
  ctx.ops().causal_softmax_backward(probs, dprobs, dprobs);  // dS, in place

  Tensor dq = ctx.activation(q.shape()), dk = ctx.activation(k.shape());
  MatmulSpec nn = spec;
  nn.alpha = scale;
  ctx.ops().matmul(dprobs.view(p3), k.view(kv3), dq.view(q3), nn);  // dQ = dS K / sqrt(D)
  MatmulSpec tn_scaled = tn;
  tn_scaled.alpha = scale;
  ctx.ops().matmul(dprobs.view(p3), q.view(q3), dk.view(kv3), tn_scaled);  // dK = dS^T Q / sqrt(D)
  dprobs = Tensor();
  return project_backward(ctx, std::move(dq), std::move(dk), std::move(dv));
}

Tensor CausalSelfAttention::project_backward(Context& ctx, Tensor dq, Tensor dk, Tensor dv) {
  const int64_t b = dq.dim(0), t = dq.dim(2);
  if (!llama_) {
    Tensor dqkv = ctx.activation({b, t, 3 * width()});
    ctx.ops().merge_qkv(dq, dk, dv, dqkv);
    dq = dk = dv = Tensor();
    return ctx.backward(*c_attn_, dqkv);
  }
  // Each projection's dx, in the reverse of forward's order: v, k, q.
  auto through = [&](Module& proj, Tensor& dh, bool rotated) {
    const int64_t n = dh.dim(1);
    if (rotated) ctx.ops().rope(dh, dh, rope_, 0, true);  // R^T
    Tensor dlin = ctx.activation({b, t, n, head_dim_});
    ctx.ops().transpose12(dh, dlin);
    dh = Tensor();
    return ctx.backward(proj, dlin.view({b, t, n * head_dim_}));
  };
  Tensor dx = through(*v_proj_, dv, false);
  Tensor dxk = through(*k_proj_, dk, true);
  ctx.ops().add(dx, dxk, dx);
  dxk = through(*q_proj_, dq, true);
  ctx.ops().add(dx, dxk, dx);
  return dx;
}

Mlp::Mlp(std::string name, const BlockConfig& c) : Module(std::move(name)) {
  const Projections p{c};
  if (c.llama) {
    gate_proj_ = adopt_child(p.column(child_name("gate_proj"), c.d_model, c.d_ff));
    up_proj_ = adopt_child(p.column(child_name("up_proj"), c.d_model, c.d_ff));
    c_proj_ = adopt_child(p.row(child_name("down_proj"), c.d_ff, c.d_model));
  } else {
    c_fc_ = adopt_child(p.column(child_name("c_fc"), c.d_model, c.d_ff));
    gelu_ = add_child<Gelu>("gelu");
    c_proj_ = adopt_child(p.row(child_name("c_proj"), c.d_ff, c.d_model));
  }
  if (c.dropout > 0.0f) {
    dropout_ = add_child<Dropout>("dropout", c.dropout, c.dropout_id + 1, sequence_sharded(c) ? c.tensor_group : nullptr);
  }
}

Tensor Mlp::forward(Context& ctx, const Tensor& x) {
  Tensor y;
  if (gate_proj_ != nullptr) {
    Tensor gate = ctx.forward(*gate_proj_, x);
    Tensor up = ctx.forward(*up_proj_, x);
    y = ctx.forward(*c_proj_, fn::swiglu(ctx, gate, up));
  } else {
    y = ctx.forward(*c_proj_, ctx.forward(*gelu_, ctx.forward(*c_fc_, x)));
  }
  return dropout_ != nullptr ? ctx.forward(*dropout_, y) : y;
}

TransformerBlock::TransformerBlock(std::string name, const BlockConfig& c) : Module(std::move(name)) {
  ln_1_ = adopt_child(make_norm(child_name(c.llama ? "input_layernorm" : "ln_1"), c));
  attn_ = add_child<CausalSelfAttention>(c.llama ? "self_attn" : "attn", c);
  ln_2_ = adopt_child(make_norm(child_name(c.llama ? "post_attention_layernorm" : "ln_2"), c));
  mlp_ = add_child<Mlp>("mlp", c);
}

Tensor TransformerBlock::forward(Context& ctx, const Tensor& x) {
  Tensor x2 = fn::add(ctx, x, ctx.forward(*attn_, ctx.forward(*ln_1_, x)));
  // The MLP's output is ours alone (it does not save it): added into in place.
  return fn::add_(ctx, ctx.forward(*mlp_, ctx.forward(*ln_2_, x2)), x2);
}

}  // namespace zero
