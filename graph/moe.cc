// The sparse MLP and its routing; see moe.h.
#include "graph/moe.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>

#include "comm/communicator.h"
#include "core/check.h"
#include "core/status.h"
#include "core/strings.h"
#include "graph/context.h"
#include "graph/collective_ops.h"
#include "graph/functional.h"
#include "graph/layers.h"
#include "graph/transformer.h"

namespace zero {

bool MoeConfig::sparse_layer(int64_t layer) const {
  if (!enabled()) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end()) return false;
  return decoder_sparse_step > 0 && (layer + 1) % decoder_sparse_step == 0;
}

int64_t MoeConfig::capacity(int64_t tokens) const {
  if (capacity_factor <= 0.0) return 0;
  const double per_expert = static_cast<double>(top_k) * static_cast<double>(tokens) /
                            static_cast<double>(num_experts) * capacity_factor;
  return std::max<int64_t>(min_capacity, static_cast<int64_t>(std::ceil(per_expert)));
}

// ---- the auxiliary losses

std::shared_ptr<const MoeRouting> MoeLosses::add(const void* pass, int64_t layer, std::vector<double> choices,
                                                 std::vector<double> prob_sum, int64_t rows, double lse_sq_sum,
                                                 int64_t dropped) {
  auto r = std::make_shared<MoeRouting>();
  r->layer = layer;
  r->choices = std::move(choices);
  r->prob_sum = std::move(prob_sum);
  r->rows = rows;
  r->lse_sq_sum = lse_sq_sum;
  r->dropped = dropped;
  pending_.push_back(r);
  by_pass_[{pass, layer}] = r;
  return r;
}

std::shared_ptr<const MoeRouting> MoeLosses::find(const void* pass, int64_t layer) const {
  auto it = by_pass_.find({pass, layer});
  return it == by_pass_.end() ? nullptr : it->second;
}

double MoeLosses::finish(double grad_scale) {
  const std::vector<std::shared_ptr<MoeRouting>> done = std::exchange(pending_, {});
  const int64_t e = config_.num_experts;
  std::vector<double> global_choices(e, 0.0), global_probs(e, 0.0);
  int64_t global_rows = 0;
  last_aux_ = last_z_ = 0;
  last_dropped_ = 0;
  last_choices_.clear();
  for (const auto& l : done) {
    for (int64_t j = 0; j < e; ++j) global_choices[j] += l->choices[j], global_probs[j] += l->prob_sum[j];
    global_rows += l->rows;
    last_dropped_ += l->dropped;
    last_choices_.emplace_back(l->layer, l->choices);
    if (l->rows > 0) {
      last_z_ += l->lse_sq_sum / static_cast<double>(l->rows);
      if (config_.aux_loss_scope == AuxLossScope::kPerLayer) {
        double s = 0;
        for (int64_t j = 0; j < e; ++j) s += l->choices[j] * l->prob_sum[j];
        last_aux_ += static_cast<double>(e) * s / (static_cast<double>(l->rows) * static_cast<double>(l->rows));
      }
    }
  }
  const bool global = config_.aux_loss_scope == AuxLossScope::kGlobal;
  if (global && global_rows > 0) {
    double s = 0;
    for (int64_t j = 0; j < e; ++j) s += global_choices[j] * global_probs[j];
    const double r = static_cast<double>(global_rows);
    last_aux_ = static_cast<double>(e) * s / (r * r);
  }
  // The gradients: d aux / d p[n, e] = E f_e / R with f_e the choices'
  // share, over every layer (global) or this one's; the z-loss's factor.
  for (const auto& l : done) {
    if (l->rows == 0) continue;
    if (config_.aux_loss_coef != 0.0f) {
      const std::vector<double>& choices = global ? global_choices : l->choices;
      const double r = static_cast<double>(global ? global_rows : l->rows);
      l->prob_gradient.resize(e);
      for (int64_t j = 0; j < e; ++j) {
        l->prob_gradient[j] =
            static_cast<float>(grad_scale * config_.aux_loss_coef * static_cast<double>(e) * choices[j] / (r * r));
      }
    }
    if (config_.z_loss_coef != 0.0f) {
      l->z_scale = static_cast<float>(grad_scale * config_.z_loss_coef / static_cast<double>(l->rows));
    }
  }
  return config_.aux_loss_coef * last_aux_ + config_.z_loss_coef * last_z_;
}

