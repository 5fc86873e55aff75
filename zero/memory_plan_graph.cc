// The planner's mirror of runtime/graph/context.cc and of the GPT's layers
// (layers.cc, transformer.cc, gpt.cc): what each saves in its Context frame,
// what it allocates and frees, and which workspace the ops it calls request.
// See memory_plan_sim.h.
#include <string>

#include "zero/memory_plan_sim.h"

namespace zero::memsim {

SimTensor ContextSim::forward(Module& m, const SimTensor& x) {
  auto seg_first = !recomputing_ ? first_of_.find(&m) : first_of_.end();
  if (seg_first != first_of_.end()) {
    Segment& s = segments_[seg_first->second];
    s.input = x;
    s.recomputed = false;
    ++no_save_depth_;
    if (offload_) {  // Context::start_copy_out
      forward_segments_.push_back(seg_first->second);
      s.host_input = {sim_.alloc(Tier::kHost, MemCategory::kActivations, x.numel * 4), x.numel};
    }
  }
  hooks_->pre_forward(m);
  Frame* frame = nullptr;
  if (no_save_depth_ == 0) {
    std::deque<Frame>& stack = frames_[&m];
    stack.emplace_back();
    frame = &stack.back();
  }
  current_.push_back(frame);
  SimTensor y = run_forward(m, x);
  current_.pop_back();
  hooks_->post_forward(m);
  if (!recomputing_ && no_save_depth_ > 0) {
    auto seg_last = last_of_.find(&m);
    if (seg_last != last_of_.end()) {
      --no_save_depth_;
      Segment& s = segments_[seg_last->second];
      if (offload_ && s.host_input.storage) s.input = SimTensor();
    }
  }
  return y;
}

void ContextSim::start_copy_back(Segment& s) {
  if (s.input.storage) return;
  s.input = activation(s.host_input.numel);
}

SimTensor ContextSim::backward(Module& m, const SimTensor& dy) {
  auto seg_last = last_of_.find(&m);
  if (seg_last != last_of_.end() && !segments_[seg_last->second].recomputed) {
    Segment& s = segments_[seg_last->second];
    if (offload_ && s.host_input.storage) {  // back on the compute tier, the next one prefetched
      start_copy_back(s);
      if (forward_segments_.size() >= 2) {
        Segment& next = segments_[forward_segments_[forward_segments_.size() - 2]];
        if (next.host_input.storage) start_copy_back(next);
      }
    }
    recompute(s);
  }
  auto it = frames_.find(&m);
  ZE_CHECK(it != frames_.end() && !it->second.empty()) << "planner: backward of " << m.name() << " without forward";
  hooks_->pre_backward(m);
  current_.push_back(&it->second.back());
  SimTensor dx = run_backward(m, dy);
  current_.pop_back();
  it = frames_.find(&m);
  it->second.pop_back();
  if (it->second.empty()) frames_.erase(it);
  hooks_->post_backward(m);
  auto seg_first = first_of_.find(&m);
  if (seg_first != first_of_.end()) {
    Segment& s = segments_[seg_first->second];
    s.input = SimTensor();
    s.host_input = SimTensor();
    s.recomputed = false;
    if (!forward_segments_.empty() && forward_segments_.back() == seg_first->second) forward_segments_.pop_back();
  }
  return dx;
}

void ContextSim::clear() {
  frames_.clear();
  current_.clear();
  for (Segment& s : segments_) {
    s.input = SimTensor();
    s.host_input = SimTensor();
    s.recomputed = false;
  }
  forward_segments_.clear();
  no_save_depth_ = 0;
  recomputing_ = false;
}

void ContextSim::recompute(Segment& s) {
  recomputing_ = true;
  SimTensor x = s.input;
  for (Module* m : s.modules) x = forward(*m, x);
  recomputing_ = false;
  s.recomputed = true;
}

void ContextSim::set_checkpoint_segments(std::vector<std::vector<Module*>> segments) {
  for (auto& mods : segments) {
    if (mods.empty()) continue;
    first_of_[mods.front()] = segments_.size();
    last_of_[mods.back()] = segments_.size();
    segments_.push_back({std::move(mods), SimTensor(), false, SimTensor()});
  }
}

namespace {

// Which of the GPT's layers a module is. The mirrors find children by
// position, as the GPT builds them (gpt.cc, transformer.cc): the root's are
// wte, wpe, [drop], h.0 .. h.{L-1}, ln_f, lm_head; a block's ln_1, attn,
// ln_2, mlp; attention's c_attn, c_proj, [resid_dropout]; the MLP's c_fc,
// gelu, c_proj, [dropout] (the bracketed ones with model dropout > 0).
enum class Kind { kGpt, kEmbedding, kPositional, kBlock, kLayerNorm, kAttention, kMlp, kLinear, kGelu, kDropout, kLmHead };

Kind kind_of(Module& m) {
  if (dynamic_cast<Linear*>(&m)) return Kind::kLinear;
  if (dynamic_cast<LayerNorm*>(&m)) return Kind::kLayerNorm;
  if (dynamic_cast<Gelu*>(&m)) return Kind::kGelu;
  if (dynamic_cast<Dropout*>(&m)) return Kind::kDropout;
  if (dynamic_cast<CausalSelfAttention*>(&m)) return Kind::kAttention;
  if (dynamic_cast<Mlp*>(&m)) return Kind::kMlp;
  if (dynamic_cast<TransformerBlock*>(&m)) return Kind::kBlock;
  if (dynamic_cast<Embedding*>(&m)) return Kind::kEmbedding;
  if (dynamic_cast<PositionalEmbedding*>(&m)) return Kind::kPositional;
  if (dynamic_cast<TiedLMHead*>(&m)) return Kind::kLmHead;
  ZE_CHECK(dynamic_cast<Gpt*>(&m) != nullptr) << "planner: " << m.name() << " is not a GPT layer";
  return Kind::kGpt;
}

}  // namespace

SimTensor ContextSim::run_forward(Module& m, const SimTensor& x) {
  switch (kind_of(m)) {
    case Kind::kGpt: return gpt_forward(m, x);
    case Kind::kEmbedding: {  // Embedding::forward
      SimTensor y = activation(x.numel * g_.d_model);
      save(x);
      return y;
    }
    case Kind::kPositional: {  // PositionalEmbedding::forward: saves nothing
      SimTensor y = activation(x.numel);
      return y;
    }
    case Kind::kBlock: return block_forward(m, x);
    case Kind::kLayerNorm: return layernorm_forward(m, x);
    case Kind::kAttention: return attention_forward(m, x);
    case Kind::kMlp: {  // Mlp::forward
      const auto& c = m.children();
      SimTensor y = forward(*c[2], forward(*c[1], forward(*c[0], x)));
      return c.size() > 3 ? forward(*c[3], y) : y;
    }
    case Kind::kLinear: return linear_forward(m, x);
    case Kind::kGelu: {  // Gelu::forward
      SimTensor y = activation(x.numel);
      save(x);
      return y;
    }
    case Kind::kDropout: {  // Dropout::forward (grad enabled): saves nothing
      SimTensor y = activation(x.numel);
      return y;
    }
    case Kind::kLmHead: {  // TiedLMHead::forward
      const Parameter& table = *m.direct_parameters()[0];
      const int64_t vocab = table.shape()[0], dim = table.shape()[1];
      SimTensor logits = activation(x.numel / dim * vocab);
      ws_.matmul(x.numel, DType::kF32, table.numel(), param_dtype_, logits.numel, DType::kF32, false, vocab);
      save(x);
      return logits;
    }
  }
  return {};
}

SimTensor ContextSim::run_backward(Module& m, const SimTensor& dy) {
  switch (kind_of(m)) {
    case Kind::kGpt: return gpt_backward(m, dy);
    case Kind::kEmbedding: return {};
    case Kind::kPositional: return dy;
    case Kind::kBlock: return block_backward(m, dy);
    case Kind::kLayerNorm: return layernorm_backward(m, dy);
    case Kind::kAttention: return attention_backward(m, dy);
    case Kind::kMlp: {  // Mlp::backward
      const auto& c = m.children();
      if (c.size() > 3) return backward(*c[0], backward(*c[1], backward(*c[2], backward(*c[3], dy))));
      return backward(*c[0], backward(*c[1], backward(*c[2], dy)));
    }
    case Kind::kLinear: return linear_backward(m, dy);
    case Kind::kGelu: {
      const SimTensor& x = saved(0);
      SimTensor dx = activation(x.numel);
      return dx;
    }
    case Kind::kDropout: {  // Dropout::backward
      SimTensor dx = activation(dy.numel);
      return dx;
    }
    case Kind::kLmHead: {  // TiedLMHead::backward
      const Parameter& table = *m.direct_parameters()[0];
      const int64_t vocab = table.shape()[0];
      const SimTensor& x = saved(0);
      SimTensor dx = activation(x.numel);
      ws_.matmul(dy.numel, DType::kF32, table.numel(), param_dtype_, dx.numel, DType::kF32, false, 0);
      ws_.matmul(dy.numel, DType::kF32, x.numel, DType::kF32, table.numel(), grad_dtype_, false, vocab);
      return dx;
    }
  }
  return {};
}

SimTensor ContextSim::linear_forward(Module& m, const SimTensor& x) {
  const Parameter& w = *m.direct_parameters()[0];
  const int64_t out = w.shape()[0], in = w.shape()[1];
  const bool bias = m.direct_parameters().size() > 1;
  SimTensor y = activation(x.numel / in * out);
  ws_.matmul(x.numel, DType::kF32, w.numel(), param_dtype_, y.numel, DType::kF32, bias, out);
  save(x);
  return y;
}

SimTensor ContextSim::linear_backward(Module& m, const SimTensor& dy) {
  const Parameter& w = *m.direct_parameters()[0];
  const SimTensor& x = saved(0);
  SimTensor dx = activation(x.numel);
  ws_.matmul(dy.numel, DType::kF32, w.numel(), param_dtype_, dx.numel, DType::kF32, false, 0);  // dx = dy W
  ws_.matmul(dy.numel, DType::kF32, x.numel, DType::kF32, w.numel(), grad_dtype_, false, 0);    // dW += dy^T x
  return dx;
}

SimTensor ContextSim::layernorm_forward(Module& m, const SimTensor& x) {
  const int64_t cols = m.direct_parameters()[0]->numel(), rows = x.numel / cols;
  SimTensor y = activation(x.numel);
  SimTensor mean = activation(rows);
  SimTensor var = activation(rows);
  ws_.layernorm_forward(cols);
  save(x);
  save(mean);
  save(var);
  return y;
}

SimTensor ContextSim::layernorm_backward(Module& m, const SimTensor& dy) {
  const int64_t cols = m.direct_parameters()[0]->numel();
  const SimTensor& x = saved(0);
  SimTensor dx = activation(x.numel);
  ws_.layernorm_backward(cols);
  return dx;
}

// CausalSelfAttention::forward: q, k, v [B, H, T, D], the T x T probabilities.
SimTensor ContextSim::attention_forward(Module& m, const SimTensor& x) {
  const auto& c = m.children();
  const int64_t nc = x.numel, bhtt = nc / g_.d_model * g_.n_head * seq_;  // B H T T
  SimTensor qkv = forward(*c[0], x);
  SimTensor q = activation(nc), k = activation(nc), v = activation(nc);
  qkv = SimTensor();
  SimTensor probs = activation(bhtt);
  ws_.matmul(nc, DType::kF32, nc, DType::kF32, bhtt, DType::kF32, false, 0);
  SimTensor yh = activation(nc);
  ws_.matmul(bhtt, DType::kF32, nc, DType::kF32, nc, DType::kF32, false, 0);
  SimTensor y = activation(nc);
  save(q);
  save(k);
  save(v);
  save(probs);
  SimTensor out = forward(*c[1], y);
  return c.size() > 2 ? forward(*c[2], out) : out;
}

SimTensor ContextSim::attention_backward(Module& m, const SimTensor& dout) {
  const auto& c = m.children();
  const SimTensor q = saved(0), probs = saved(3);
  const int64_t nc = q.numel, bhtt = probs.numel;
  SimTensor dy = backward(*c[1], c.size() > 2 ? backward(*c[2], dout) : dout);
  SimTensor dyh = activation(nc);
  dy = SimTensor();
  SimTensor dprobs = activation(bhtt);
  ws_.matmul(nc, DType::kF32, nc, DType::kF32, bhtt, DType::kF32, false, 0);  // dP = dY V^T
  SimTensor dv = activation(nc);
  ws_.matmul(bhtt, DType::kF32, nc, DType::kF32, nc, DType::kF32, false, 0);  // dV = P^T dY
  dyh = SimTensor();
  SimTensor dq = activation(nc), dk = activation(nc);
  ws_.matmul(bhtt, DType::kF32, nc, DType::kF32, nc, DType::kF32, false, 0);  // dQ
  ws_.matmul(bhtt, DType::kF32, nc, DType::kF32, nc, DType::kF32, false, 0);  // dK
  dprobs = SimTensor();
  SimTensor dqkv = activation(3 * nc);
  return backward(*c[0], dqkv);
}

// TransformerBlock: x + attn(ln_1(x)), then + mlp(ln_2(.)).
SimTensor ContextSim::block_forward(Module& m, const SimTensor& x) {
  const auto& c = m.children();
  SimTensor a = forward(*c[1], forward(*c[0], x));
  SimTensor x2 = activation(x.numel);
  a = SimTensor();
  SimTensor out = forward(*c[3], forward(*c[2], x2));
  return out;
}

SimTensor ContextSim::block_backward(Module& m, const SimTensor& dy) {
  const auto& c = m.children();
  SimTensor dx2 = backward(*c[2], backward(*c[3], dy));
  SimTensor dx = backward(*c[0], backward(*c[1], dx2));
  return dx;
}

SimTensor ContextSim::gpt_forward(Module& m, const SimTensor& ids) {
  const auto& c = m.children();
  const size_t drop = kind_of(*c[2]) == Kind::kDropout ? 1 : 0;
  const size_t layers = c.size() - 4 - drop;
  SimTensor x = forward(*c[1], forward(*c[0], ids));
  if (drop) x = forward(*c[2], x);
  for (size_t i = 0; i < layers; ++i) x = forward(*c[2 + drop + i], x);
  return forward(*c[3 + drop + layers], forward(*c[2 + drop + layers], x));
}

SimTensor ContextSim::gpt_backward(Module& m, const SimTensor& dlogits) {
  const auto& c = m.children();
  const size_t drop = kind_of(*c[2]) == Kind::kDropout ? 1 : 0;
  const size_t layers = c.size() - 4 - drop;
  SimTensor d = backward(*c[2 + drop + layers], backward(*c[3 + drop + layers], dlogits));
  for (size_t i = layers; i-- > 0;) d = backward(*c[2 + drop + i], d);
  if (drop) d = backward(*c[2], d);
  backward(*c[0], backward(*c[1], d));
  return {};
}

}  // namespace zero::memsim
