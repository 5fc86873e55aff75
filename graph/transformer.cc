// Attention, MLP and transformer block; see transformer.h.
#include "graph/transformer.h"

#include <array>
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
    // The whole sequence (a sequence-parallel input is gathered by c_attn).
    std::array<Tensor, 3> qkv = fn::split_qkv(ctx, ctx.forward(*c_attn_, x), n_head_, head_dim_);
    q = std::move(qkv[0]), k = std::move(qkv[1]), v = std::move(qkv[2]);
    return;
  }
  // [B, T, n D] -> [B, n, T, D], rotated in place for q and k.
  auto heads = [&](Module& proj, int64_t n, bool rotate) {
    Tensor lin = ctx.forward(proj, x);
    Tensor h = fn::transpose12(ctx, lin.view({lin.dim(0), lin.dim(1), n, head_dim_}));
    return rotate ? fn::rope_(ctx, std::move(h), rope_) : h;
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
  MatmulSpec scores_spec;
  scores_spec.trans_b = true;
  scores_spec.alpha = 1.0f / std::sqrt(static_cast<float>(head_dim_));
  scores_spec.compute = ctx.param_dtype();
  Tensor probs = fn::causal_softmax_(ctx, fn::matmul(ctx, q.view(q3), k.view(kv3), scores_spec),
                                     {b * n_head_, t, t});
  q = k = Tensor();  // the rules keep what they need
  MatmulSpec pv;
  pv.compute = ctx.param_dtype();
  Tensor yh = fn::matmul(ctx, probs.view({groups, r * t, t}), v.view(kv3), pv);
  probs = v = Tensor();
  Tensor y = fn::transpose12(ctx, yh.view({b, n_head_, t, head_dim_}));
  yh = Tensor();
  Tensor out = ctx.forward(*c_proj_, y.view({b, t, width()}));
  return resid_dropout_ != nullptr ? ctx.forward(*resid_dropout_, out) : out;
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