// Which rows each expert computes: for expert e, rows [offset[e], offset[e]
// + count[e]) of the dispatched tensor, row i the token rows[i] (-1: a row
// of zeros, when no token chose e and pad_empty) and slots[i] its weight's
// index n k + s.
struct DispatchPlan {
  std::vector<int64_t> offset, count;
  std::vector<int32_t> rows, slots;
  std::vector<double> choices;  // per expert, before any drop
  int64_t dropped = 0;
};

namespace {

DispatchPlan make_plan(const std::vector<int32_t>& indices, int64_t n, int64_t k, int64_t e, int64_t capacity,
                       bool pad_empty) {
  DispatchPlan plan;
  std::vector<std::vector<int32_t>> tokens(e), slots(e);
  plan.choices.assign(e, 0.0);
  // First choices of every token, then second ones (DeepSpeed's priority
  // when a capacity drops some), each in token order.
  for (int64_t s = 0; s < k; ++s) {
    for (int64_t t = 0; t < n; ++t) {
      const int32_t x = indices[t * k + s];
      ZE_CHECK(x >= 0 && x < e) << "router chose expert " << x << " of " << e;
      plan.choices[x] += 1.0;
      if (capacity > 0 && static_cast<int64_t>(tokens[x].size()) >= capacity) {
        ++plan.dropped;
        continue;
      }
      tokens[x].push_back(static_cast<int32_t>(t));
      slots[x].push_back(static_cast<int32_t>(t * k + s));
    }
  }
  plan.offset.resize(e);
  plan.count.resize(e);
  for (int64_t x = 0; x < e; ++x) {
    plan.offset[x] = static_cast<int64_t>(plan.rows.size());
    if (tokens[x].empty() && pad_empty) {  // one row of zeros: the expert still runs
      plan.rows.push_back(-1);
      plan.slots.push_back(-1);
    } else {
      plan.rows.insert(plan.rows.end(), tokens[x].begin(), tokens[x].end());
      plan.slots.insert(plan.slots.end(), slots[x].begin(), slots[x].end());
    }
    plan.count[x] = static_cast<int64_t>(plan.rows.size()) - plan.offset[x];
  }
  return plan;
}

Tensor upload_i32(Context& ctx, const std::vector<int32_t>& host) {
  Tensor t = ctx.backend().empty({static_cast<int64_t>(host.size())}, DType::kI32, MemCategory::kActivations);
  ctx.backend().copy(t.data(), host.data(), host.size() * sizeof(int32_t));
  return t;
}

template <typename T>
std::vector<T> download(Context& ctx, const Tensor& t) {
  std::vector<T> host(static_cast<size_t>(t.numel()));
  ctx.backend().copy(host.data(), t.data(), host.size() * sizeof(T));
  return host;
}

// The rows of `src` that `rows` lists (-1: a row of zeros), gathered into one
// buffer, expert j's rows [offset[j], offset[j] + count[j]) handed to it as
// a view (xs[j]; rows_of[j] the matching part of `rows`). Backward adds the
// experts' input gradients into d src, once the last of them (expert 0's,
// which backward reaches last) is in.
struct Dispatched {
  std::vector<Tensor> xs, rows_of;
};

Dispatched dispatch_rows(Context& ctx, const Tensor& src, const Tensor& rows, const std::vector<int64_t>& offset,
                         const std::vector<int64_t>& count) {
  const int64_t e = static_cast<int64_t>(offset.size()), c = src.dim(-1), n = src.dim(0);
  Tensor gathered = ctx.activation({rows.numel(), c});
  ctx.ops().gather_rows(src, rows, gathered);
  Dispatched d;
  d.xs.resize(e);
  d.rows_of.resize(e);
  for (int64_t j = 0; j < e; ++j) {
    d.xs[j] = gathered.slice(offset[j] * c, {count[j], c});
    d.rows_of[j] = rows.slice(offset[j], {count[j]});
  }
  auto pending = std::make_shared<std::vector<Tensor>>(e);
  ctx.record("moe_dispatch (expert 0)", {src}, d.xs[0],
             [pending, rows_of = d.rows_of, n, c](Context& c2, const Tensor& d0) {
               (*pending)[0] = d0;
               Tensor dx = c2.backend().zeros({n, c}, DType::kF32, MemCategory::kActivations);
               for (size_t j = 0; j < pending->size(); ++j) {
                 const Tensor dj = std::move((*pending)[j]);  // dropped once added
                 if (dj.defined()) c2.ops().scatter_add_rows(dj, rows_of[j], dx);
               }
               return std::vector<Tensor>{dx};
             });
  for (int64_t j = 1; j < e; ++j) {
    ctx.record(cat("moe_dispatch (expert ", j, ")"), {}, d.xs[j], [pending, j](Context&, const Tensor& dj) {
      (*pending)[j] = dj;
      return std::vector<Tensor>{};
    });
  }
  return d;
}

// The inverse of dispatch_rows under expert parallelism: out [total, C] with
// row rows_of[j][i] := hs[j] row i (-1: not kept; the other rows 0).
// Backward: each expert's rows of dy.
Tensor collect_rows(Context& ctx, const std::vector<Tensor>& hs, const std::vector<Tensor>& rows_of, int64_t total) {
  const int64_t c = hs[0].dim(-1);
  Tensor out = ctx.backend().zeros({total, c}, DType::kF32, MemCategory::kActivations);
  for (size_t j = 0; j < hs.size(); ++j) ctx.ops().scatter_add_rows(hs[j], rows_of[j], out);
  std::vector<Shape> shapes;  // what backward needs of hs: not their values
  for (const Tensor& h : hs) shapes.push_back(h.shape());
  ctx.record("moe_collect", hs, out, [shapes, rows_of](Context& c2, const Tensor& dy) {
    std::vector<Tensor> grads(shapes.size());
    for (size_t j = 0; j < shapes.size(); ++j) {
      grads[j] = c2.activation(shapes[j]);
      c2.ops().gather_rows(dy, rows_of[j], grads[j]);
    }
    return grads;
  });
  return out;
}

// y [n, C]: each token's kept choices, weighted: hs[j] row i is token
// rows[j][i]'s output for its choice slots[j][i] (-1: a padding row).
Tensor combine(Context& ctx, const std::vector<Tensor>& hs, const std::vector<Tensor>& rows,
               const std::vector<Tensor>& slots, const Tensor& weights, int64_t n) {
  const int64_t c = hs[0].dim(-1), parts = static_cast<int64_t>(hs.size());
  Tensor y = ctx.activation({n, c});
  ctx.ops().fill(y, 0.0f);
  for (int64_t j = 0; j < parts; ++j) ctx.ops().moe_combine(hs[j], rows[j], slots[j], weights, y);
  std::vector<Tensor> inputs = hs;
  inputs.push_back(weights);
  ctx.record("moe_combine", inputs, y, [hs, rows, slots, weights, parts](Context& c2, const Tensor& dy) {
    std::vector<Tensor> grads(parts + 1);
    Tensor dweights = c2.activation(weights.shape());
    c2.ops().fill(dweights, 0.0f);  // a dropped choice's weight gets no gradient
    for (int64_t j = 0; j < parts; ++j) {
      grads[j] = c2.activation(hs[j].shape());
      c2.ops().moe_combine_backward(dy, hs[j], rows[j], slots[j], weights, grads[j], dweights);
    }
    grads[parts] = dweights;
    return grads;
  });
  return y;
}

}  // namespace

