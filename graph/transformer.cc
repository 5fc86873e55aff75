// Attention, MLP and transformer block; see transformer.h.
#include "graph/transformer.h"

#include <array>
#include <cmath>
#include <memory>
#include <vector>

#include "graph/functional.h"
#include "graph/parallel_layers.h"
#include "graph/sequence_parallel.h"

namespace zero {

namespace {

bool split(const Communicator* group) { return group != nullptr && group->world_size() > 1; }

bool sequence_sharded(const BlockConfig& c) { return c.sequence_parallel && split(c.tensor_group); }

// This rank's range of `n` features: all of them unsplit, else its
// even_split part over the tensor group.
SplitRange local_range(int64_t n, const Communicator* group) {
  if (!split(group)) return {0, n};
  return even_split(n, group->world_size(), group->rank());
}

// This rank's query and key/value heads (see CausalSelfAttention): its
// key/value heads' range, and the query heads of their groups.
struct HeadRanges {
  SplitRange q, kv;
};
HeadRanges local_heads(const BlockConfig& c) {
  const int64_t kv = c.kv_heads(), per_group = c.n_head / kv;
  ZE_CHECK(!split(c.tensor_group) || kv >= c.tensor_group->world_size())
      << kv << " key/value heads over a tensor group of " << c.tensor_group->world_size();
  ZE_CHECK(!split(c.tensor_group) || !c.features.fused_qkv || c.n_head % c.tensor_group->world_size() == 0)
      << "fused q/k/v: " << c.n_head << " heads do not divide over a tensor group of " << c.tensor_group->world_size();
  const SplitRange k = local_range(kv, c.tensor_group);
  return {{k.offset * per_group, k.size * per_group}, k};
}

// The column-parallel (input) and row-parallel (output) projections of a
// block, or plain Linears without a tensor group, with or without a bias,
// each with a LoRA adapter when the config's lora targets it.
// `local`: this rank's range of the split features (its heads' or its part
// of the MLP's), used when there is a tensor group.
struct Projections {
  const BlockConfig& c;
  std::unique_ptr<Module> column(std::string name, int64_t in, int64_t out, SplitRange local, bool bias) const {
    if (split(c.tensor_group)) {
      auto layer = std::make_unique<ColumnParallelLinear>(std::move(name), in, out, local, bias, c.init_std,
                                                          *c.tensor_group, sequence_sharded(c));
      const Parameter* w = layer->weight();
      return adapted(std::move(layer), *w, LoraSplit::kColumn);
    }
    return plain(std::move(name), in, out, bias, c.init_std);
  }
  // GPT-2's fused q, k, v: three equal blocks, each split evenly.
  std::unique_ptr<Module> fused_qkv(std::string name, int64_t d, bool bias) const {
    if (split(c.tensor_group)) {
      auto layer = std::make_unique<ColumnParallelLinear>(std::move(name), d, 3 * d, bias, c.init_std,
                                                          *c.tensor_group, 3, sequence_sharded(c));
      const Parameter* w = layer->weight();
      return adapted(std::move(layer), *w, LoraSplit::kColumn);
    }
    return plain(std::move(name), d, 3 * d, bias, c.init_std);
  }
  std::unique_ptr<Module> row(std::string name, int64_t in, int64_t out, SplitRange local, bool bias) const {
    if (split(c.tensor_group)) {
      auto layer = std::make_unique<RowParallelLinear>(std::move(name), in, out, local, bias, c.proj_std,
                                                       *c.tensor_group, sequence_sharded(c));
      const Parameter* w = layer->weight();
      return adapted(std::move(layer), *w, LoraSplit::kRow);
    }
    return plain(std::move(name), in, out, bias, c.proj_std);
  }

  std::unique_ptr<Module> plain(std::string name, int64_t in, int64_t out, bool bias, float std) const {
    auto layer = std::make_unique<Linear>(std::move(name), in, out, bias, std);
    const Parameter* w = layer->weight();
    return adapted(std::move(layer), *w, LoraSplit::kNone);
  }
  // The layer itself, or wrapped in its adapter. Each adapter's dropout
  // stream: block (dropout_id - 1) / 2's, then the layer's place in the block.
  std::unique_ptr<Module> adapted(std::unique_ptr<Module> layer, const Parameter& weight, LoraSplit how) const {
    if (!c.lora.targets(c.hf_prefix + layer->name())) return layer;
    ZE_CHECK(!sequence_sharded(c)) << layer->name() << ": LoRA with sequence parallelism";
    const int64_t site = kLoraDropoutSites + c.dropout_id * 8 + (*next_site)++;
    return std::make_unique<LoraLinear>(std::move(layer), weight, c.lora, how, c.tensor_group, site);
  }