absl::Status check_moe_pipeline(const MoeConfig& moe, int stages) {
  if (stages <= 1 || !moe.enabled() || moe.aux_loss_scope != AuxLossScope::kGlobal || moe.aux_loss_coef == 0.0f) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(cat(
      "pipeline.stages: ", stages, " with model.aux_loss_scope \"global\" (router_aux_loss_coef ", moe.aux_loss_coef,
      "): transformers' load-balancing loss couples every sparse layer of a micro-batch, and each stage's backward "
      "would need the later stages' routing; use \"per_layer\" (Megatron's and DeepSpeed-MoE's) with pipeline "
      "stages"));
}

absl::Status check_expert_parallel(const MoeConfig& moe, int ep) {
  if (ep <= 1) return absl::OkStatus();
  if (!moe.enabled()) {
    return absl::InvalidArgumentError(
        cat("model.ep_size: ", ep, " expert-parallel ranks for a model without experts (model.num_experts 0)"));
  }
  if (moe.num_experts % ep != 0) {
    return absl::InvalidArgumentError(cat("model.ep_size: ", ep, " does not divide model.num_experts (",
                                          moe.num_experts, "): each expert-parallel rank holds num_experts / ep_size "
                                          "experts"));
  }
  return absl::OkStatus();
}

// ---- the layer

MoeMlp::MoeMlp(std::string name, const BlockConfig& c, int64_t layer)
    : Module(std::move(name)), moe_(c.moe), layer_(layer), losses_(c.moe_losses) {
  ZE_CHECK(moe_.enabled() && moe_.top_k >= 1 && moe_.top_k <= moe_.num_experts && losses_ != nullptr)
      << "MoE layer " << layer << ": top_k " << moe_.top_k << " of " << moe_.num_experts << " experts";
  gate_ = add_child<Linear>("gate", c.d_model, moe_.num_experts, false, c.init_std);
  // Under tensor parallelism (without sequence parallelism, gpt.h
  // check_gpt_split) every tensor rank runs the whole layer on the same
  // tokens: its gradients are the same on each, as a layer norm's.
  BlockConfig expert = c;
  expert.tensor_group = nullptr;
  expert.sequence_parallel = false;
  expert.d_ff = moe_.expert_d_ff;
  expert.dropout = 0.0f;
  expert.lora = LoraConfig{};
  expert.features.mlp = MlpKind::kSwiGlu;
  expert.features.mlp_bias = false;
  // Expert parallelism: this rank's experts, named by their global index.
  int64_t first = 0, held = moe_.num_experts;
  if (c.expert_group != nullptr && c.expert_group->world_size() > 1) {
    expert_group_ = c.expert_group;
    const int ep = expert_group_->world_size();
    ZE_CHECK(moe_.num_experts % ep == 0) << moe_.num_experts << " experts over " << ep << " ranks";
    held = moe_.num_experts / ep;
    first = expert_group_->rank() * held;
  }
  for (int64_t x = first; x < first + held; ++x) experts_.push_back(add_child<Mlp>(cat("experts.", x), expert));
  if (moe_.shared_expert_d_ff > 0) {
    BlockConfig shared = expert;
    shared.d_ff = moe_.shared_expert_d_ff;
    shared_expert_ = add_child<Mlp>("shared_expert", shared);
    shared_expert_gate_ = add_child<Linear>("shared_expert_gate", c.d_model, 1, false, c.init_std);
  }
}