  // Layers run as one GEMM (the Llama family's [q; k; v] and [gate; up]):
  // block b of sizes[b] output features, of which this rank computes range
  // local[b] with a tensor group. Never adapted (LoRA keeps them apart).
  std::unique_ptr<Module> fused_column(std::string name, int64_t in, const std::vector<int64_t>& sizes,
                                       const std::vector<SplitRange>& local, bool bias) const {
    if (split(c.tensor_group)) {
      return std::make_unique<ColumnParallelLinear>(std::move(name), in, sizes, local, bias, c.init_std,
                                                    *c.tensor_group, sequence_sharded(c));
    }
    int64_t out = 0;
    for (int64_t s : sizes) out += s;
    return std::make_unique<Linear>(std::move(name), in, out, bias, c.init_std);
  }

  int64_t* next_site;  // this layer's adapters so far (the attention's from 0, the MLP's from 4)
};

// act(gate) * up from a fused projection's output gu [..., 2 F] (each row
// its gate's F features, then its up's), by the backend's row-wise GLU ops.
// Saves gu (what fn::swiglu saves as gate and up); the rule writes the
// gradient over it (nothing else holds gu: the linear keeps its input).
Tensor gated_fused(Context& ctx, const Tensor& gu, MlpKind kind) {
  const int64_t f = gu.shape().back() / 2;
  ZE_CHECK(2 * f == gu.shape().back()) << "gate and up of " << gu.debug_string();
  Shape h_shape = gu.shape();
  h_shape.back() = f;
  Tensor h = ctx.activation(h_shape);
  const Ops::Glu glu = kind == MlpKind::kSwiGlu ? Ops::Glu::kSwiGlu : Ops::Glu::kGeGlu;
  ctx.ops().glu_rows_forward(glu, gu, h);
  ctx.record(glu == Ops::Glu::kSwiGlu ? "swiglu (fused)" : "geglu (fused)", {gu}, h, [gu, glu](Context& c, const Tensor& dh) {
    c.ops().glu_rows_backward(glu, gu, dh, gu);
    return std::vector<Tensor>{gu};
  });
  return h;
}

}  // namespace

GroupRmsNorm::GroupRmsNorm(std::string name, int64_t features, float eps, bool unit_offset,
                           Communicator* sum_grads_over)
    : Module(std::move(name)),
      eps_(eps),
      unit_offset_(unit_offset),
      sum_grads_over_(split(sum_grads_over) ? sum_grads_over : nullptr),
      weight_(add_parameter("weight", {features}, unit_offset ? ParamInit::zeros() : ParamInit::ones())) {}

Tensor GroupRmsNorm::forward(Context& ctx, const Tensor& x) {
  return fn::rms_norm(ctx, x, *weight_, eps_, sum_grads_over_, unit_offset_);
}

Tensor LogitSoftcap::forward(Context& ctx, const Tensor& x) { return fn::softcap(ctx, x, cap_); }

Tensor EmbeddingScale::forward(Context& ctx, const Tensor& x) {
  // Hugging Face multiplies by the normaliser as a tensor of the hidden dtype.
  uint32_t stored = 0;  // room for one element of any dtype
  store_from_float(&stored, ctx.param_dtype(), 0, scale_);
  return fn::scale(ctx, x, load_as_float(&stored, ctx.param_dtype(), 0));
}

std::unique_ptr<Module> make_norm(std::string name, const BlockConfig& c) {
  const bool rms = c.features.norm == NormKind::kRmsNorm;
  if (rms && c.features.norm_unit_offset) {
    return std::make_unique<GroupRmsNorm>(std::move(name), c.d_model, c.norm_eps, true,
                                          sequence_sharded(c) ? c.tensor_group : nullptr);
  }
  if (sequence_sharded(c)) {
    if (rms) return std::make_unique<SequenceParallelRmsNorm>(std::move(name), c.d_model, c.norm_eps, *c.tensor_group);
    return std::make_unique<SequenceParallelLayerNorm>(std::move(name), c.d_model, *c.tensor_group);
  }
  if (rms) return std::make_unique<RmsNorm>(std::move(name), c.d_model, c.norm_eps);
  return std::make_unique<LayerNorm>(std::move(name), c.d_model);
}

CausalSelfAttention::CausalSelfAttention(std::string name, const BlockConfig& c)
    : Module(std::move(name)),
      rotary_(!c.features.learned_positions),
      n_head_(local_heads(c).q.size),
      n_kv_head_(local_heads(c).kv.size),
      head_dim_(c.head_width()),
      rope_(c.rope) {
  const ModelFeatures& f = c.features;
  ZE_CHECK(c.head_dim > 0 || c.d_model % c.n_head == 0) << c.d_model << " % " << c.n_head;
  ZE_CHECK(!f.fused_qkv || head_dim_ * c.n_head == c.d_model) << "fused q/k/v with heads of " << head_dim_;
  ZE_CHECK(c.n_head % c.kv_heads() == 0) << c.kv_heads() << " key/value heads for " << c.n_head << " query heads";
  ZE_CHECK(!rotary_ || rope_.half * 2 == head_dim_) << "RoPE frequencies for head_dim " << 2 * rope_.half;
  int64_t adapters = 0;
  const Projections p{c, &adapters};
  const int64_t d = c.d_model, a = c.n_head * head_dim_, kv = c.kv_heads() * head_dim_;
  if (!f.fused_qkv) {
    // Head ranges as feature ranges: head h is features [h D, (h + 1) D).
    const HeadRanges heads = local_heads(c);
    const SplitRange q_local{heads.q.offset * head_dim_, heads.q.size * head_dim_};
    const SplitRange kv_local{heads.kv.offset * head_dim_, heads.kv.size * head_dim_};
    if (c.lora.targets_any(c.hf_prefix + this->name() + ".", {"q_proj", "k_proj", "v_proj"})) {
      q_proj_ = adopt_child(p.column(child_name("q_proj"), d, a, q_local, f.qkv_bias));
      k_proj_ = adopt_child(p.column(child_name("k_proj"), d, kv, kv_local, f.qkv_bias));
      v_proj_ = adopt_child(p.column(child_name("v_proj"), d, kv, kv_local, f.qkv_bias));
    } else {
      qkv_proj_ = adopt_child(
          p.fused_column(child_name("qkv_proj"), d, {a, kv, kv}, {q_local, kv_local, kv_local}, f.qkv_bias));
    }
    c_proj_ = adopt_child(p.row(child_name("o_proj"), a, d, q_local, f.o_bias));
    if (f.qk_norm) {
      // Each rank's heads, normalised with the one weight: summed over the tensor group.
      q_norm_ = add_child<GroupRmsNorm>("q_norm", head_dim_, c.norm_eps, f.norm_unit_offset, c.tensor_group);
      k_norm_ = add_child<GroupRmsNorm>("k_norm", head_dim_, c.norm_eps, f.norm_unit_offset, c.tensor_group);
    }
  } else {
    c_attn_ = adopt_child(p.fused_qkv(child_name("c_attn"), d, f.qkv_bias));
    c_proj_ = adopt_child(p.row(child_name("c_proj"), d, d, local_range(d, c.tensor_group), f.o_bias));
  }
  if (c.dropout > 0.0f) {
    resid_dropout_ = add_child<Dropout>("resid_dropout", c.dropout, c.dropout_id,
                                        sequence_sharded(c) ? c.tensor_group : nullptr);
  }
}

void CausalSelfAttention::project(Context& ctx, const Tensor& x, Tensor& q, Tensor& k, Tensor& v) {
  if (c_attn_ != nullptr) {
    // The whole sequence (a sequence-parallel input is gathered by c_attn).
    std::array<Tensor, 3> qkv = fn::split_qkv(ctx, ctx.forward(*c_attn_, x), n_head_, head_dim_);
    q = std::move(qkv[0]), k = std::move(qkv[1]), v = std::move(qkv[2]);
    return;
  }
  if (qkv_proj_ != nullptr) {
    std::array<Tensor, 3> qkv = fn::split_qkv(ctx, ctx.forward(*qkv_proj_, x), n_head_, head_dim_, n_kv_head_);
    q = std::move(qkv[0]), k = std::move(qkv[1]), v = std::move(qkv[2]);
    // Each head's D features normalised (any layout), then rotated in place.
    if (q_norm_ != nullptr) q = ctx.forward(*q_norm_, q), k = ctx.forward(*k_norm_, k);
    if (rotary_) q = fn::rope_(ctx, std::move(q), rope_), k = fn::rope_(ctx, std::move(k), rope_);
    return;
  }
  // [B, T, n D] -> (normalised per head) [B, n, T, D], rotated in place for q and k.
  auto heads = [&](Module& proj, int64_t n, Module* norm, bool rotate) {
    Tensor lin = ctx.forward(proj, x);
    Tensor h = lin.view({lin.dim(0), lin.dim(1), n, head_dim_});
    if (norm != nullptr) h = ctx.forward(*norm, h);
    h = fn::transpose12(ctx, h);
    return rotate ? fn::rope_(ctx, std::move(h), rope_) : h;
  };
  q = heads(*q_proj_, n_head_, q_norm_, rotary_);
  k = heads(*k_proj_, n_kv_head_, k_norm_, rotary_);
  v = heads(*v_proj_, n_kv_head_, nullptr, false);
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

Mlp::Mlp(std::string name, const BlockConfig& c) : Module(std::move(name)), kind_(c.features.mlp) {
  int64_t adapters = 4;  // after the attention's (at most 4)
  const Projections p{c, &adapters};
  const bool bias = c.features.mlp_bias;
  // The hidden features as evenly as can be (the first d_ff mod T ranks one more).
  const SplitRange hidden = local_range(c.d_ff, c.tensor_group);
  if (c.gated_mlp()) {
    if (c.lora.targets_any(c.hf_prefix + this->name() + ".", {"gate_proj", "up_proj"})) {
      gate_proj_ = adopt_child(p.column(child_name("gate_proj"), c.d_model, c.d_ff, hidden, bias));
      up_proj_ = adopt_child(p.column(child_name("up_proj"), c.d_model, c.d_ff, hidden, bias));
    } else {
      gate_up_proj_ =
          adopt_child(p.fused_column(child_name("gate_up_proj"), c.d_model, {c.d_ff, c.d_ff}, {hidden, hidden}, bias));
    }
    c_proj_ = adopt_child(p.row(child_name("down_proj"), c.d_ff, c.d_model, hidden, bias));
  } else {
    c_fc_ = adopt_child(p.column(child_name("c_fc"), c.d_model, c.d_ff, hidden, bias));
    gelu_ = add_child<Gelu>("gelu");
    c_proj_ = adopt_child(p.row(child_name("c_proj"), c.d_ff, c.d_model, hidden, bias));
  }
  if (c.dropout > 0.0f) {
    dropout_ = add_child<Dropout>("dropout", c.dropout, c.dropout_id + 1, sequence_sharded(c) ? c.tensor_group : nullptr);
  }
}

Tensor Mlp::forward(Context& ctx, const Tensor& x) {
  Tensor y;
  if (gate_up_proj_ != nullptr) {
    y = ctx.forward(*c_proj_, gated_fused(ctx, ctx.forward(*gate_up_proj_, x), kind_));
  } else if (gate_proj_ != nullptr) {
    Tensor gate = ctx.forward(*gate_proj_, x);
    Tensor up = ctx.forward(*up_proj_, x);
    y = ctx.forward(*c_proj_, kind_ == MlpKind::kGeGlu ? fn::geglu(ctx, gate, up) : fn::swiglu(ctx, gate, up));
  } else {
    y = ctx.forward(*c_proj_, ctx.forward(*gelu_, ctx.forward(*c_fc_, x)));
  }
  return dropout_ != nullptr ? ctx.forward(*dropout_, y) : y;
}

TransformerBlock::TransformerBlock(std::string name, const BlockConfig& c) : Module(std::move(name)) {
  const bool gpt2 = c.features.gpt2_names;
  ln_1_ = adopt_child(make_norm(child_name(gpt2 ? "ln_1" : "input_layernorm"), c));
  attn_ = add_child<CausalSelfAttention>(gpt2 ? "attn" : "self_attn", c);
  ln_2_ = adopt_child(make_norm(child_name(gpt2 ? "ln_2" : "post_attention_layernorm"), c));
  if (c.moe.sparse_layer(c.layer)) {
    mlp_ = add_child<MoeMlp>("mlp", c, c.layer);
  } else {
    mlp_ = add_child<Mlp>("mlp", c);
  }
}

Tensor TransformerBlock::forward(Context& ctx, const Tensor& x) {
  Tensor x2 = fn::add(ctx, x, ctx.forward(*attn_, ctx.forward(*ln_1_, x)));
  // The MLP's output is ours alone (it does not save it): added into in place.
  return fn::add_(ctx, ctx.forward(*mlp_, ctx.forward(*ln_2_, x2)), x2);
}

}  // namespace zero