Tensor MoeMlp::forward(Context& ctx, const Tensor& x) {
  const Shape shape = x.shape();
  const int64_t c = shape[shape.size() - 1], n = x.numel() / c, e = moe_.num_experts, k = moe_.top_k;
  const Tensor xf = x.view({n, c});

  // The router: probabilities, the top k and their weights.
  const Tensor logits = ctx.forward(*gate_, xf);
  Tensor probs = ctx.activation({n, e}), weights = ctx.activation({n, k}), lse = ctx.activation({n});
  Tensor indices = ctx.backend().empty({n, k}, DType::kI32, MemCategory::kActivations);
  ctx.ops().moe_router_forward(logits, k, moe_.norm_topk_prob, probs, indices, weights, lse);
  std::vector<int32_t> host_indices;
  if (ctx.backend().dry_run()) {
    // Nothing was computed: a balanced routing stands in (the planner's sizes).
    host_indices.resize(static_cast<size_t>(n * k));
    for (int64_t i = 0; i < n * k; ++i) host_indices[i] = static_cast<int32_t>(i % e);
  } else {
    host_indices = download<int32_t>(ctx, indices);
  }
  // Under expert parallelism the experts' owners pad (exchanged_experts).
  DispatchPlan plan = make_plan(host_indices, n, k, e, moe_.capacity(n), expert_group_ == nullptr);

  // A training forward (not a recompute) reports its routing to the losses;
  // a recompute's router reads the first pass's.
  std::shared_ptr<const MoeRouting> routing;
  if (ctx.grad_enabled() && !ctx.recomputing()) {
    std::vector<double> prob_sum(e, 0.0);
    double lse_sq = 0;
    if (!ctx.backend().dry_run()) {
      const std::vector<float> p = download<float>(ctx, probs);
      for (int64_t t = 0; t < n; ++t)
        for (int64_t j = 0; j < e; ++j) prob_sum[j] += p[t * e + j];
      for (float z : download<float>(ctx, lse)) lse_sq += static_cast<double>(z) * z;
    }
    routing = losses_->add(&ctx, layer_, plan.choices, std::move(prob_sum), n, lse_sq, plan.dropped);
  } else if (ctx.recomputing()) {
    routing = losses_->find(&ctx, layer_);
  }
  const bool renormalize = moe_.norm_topk_prob;
  ctx.record("moe_router", {logits}, weights,
             [probs, indices, lse, renormalize, routing, e](Context& c2, const Tensor& dweights) {
               Tensor extra;
               if (routing != nullptr && !routing->prob_gradient.empty()) {
                 extra = c2.backend().empty({e}, DType::kF32, MemCategory::kActivations);
                 c2.backend().copy(extra.data(), routing->prob_gradient.data(), e * sizeof(float));
               }
               Tensor dlogits = c2.activation(probs.shape());
               c2.ops().moe_router_backward(probs, indices, dweights, renormalize, extra,
                                            routing != nullptr ? routing->z_scale : 0.0f, lse, dlogits);
               return std::vector<Tensor>{dlogits};
             });

  Tensor y = expert_group_ != nullptr ? exchanged_experts(ctx, xf, plan, weights)
                                       : local_experts(ctx, xf, plan, weights);

  if (shared_expert_ != nullptr) {
    const Tensor s = ctx.forward(*shared_expert_, xf);
    const Tensor g = ctx.forward(*shared_expert_gate_, xf);  // [n, 1]
    Tensor gated = ctx.activation({n, c});
    ctx.ops().sigmoid_gate_forward(g, s, gated);
    ctx.record("sigmoid_gate", {g, s}, gated, [g, s](Context& c2, const Tensor& dy) {
      Tensor dg = c2.activation(g.shape()), ds = c2.activation(s.shape());
      c2.ops().sigmoid_gate_backward(g, s, dy, dg, ds);
      return std::vector<Tensor>{dg, ds};
    });
    y = fn::add_(ctx, std::move(y), gated);
  }
  return y.view(shape);
}

std::vector<Parameter*> MoeMlp::expert_parameters() const {
  std::vector<Parameter*> out;
  for (Module* x : experts_)
    for (Parameter* p : x->parameters()) out.push_back(p);
  return out;
}

Tensor MoeMlp::local_experts(Context& ctx, const Tensor& xf, const DispatchPlan& plan, const Tensor& weights) {
  const int64_t e = moe_.num_experts, n = xf.dim(0);
  const Tensor rows = upload_i32(ctx, plan.rows), slots = upload_i32(ctx, plan.slots);
  Dispatched d = dispatch_rows(ctx, xf, rows, plan.offset, plan.count);
  std::vector<Tensor> hs(e), expert_slots(e);
  for (int64_t j = 0; j < e; ++j) {
    hs[j] = ctx.forward(*experts_[j], d.xs[j]);
    expert_slots[j] = slots.slice(plan.offset[j], {plan.count[j]});
  }
  return combine(ctx, hs, d.rows_of, expert_slots, weights, n);
}

Tensor MoeMlp::exchanged_experts(Context& ctx, const Tensor& xf, const DispatchPlan& plan, const Tensor& weights) {
  Communicator& group = *expert_group_;
  const int w = group.world_size(), me = group.rank();
  const int64_t e = moe_.num_experts, held = static_cast<int64_t>(experts_.size()), n = xf.dim(0);
  // How many rows each rank sends each of this rank's experts.
  std::vector<int32_t> sent(e);
  for (int64_t x = 0; x < e; ++x) sent[x] = static_cast<int32_t>(plan.count[x]);
  std::vector<int32_t> got(e);
  if (ctx.backend().dry_run()) {
    // Nothing is exchanged: every rank routes as this one (evenly).
    for (int s = 0; s < w; ++s)
      for (int64_t j = 0; j < held; ++j) got[s * held + j] = sent[me * held + j];
  } else {
    const Tensor send_counts = upload_i32(ctx, sent);
    Tensor recv_counts = ctx.backend().empty({e}, DType::kI32, MemCategory::kActivations);
    if (absl::Status st = group.all_to_all(send_counts.data(), recv_counts.data(), held, DType::kI32); !st.ok()) {
      // The pass runs on with nothing received; the error is the call's.
      ctx.note(annotate(st, cat(ctx.module_name(), ": expert-parallel all-to-all of the token counts")));
    } else {
      got = download<int32_t>(ctx, recv_counts);
    }
  }
  std::vector<int64_t> send_rows(w, 0), recv_rows(w, 0);
  for (int q = 0; q < w; ++q) {
    for (int64_t j = 0; j < held; ++j) send_rows[q] += sent[q * held + j], recv_rows[q] += got[q * held + j];
  }
  // Out: this rank's tokens, expert after expert, so each owner's rows are
  // one block. In: each sender's block, its rows expert after expert.
  const Tensor rows = upload_i32(ctx, plan.rows), slots = upload_i32(ctx, plan.slots);
  const Tensor out = dispatch_rows(ctx, xf, rows, {0}, {rows.numel()}).xs[0];
  const Tensor in = fn::exchange_rows(ctx, out, send_rows, recv_rows, group);
  // Each expert's rows of `in`, from every sender in turn; one row of zeros
  // for an expert no token chose, so that it runs (and its expert-data
  // group's ZeRO collectives match) on every micro-batch.
  std::vector<int64_t> block_start(static_cast<size_t>(w * held));
  int64_t at = 0;
  for (int s = 0; s < w; ++s)
    for (int64_t j = 0; j < held; ++j) block_start[s * held + j] = at, at += got[s * held + j];
  std::vector<int32_t> order;
  std::vector<int64_t> offset(held), count(held);
  for (int64_t j = 0; j < held; ++j) {
    offset[j] = static_cast<int64_t>(order.size());
    for (int s = 0; s < w; ++s) {
      const int64_t first = block_start[s * held + j];
      for (int64_t i = 0; i < got[s * held + j]; ++i) order.push_back(static_cast<int32_t>(first + i));
    }
    if (static_cast<int64_t>(order.size()) == offset[j]) order.push_back(-1);
    count[j] = static_cast<int64_t>(order.size()) - offset[j];
  }
  Dispatched d = dispatch_rows(ctx, in, upload_i32(ctx, order), offset, count);
  std::vector<Tensor> hs(held);
  for (int64_t j = 0; j < held; ++j) hs[j] = ctx.forward(*experts_[j], d.xs[j]);
  const Tensor back = fn::exchange_rows(ctx, collect_rows(ctx, hs, d.rows_of, at), recv_rows, send_rows, group);
  return combine(ctx, {back}, {rows}, {slots}, weights, n);
}

}  // namespace zero
