// The memory planner; see memory_plan.h.
//
// The simulation below mirrors the engine's code path by path. Each mirror
// function is written in the shape of the function it mirrors (same locals,
// same temporaries inside the same full-expressions, same resets), so that
// a simulated buffer dies exactly where the real tensor dies; when one of
// those functions changes its allocations, its mirror here must change too,
// and the planner-vs-measured tests (tests/zero/memory_plan_test.cc) fail
// until it does.
#include "zero/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "absl/strings/str_format.h"
#include "runtime/base/status.h"
#include "runtime/base/strings.h"
#include "runtime/config/run_config.h"
#include "zero/flat_layout.h"
#include "zero/grad_buckets.h"
#include "zero/param_coordinator.h"
#include "zero/swap_layout.h"

namespace zero {
namespace {

// ---- simulated allocations: a tracked storage that counts itself in and out
// of the plan's own MemoryTracker, like runtime/core/tensor.h's Storage.

class SimStorage {
 public:
  SimStorage(MemoryTracker& tracker, Tier tier, MemCategory category, int64_t bytes)
      : tracker_(tracker), tier_(tier), category_(category), bytes_(bytes) {
    tracker_.add_allocated(tier_, category_, bytes_);
  }
  ~SimStorage() { tracker_.add_allocated(tier_, category_, -bytes_); }
  SimStorage(const SimStorage&) = delete;
  SimStorage& operator=(const SimStorage&) = delete;
  int64_t bytes() const { return bytes_; }

 private:
  MemoryTracker& tracker_;
  Tier tier_;
  MemCategory category_;
  int64_t bytes_;
};
using Buf = std::shared_ptr<SimStorage>;

// A simulated tensor: its storage (null for untracked memory such as the
// batch's token ids) and its element count. Copies share the storage, as
// Tensor handles do.
struct SimTensor {
  Buf storage;
  int64_t numel = 0;
};

struct Sim {
  MemoryTracker tracker;
  Tier tier = Tier::kHost;
  Buf alloc(MemCategory c, int64_t bytes) { return std::make_shared<SimStorage>(tracker, tier, c, bytes); }
  Buf alloc(Tier t, MemCategory c, int64_t bytes) { return std::make_shared<SimStorage>(tracker, t, c, bytes); }
};

// ---- the ops' workspace requests (kernels/workspace_arena.h and the CPU ops
// that carve it: oneDNN matmul and layer norm). oneDNN's own scratchpads are
// not known here and count as 0.

class WorkspaceSim {
 public:
  WorkspaceSim(Sim& sim, DType param_dtype) : sim_(sim), param_dtype_(param_dtype) {}

  // OneDnnMatmul::run: operands not in the GEMM dtype are cast into the
  // workspace; an output oneDNN cannot write directly is staged in fp32.
  void matmul(int64_t a_numel, DType a, int64_t b_numel, DType b, int64_t c_numel, DType c, bool bias,
              int64_t n) {
    const DType gemm = param_dtype_ == DType::kBF16 ? DType::kBF16 : DType::kF32;
    const int64_t g = static_cast<int64_t>(dtype_size(gemm));
    const bool direct_out = c == DType::kF32 || c == gemm;
    carve({a == gemm ? 0 : a_numel * g, b == gemm ? 0 : b_numel * g,
           bias && param_dtype_ != DType::kF32 ? n * 4 : 0, direct_out ? 0 : c_numel * 4});
  }
  // OneDnnLayerNorm: 16-bit gamma and beta staged in fp32 (forward); gamma
  // and both parameter gradients in fp32 (backward).
  void layernorm_forward(int64_t cols) { carve({param_dtype_ != DType::kF32 ? cols * 8 : 0}); }
  void layernorm_backward(int64_t cols) {
    carve({param_dtype_ != DType::kF32 ? cols * 4 : 0, cols * 4, cols * 4});
  }

 private:
  void carve(std::initializer_list<int64_t> sizes) {
    int64_t total = 0;
    for (int64_t b : sizes) total += (b + 255) / 256 * 256;
    if (total == 0) return;
    if (buffer_ == nullptr || buffer_->bytes() < total) {
      buffer_.reset();  // freed before the larger one is allocated, as the arena does
      buffer_ = sim_.alloc(MemCategory::kWorkspace, total + total / 4);
    }
  }

  Sim& sim_;
  DType param_dtype_;
  Buf buffer_;
};

// ---- the engine's module hooks (zero/model_state.h), simulated

class StateSim {
 public:
  virtual ~StateSim() = default;
  virtual void pre_forward(Module& m) {}
  virtual void post_forward(Module& m) {}
  virtual void pre_backward(Module& m) {}
  virtual void post_backward(Module& m) {}
  virtual void begin_forward() {}
  virtual void begin_backward(bool boundary) = 0;
  virtual void end_backward() = 0;
  virtual void apply_step() = 0;
};

// ---- runtime/graph/context.cc and the GPT's layers, simulated

class ContextSim {
 public:
  ContextSim(Sim& sim, WorkspaceSim& ws, const GptConfig& g, int64_t seq, DType param_dtype, DType grad_dtype)
      : sim_(sim), ws_(ws), g_(g), seq_(seq), param_dtype_(param_dtype), grad_dtype_(grad_dtype) {}

  void set_hooks(StateSim* hooks) { hooks_ = hooks; }
  void set_checkpoint_segments(std::vector<std::vector<Module*>> segments) {
    for (auto& mods : segments) {
      if (mods.empty()) continue;
      first_of_[mods.front()] = segments_.size();
      last_of_[mods.back()] = segments_.size();
      segments_.push_back({std::move(mods), SimTensor(), false});
    }
  }

  // Context::forward
  SimTensor forward(Module& m, const SimTensor& x) {
    auto seg_first = !recomputing_ ? first_of_.find(&m) : first_of_.end();
    if (seg_first != first_of_.end()) {
      Segment& s = segments_[seg_first->second];
      s.input = x;
      s.recomputed = false;
      ++no_save_depth_;
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
    if (!recomputing_ && no_save_depth_ > 0 && last_of_.count(&m)) --no_save_depth_;
    return y;
  }

  // Context::backward
  SimTensor backward(Module& m, const SimTensor& dy) {
    auto seg_last = last_of_.find(&m);
    if (seg_last != last_of_.end() && !segments_[seg_last->second].recomputed) recompute(segments_[seg_last->second]);
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
      s.recomputed = false;
    }
    return dx;
  }

  void clear() {
    frames_.clear();
    current_.clear();
    for (Segment& s : segments_) {
      s.input = SimTensor();
      s.recomputed = false;
    }
    no_save_depth_ = 0;
    recomputing_ = false;
  }

  SimTensor activation(int64_t numel) { return {sim_.alloc(MemCategory::kActivations, numel * 4), numel}; }

 private:
  struct Frame {
    std::vector<SimTensor> saved;
  };
  struct Segment {
    std::vector<Module*> modules;
    SimTensor input;
    bool recomputed = false;
  };

  void recompute(Segment& s) {
    recomputing_ = true;
    SimTensor x = s.input;
    for (Module* m : s.modules) x = forward(*m, x);
    recomputing_ = false;
    s.recomputed = true;
  }

  void save(const SimTensor& t) {
    if (current_.back() != nullptr) current_.back()->saved.push_back(t);
  }
  const SimTensor& saved(size_t i) const { return current_.back()->saved.at(i); }

  // Which layer a module is, by its parameters and children (the GPT's tree
  // in runtime/graph/gpt.cc): dispatch to the mirror of its code.
  SimTensor run_forward(Module& m, const SimTensor& x);
  SimTensor run_backward(Module& m, const SimTensor& dy);

  SimTensor linear_forward(Module& m, const SimTensor& x);
  SimTensor linear_backward(Module& m, const SimTensor& dy);
  SimTensor layernorm_forward(Module& m, const SimTensor& x);
  SimTensor layernorm_backward(Module& m, const SimTensor& dy);
  SimTensor attention_forward(Module& m, const SimTensor& x);
  SimTensor attention_backward(Module& m, const SimTensor& dout);
  SimTensor block_forward(Module& m, const SimTensor& x);
  SimTensor block_backward(Module& m, const SimTensor& dy);
  SimTensor gpt_forward(Module& m, const SimTensor& ids);
  SimTensor gpt_backward(Module& m, const SimTensor& dlogits);

  Sim& sim_;
  WorkspaceSim& ws_;
  GptConfig g_;
  int64_t seq_;
  DType param_dtype_, grad_dtype_;
  StateSim* hooks_ = nullptr;
  std::vector<Segment> segments_;
  std::unordered_map<const Module*, size_t> first_of_, last_of_;
  int no_save_depth_ = 0;
  bool recomputing_ = false;
  std::unordered_map<const Module*, std::deque<Frame>> frames_;
  std::vector<Frame*> current_;
};

// Which of the GPT's layers a module is. The mirrors find children by
// position, as the GPT builds them (gpt.cc, transformer.cc): the root's are
// wte, wpe, h.0 .. h.{L-1}, ln_f, lm_head; a block's ln_1, attn, ln_2, mlp;
// attention's c_attn, c_proj; the MLP's c_fc, gelu, c_proj.
enum class Kind { kGpt, kEmbedding, kPositional, kBlock, kLayerNorm, kAttention, kMlp, kLinear, kGelu, kLmHead };

Kind kind_of(Module& m) {
  if (dynamic_cast<Linear*>(&m)) return Kind::kLinear;
  if (dynamic_cast<LayerNorm*>(&m)) return Kind::kLayerNorm;
  if (dynamic_cast<Gelu*>(&m)) return Kind::kGelu;
  if (dynamic_cast<CausalSelfAttention*>(&m)) return Kind::kAttention;
  if (dynamic_cast<Mlp*>(&m)) return Kind::kMlp;
  if (dynamic_cast<TransformerBlock*>(&m)) return Kind::kBlock;
  if (dynamic_cast<Embedding*>(&m)) return Kind::kEmbedding;
  if (dynamic_cast<PositionalEmbedding*>(&m)) return Kind::kPositional;
  if (dynamic_cast<TiedLMHead*>(&m)) return Kind::kLmHead;
  ZE_CHECK(dynamic_cast<Gpt*>(&m) != nullptr) << "planner: " << m.name() << " is not a GPT layer";
  return Kind::kGpt;
}

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
      return forward(*c[2], forward(*c[1], forward(*c[0], x)));
    }
    case Kind::kLinear: return linear_forward(m, x);
    case Kind::kGelu: {  // Gelu::forward
      SimTensor y = activation(x.numel);
      save(x);
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
      return backward(*c[0], backward(*c[1], backward(*c[2], dy)));
    }
    case Kind::kLinear: return linear_backward(m, dy);
    case Kind::kGelu: {
      const SimTensor& x = saved(0);
      SimTensor dx = activation(x.numel);
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
  return forward(*c[1], y);
}

SimTensor ContextSim::attention_backward(Module& m, const SimTensor& dout) {
  const auto& c = m.children();
  const SimTensor q = saved(0), probs = saved(3);
  const int64_t nc = q.numel, bhtt = probs.numel;
  SimTensor dy = backward(*c[1], dout);
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
  const size_t layers = c.size() - 4;
  SimTensor x = forward(*c[1], forward(*c[0], ids));
  for (size_t i = 0; i < layers; ++i) x = forward(*c[2 + i], x);
  return forward(*c[3 + layers], forward(*c[2 + layers], x));
}

SimTensor ContextSim::gpt_backward(Module& m, const SimTensor& dlogits) {
  const auto& c = m.children();
  const size_t layers = c.size() - 4;
  SimTensor d = backward(*c[2 + layers], backward(*c[3 + layers], dlogits));
  for (size_t i = layers; i-- > 0;) d = backward(*c[2 + i], d);
  backward(*c[0], backward(*c[1], d));
  return {};
}

// ---- zero/state_buffers.cc: add_reduced stages a 16-bit reduced part in fp32.
void simulate_add_reduced(Sim& sim, int64_t numel, DType grad_dtype) {
  if (numel == 0 || grad_dtype == DType::kF32) return;
  Buf staged = sim.alloc(MemCategory::kWorkspace, numel * 4);
}

int optimizer_state_arrays(const OptimizerConfig& o) {
  if (o.type == "SGD") return o.momentum != 0.0f ? 1 : 0;
  return 2;  // Adam, AdamW: exp_avg, exp_avg_sq
}

// The fp32 master (unless it aliases fp32 parameters at stage 0) and the
// optimizer's states for `numel` elements: in memory, or in a swap file with
// host swap buffers (offload_optimizer.device = "nvme", zero/swap_layout.h).
std::vector<Buf> allocate_optimizer_state(Sim& sim, const EngineConfig& e, int64_t numel, bool separate_master) {
  std::vector<Buf> store;
  const int arrays = (separate_master ? 1 : 0) + optimizer_state_arrays(e.optimizer);
  if (e.zero.offload_optimizer.device == OffloadDevice::kNvme) {
    const SwapLayout layout = SwapLayout::make(numel, e.zero.sub_group_size, arrays);
    store.push_back(sim.alloc(Tier::kNvme, MemCategory::kOptimizerState, layout.file_bytes()));
    store.push_back(sim.alloc(Tier::kHost, MemCategory::kSwapBuffers,
                              layout.buffer_bytes(e.zero.offload_optimizer.buffer_count)));
    return store;
  }
  for (int i = 0; i < arrays; ++i) store.push_back(sim.alloc(MemCategory::kOptimizerState, numel * 4));
  return store;
}

// ---- zero/flat_model_state.cc (stages 0-2), simulated

class FlatStateSim final : public StateSim {
 public:
  FlatStateSim(Sim& sim, Module& model, const EngineConfig& e, int world, int rank, MemoryPlan& plan)
      : sim_(sim), e_(e), world_(world), rank_(rank), stage_(e.zero.stage) {
    layout_ = FlatLayout(model.parameters(), stage_ == 0 ? 1 : 2 * world);
    const int64_t n = layout_.numel();
    part_ = stage_ == 0 ? n : n / world;
    gsize_ = static_cast<int64_t>(dtype_size(e.gradient_dtype()));
    params_ = sim.alloc(MemCategory::kParameters, n * static_cast<int64_t>(dtype_size(e.param_dtype)));
    grads_ = sim.alloc(MemCategory::kGradients, (stage_ == 2 ? part_ : n) * gsize_);
    const bool aliased = stage_ == 0 && e.param_dtype == DType::kF32;
    store_ = allocate_optimizer_state(sim, e, part_, !aliased);
    // On a device, initial values go up through an fp32 staging buffer per
    // parameter (upload_fp32), one at a time.
    if (sim.tier != Tier::kHost) {
      int64_t largest = 0;
      for (const FlatSegment& seg : layout_.segments()) largest = std::max(largest, seg.param->numel());
      Buf staging = sim.alloc(MemCategory::kWorkspace, largest * 4);
    }
    buckets_ = plan_grad_buckets(layout_, e.zero.reduce_bucket_size);
    for (size_t b = 0; b < buckets_.size(); ++b)
      for (Parameter* p : buckets_[b].params) bucket_of_[p] = b;
    uses_ = count_parameter_uses(model);
    bucket_buffers_.resize(buckets_.size());
    plan.flat_numel = n;
    plan.partition_numel = part_;
    plan.optimizer_arrays = (aliased ? 0 : 1) + optimizer_state_arrays(e.optimizer);
  }

  void begin_backward(bool boundary) override {
    boundary_ = boundary;
    uses_left_ = uses_;
    params_pending_.assign(buckets_.size(), 0);
    for (size_t b = 0; b < buckets_.size(); ++b) params_pending_[b] = static_cast<int>(buckets_[b].params.size());
    launched_.assign(buckets_.size(), false);
  }

  void pre_backward(Module& m) override {
    if (stage_ != 2) return;
    for (Parameter* p : m.direct_parameters()) {
      if (grad_defined_.count(p)) continue;
      const size_t b = bucket_of_.at(p);
      if (bucket_buffers_[b] == nullptr)
        bucket_buffers_[b] = sim_.alloc(MemCategory::kCommBuffers, (buckets_[b].end - buckets_[b].begin) * gsize_);
      for (Parameter* q : buckets_[b].params) grad_defined_.insert(q);
    }
  }

  void post_backward(Module& m) override {
    for (Parameter* p : m.direct_parameters()) {
      if (--uses_left_[p] != 0) continue;
      const size_t b = bucket_of_.at(p);
      if (--params_pending_[b] == 0 && reduces_now()) launch(b);
    }
  }

  void end_backward() override {
    if (reduces_now()) {
      for (size_t b = 0; b < buckets_.size(); ++b)
        if (!launched_[b]) launch(b);
    }
    finish_all();
  }

  void apply_step() override {}  // the update and the all-gather work in place

 private:
  struct InFlight {
    Buf bucket, recv;
    int64_t recv_numel = 0;
  };
  bool reduces_now() const { return stage_ == 2 || boundary_; }

  void launch(size_t b) {
    const GradBucket& bucket = buckets_[b];
    launched_[b] = true;
    InFlight f;
    if (stage_ == 2) {
      Buf& buf = bucket_buffers_[b];
      if (buf == nullptr) buf = sim_.alloc(MemCategory::kCommBuffers, (bucket.end - bucket.begin) * gsize_);
      const int64_t mine = partition_counts(bucket.begin, bucket.end, part_, world_)[rank_];
      f.bucket = buf;
      f.recv_numel = mine;
      if (e_.zero.reduce_scatter && world_ > 1)
        f.recv = sim_.alloc(MemCategory::kCommBuffers, std::max<int64_t>(mine, 1) * gsize_);
      buf = nullptr;
      for (Parameter* q : bucket.params) grad_defined_.erase(q);
    }
    in_flight_.push_back(std::move(f));
    if (!e_.zero.overlap_comm) finish_all();
  }

  void finish_all() {
    while (!in_flight_.empty()) {
      if (stage_ == 2) simulate_add_reduced(sim_, in_flight_.front().recv_numel, e_.gradient_dtype());
      in_flight_.pop_front();
    }
  }

  Sim& sim_;
  const EngineConfig& e_;
  int world_, rank_, stage_;
  FlatLayout layout_;
  int64_t part_ = 0, gsize_ = 0;
  Buf params_, grads_;
  std::vector<Buf> store_;
  std::vector<GradBucket> buckets_;
  std::vector<Buf> bucket_buffers_;
  std::unordered_map<const Parameter*, int> uses_, uses_left_;
  std::unordered_map<const Parameter*, size_t> bucket_of_;
  std::unordered_set<const Parameter*> grad_defined_;
  std::vector<int> params_pending_;
  std::vector<bool> launched_;
  std::deque<InFlight> in_flight_;
  bool boundary_ = false;
};

// ---- zero/param_coordinator.cc, simulated: which gathered buffers exist when.

class CoordinatorSim {
 public:
  CoordinatorSim(Sim& sim, const ZeroConfig& config, int world, DType dtype, const Stage3Partitions& parts)
      : sim_(sim), config_(config), world_(world), dsize_(static_cast<int64_t>(dtype_size(dtype))), parts_(parts.parts) {}

  void begin_iteration() {
    if (trace_state_ == TraceState::kRecord && !trace_.empty()) finish_trace();
    if (trace_state_ == TraceState::kInvalid) {
      trace_.clear();
      trace_state_ = TraceState::kRecord;
    }
    position_ = 0;
  }

  void fetch(Module& m, bool backward) {
    record(m, backward);
    for (Parameter* p : m.direct_parameters()) start_gather(*p);
    if (trace_state_ == TraceState::kComplete) prefetch_after(position_);
  }

  void release(Module& m) {
    for (Parameter* p : m.direct_parameters()) {
      if (parts_.at(p).persistent) continue;
      if (reused_soon(p, position_)) continue;
      drop(*p);
    }
  }

  void release_all() {
    std::vector<const Parameter*> held;
    for (auto& [p, slot] : slots_)
      if (!parts_.at(p).persistent) held.push_back(p);
    for (const Parameter* p : held) drop(*p);
  }

  void gather_persistent() {
    std::vector<const Parameter*> persistent;
    for (auto& [p, part] : parts_)
      if (part.persistent) persistent.push_back(p);
    for (const Parameter* p : persistent)
      if (!slots_.count(p)) start_gather(*p);
  }

 private:
  enum class TraceState { kRecord, kComplete, kInvalid };
  struct Step {
    Module* module;
    bool backward;
  };

  void start_gather(const Parameter& p) {
    if (slots_.count(&p)) return;
    const ParamPartition& part = parts_.at(&p);
    slots_[&p] = sim_.alloc(part.persistent ? MemCategory::kParameters : MemCategory::kCommBuffers,
                            world_ * part.chunk * dsize_);
    if (!part.persistent) live_elems_ += world_ * part.chunk;
  }

  void drop(const Parameter& p) {
    auto it = slots_.find(&p);
    if (it == slots_.end()) return;
    live_elems_ -= world_ * parts_.at(&p).chunk;
    slots_.erase(it);
  }

  int64_t gather_elements(const Module& m) const {
    int64_t n = 0;
    for (const Parameter* p : m.direct_parameters()) {
      const ParamPartition& part = parts_.at(p);
      if (!part.persistent) n += world_ * part.chunk;
    }
    return n;
  }

  void finish_trace() {
    trace_state_ = TraceState::kComplete;
    prefix_.assign(trace_.size() + 1, 0);
    for (size_t i = 0; i < trace_.size(); ++i) prefix_[i + 1] = prefix_[i] + gather_elements(*trace_[i].module);
  }

  void record(Module& m, bool backward) {
    if (trace_state_ == TraceState::kRecord) {
      trace_.push_back({&m, backward});
      return;
    }
    if (trace_state_ != TraceState::kComplete) return;
    if (position_ < trace_.size() && trace_[position_].module == &m && trace_[position_].backward == backward) {
      ++position_;
      return;
    }
    trace_state_ = TraceState::kInvalid;
  }

  void prefetch_after(size_t position) {
    const int64_t budget = std::min(config_.prefetch_bucket_size, config_.max_live_parameters - live_elems_);
    int64_t issued = 0;
    for (size_t j = position; j < trace_.size() && issued < budget; ++j) {
      for (Parameter* p : trace_[j].module->direct_parameters()) {
        if (issued >= budget) break;
        const ParamPartition& part = parts_.at(p);
        if (part.persistent || slots_.count(p)) continue;
        start_gather(*p);
        issued += world_ * part.chunk;
      }
    }
  }

  bool reused_soon(const Parameter* p, size_t position) const {
    if (trace_state_ != TraceState::kComplete) return false;
    for (size_t j = position; j < trace_.size(); ++j) {
      if (prefix_[j] - prefix_[position] > config_.max_reuse_distance) return false;
      for (const Parameter* q : trace_[j].module->direct_parameters())
        if (q == p) return true;
    }
    return false;
  }

  Sim& sim_;
  ZeroConfig config_;
  int world_;
  int64_t dsize_;
  const std::unordered_map<const Parameter*, ParamPartition>& parts_;
  std::unordered_map<const Parameter*, Buf> slots_;
  int64_t live_elems_ = 0;
  TraceState trace_state_ = TraceState::kRecord;
  std::vector<Step> trace_;
  std::vector<int64_t> prefix_;
  size_t position_ = 0;
};

// ---- zero/stage3_model_state.cc, simulated

class Stage3StateSim final : public StateSim {
 public:
  Stage3StateSim(Sim& sim, Module& model, const EngineConfig& e, int world, MemoryPlan& plan)
      : sim_(sim), e_(e), world_(world), params_(model.parameters()),
        parts_(plan_stage3_partitions(params_, world, e.zero)) {
    const int64_t s = parts_.shard_elems;
    gsize_ = static_cast<int64_t>(dtype_size(e.gradient_dtype()));
    param_shard_ = sim.alloc(MemCategory::kParameters, s * static_cast<int64_t>(dtype_size(e.param_dtype)));
    grad_shard_ = sim.alloc(MemCategory::kGradients, s * gsize_);
    store_ = allocate_optimizer_state(sim, e, s, /*separate_master=*/true);
    if (sim.tier != Tier::kHost) {  // per-chunk fp32 staging of the initial values (upload_fp32)
      int64_t largest = 0;
      for (const auto& [p, part] : parts_.parts) largest = std::max(largest, part.chunk);
      Buf staging = sim.alloc(MemCategory::kWorkspace, largest * 4);
    }
    coordinator_ = std::make_unique<CoordinatorSim>(sim, e.zero, world, e.param_dtype, parts_);
    coordinator_->gather_persistent();
    uses_ = count_parameter_uses(model);
    plan.flat_numel = 0;
    plan.partition_numel = s;
    plan.optimizer_arrays = 1 + optimizer_state_arrays(e.optimizer);
  }

  void pre_forward(Module& m) override { coordinator_->fetch(m, false); }
  void post_forward(Module& m) override { coordinator_->release(m); }
  void begin_forward() override { coordinator_->begin_iteration(); }
  void begin_backward(bool) override { uses_left_ = uses_; }

  void pre_backward(Module& m) override {
    coordinator_->fetch(m, true);
    for (Parameter* p : m.direct_parameters()) {
      if (full_grads_.count(p)) continue;
      full_grads_[p] = sim_.alloc(MemCategory::kCommBuffers, world_ * parts_.parts.at(p).chunk * gsize_);
    }
  }

  void post_backward(Module& m) override {
    for (Parameter* p : m.direct_parameters())
      if (--uses_left_[p] == 0) reduce(*p);
    coordinator_->release(m);
  }

  void end_backward() override {
    for (Parameter* p : params_) {
      if (uses_left_[p] > 0) {
        uses_left_[p] = 0;
        if (!full_grads_.count(p))
          full_grads_[p] = sim_.alloc(MemCategory::kCommBuffers, world_ * parts_.parts.at(p).chunk * gsize_);
        reduce(*p);
      }
    }
    while (!in_flight_.empty()) finish_one();
  }

  void apply_step() override {
    coordinator_->release_all();
    coordinator_->gather_persistent();
  }

 private:
  struct InFlight {
    Buf full_grad, recv;
    int64_t elems = 0, chunk = 0;
  };

  void reduce(Parameter& p) {
    const int64_t chunk = parts_.parts.at(&p).chunk;
    InFlight f;
    f.full_grad = std::move(full_grads_.at(&p));
    full_grads_.erase(&p);
    f.elems = world_ * chunk;
    f.chunk = chunk;
    if (e_.zero.reduce_scatter && world_ > 1) f.recv = sim_.alloc(MemCategory::kCommBuffers, chunk * gsize_);
    in_flight_elems_ += f.elems;
    in_flight_.push_back(std::move(f));
    const int64_t cap = e_.zero.overlap_comm ? e_.zero.reduce_bucket_size : 0;
    while (!in_flight_.empty() && in_flight_elems_ > cap) finish_one();
  }

  void finish_one() {
    InFlight f = std::move(in_flight_.front());
    in_flight_.pop_front();
    in_flight_elems_ -= f.elems;
    simulate_add_reduced(sim_, f.chunk, e_.gradient_dtype());
  }

  Sim& sim_;
  const EngineConfig& e_;
  int world_;
  std::vector<Parameter*> params_;
  Stage3Partitions parts_;
  int64_t gsize_ = 0;
  Buf param_shard_, grad_shard_;
  std::vector<Buf> store_;
  std::unique_ptr<CoordinatorSim> coordinator_;
  std::unordered_map<const Parameter*, int> uses_, uses_left_;
  std::unordered_map<const Parameter*, Buf> full_grads_;
  std::deque<InFlight> in_flight_;
  int64_t in_flight_elems_ = 0;
};

std::array<std::array<int64_t, kNumMemCategories>, kNumTiers> currents(const MemorySnapshot& s) {
  std::array<std::array<int64_t, kNumMemCategories>, kNumTiers> out{};
  for (int t = 0; t < kNumTiers; ++t)
    for (int c = 0; c < kNumMemCategories; ++c) out[t][c] = s.by_category[t][c].current;
  return out;
}

}  // namespace

absl::StatusOr<MemoryPlan> plan_memory(const PlanInput& in) {
  const EngineConfig& e = in.engine;
  const GptConfig& g = in.model;
  const int64_t seq = in.seq_len > 0 ? in.seq_len : g.seq_len;
  if (in.world < 1) return absl::InvalidArgumentError(cat("world size ", in.world, " must be at least 1"));
  if (in.rank < 0 || in.rank >= in.world)
    return absl::InvalidArgumentError(cat("rank ", in.rank, " is not in 0..", in.world - 1));
  if (e.zero.stage < 0 || e.zero.stage > 3)
    return absl::InvalidArgumentError(cat("zero_optimization.stage: ", e.zero.stage, " does not exist (0-3)"));
  if (g.n_layer < 1 || g.n_head < 1 || g.d_model < 1 || g.vocab_size < 1 || g.d_model % g.n_head != 0)
    return absl::InvalidArgumentError(cat("model: n_layer ", g.n_layer, ", n_head ", g.n_head, ", d_model ", g.d_model,
                                          ", vocab_size ", g.vocab_size, " is not a GPT (d_model divisible by n_head)"));
  if (seq < 1 || seq > g.seq_len)
    return absl::InvalidArgumentError(cat("sequence length ", seq, " must be between 1 and model.seq_len ", g.seq_len));
  if (in.micro_batch < 1)
    return absl::InvalidArgumentError(cat("train_micro_batch_size_per_gpu: ", in.micro_batch, " must be > 0"));
  if (e.gradient_accumulation_steps < 1)
    return absl::InvalidArgumentError(
        cat("gradient_accumulation_steps: ", e.gradient_accumulation_steps, " must be > 0"));
  if (e.zero.offload_param.device == OffloadDevice::kNvme)
    return absl::UnimplementedError("zero_optimization.offload_param.device: \"nvme\" is not planned (not built yet)");

  MemoryPlan plan;
  plan.world = in.world;
  plan.rank = in.rank;
  plan.compute_tier = in.compute_tier;
  Gpt model(g);
  plan.num_parameters = g.num_parameters();

  Sim sim;
  sim.tier = in.compute_tier;
  std::unique_ptr<StateSim> state;
  if (e.zero.stage == 3) state = std::make_unique<Stage3StateSim>(sim, model, e, in.world, plan);
  else state = std::make_unique<FlatStateSim>(sim, model, e, in.world, in.rank, plan);
  plan.after_init = currents(sim.tracker.snapshot());

  WorkspaceSim ws(sim, e.param_dtype);
  ContextSim ctx(sim, ws, g, seq, e.param_dtype, e.gradient_dtype());
  ctx.set_hooks(state.get());
  if (const std::optional<int64_t> k = e.activation_checkpointing.number_checkpoints) {
    const std::vector<Module*> layers = model.checkpointable_layers();
    if (*k < 1 || *k > static_cast<int64_t>(layers.size())) {
      return absl::InvalidArgumentError(cat("activation_checkpointing.number_checkpoints: ", *k,
                                            " must be between 1 and the model's ", layers.size(), " layers"));
    }
    // As Engine::init: K contiguous segments of (as) equal (as possible) length.
    std::vector<std::vector<Module*>> segments(static_cast<size_t>(*k));
    for (size_t i = 0; i < layers.size(); ++i) segments[i * static_cast<size_t>(*k) / layers.size()].push_back(layers[i]);
    ctx.set_checkpoint_segments(std::move(segments));
    plan.checkpoint_segments = *k;
  }

  // Engine::forward / backward / step, micro-step by micro-step.
  // The batch is the loader's host memory (untracked); Engine::to_compute
  // copies it into activations when the backend computes elsewhere.
  const int64_t tokens = in.micro_batch * seq;
  auto to_compute = [&](int64_t numel) {
    return SimTensor{in.compute_tier == Tier::kHost ? nullptr : sim.alloc(MemCategory::kActivations, numel * 4), numel};
  };
  SimTensor pending_dlogits;
  for (int step = 0; step < std::max(1, in.optimizer_steps); ++step) {
    for (int64_t micro = 0; micro < e.gradient_accumulation_steps; ++micro) {
      {  // forward
        ctx.clear();
        state->begin_forward();
        SimTensor logits = ctx.forward(model, to_compute(tokens));
        SimTensor losses = ctx.activation(logits.numel / g.vocab_size);
        { const SimTensor targets = to_compute(tokens); }  // cross_entropy's operand
        pending_dlogits = logits;
      }
      {  // backward
        SimTensor dlogits = std::move(pending_dlogits);
        pending_dlogits = SimTensor();
        state->begin_backward(micro + 1 == e.gradient_accumulation_steps);
        ctx.backward(model, dlogits);
        state->end_backward();
      }
      if (micro + 1 == e.gradient_accumulation_steps) state->apply_step();
    }
  }

  const MemorySnapshot s = sim.tracker.snapshot();
  for (int t = 0; t < kNumTiers; ++t) {
    for (int c = 0; c < kNumMemCategories; ++c) plan.peak[t][c] = s.by_category[t][c].peak;
    plan.total_peak[t] = s.allocated[t].peak;
  }
  if (plan.at(in.compute_tier, MemCategory::kWorkspace) > 0) {
    plan.notes.push_back(in.compute_tier == Tier::kHost
                             ? "workspace: the ops' staging buffers; oneDNN's own scratchpads come on top"
                             : "workspace: the CPU ops' staging requests; the CUDA ops' differ (not checked on a GPU)");
  }
  if (e.zero.stage == 3)
    plan.notes.push_back("stage 3: peaks of a run of 2+ steps (from the second step on, the coordinator prefetches)");
  return plan;
}

PlanInput plan_input(const RunConfig& config, int world, int rank) {
  PlanInput in;
  in.model = config.model.gpt;
  in.micro_batch = config.engine.micro_batch_size;
  in.seq_len = config.model.gpt.seq_len;
  in.engine = config.engine;
  in.world = world;
  in.rank = rank;
  return in;
}

absl::StatusOr<MemoryPlan> plan_memory(const RunConfig& config, int world, int rank) {
  if (config.model.type != "gpt")
    return absl::InvalidArgumentError(cat("model.type: \"", config.model.type, "\" cannot be planned (only \"gpt\")"));
  return plan_memory(plan_input(config, world, rank));
}

std::string format_memory_plan(const MemoryPlan& plan, const std::string& title) {
  std::vector<int> tiers;
  for (int t = 0; t < kNumTiers; ++t)
    if (t == static_cast<int>(plan.compute_tier) || plan.total_peak[t] > 0) tiers.push_back(t);
  auto cell = [](int64_t b) {
    return b == 0 ? std::string("0") : absl::StrFormat("%d (%s)", b, format_bytes(b));
  };
  auto row = [&](std::string_view label, auto&& value_of) {
    std::string line = absl::StrFormat("%-16s", label);
    for (int t : tiers) line += absl::StrFormat("  %-28s", value_of(t));
    while (!line.empty() && line.back() == ' ') line.pop_back();
    return line + "\n";
  };
  std::string out = title + "\n";
  out += row("category", [](int t) { return std::string(tier_name(static_cast<Tier>(t))); });
  for (int c = 0; c < kNumMemCategories; ++c)
    out += row(mem_category_name(static_cast<MemCategory>(c)), [&](int t) { return cell(plan.peak[t][c]); });
  out += row("total (peak)", [&](int t) { return cell(plan.total_peak[t]); });
  for (const std::string& n : plan.notes) out += "note: " + n + "\n";
  return out;
}

// ---- analytic model states

ModelStateBytes model_state_bytes(double params, int64_t world, int stage, const ModelStateFactors& f) {
  const double w = static_cast<double>(world);
  ModelStateBytes b{f.param_bytes * params, f.grad_bytes * params, f.optimizer_bytes * params};
  if (stage >= 1) b.optimizer_state /= w;
  if (stage >= 2) b.gradients /= w;
  if (stage >= 3) b.parameters /= w;
  return b;
}

ModelStateFactors model_state_factors(const EngineConfig& e) {
  const bool aliased = e.zero.stage == 0 && e.param_dtype == DType::kF32;
  return {static_cast<double>(dtype_size(e.param_dtype)), static_cast<double>(dtype_size(e.gradient_dtype())),
          4.0 * ((aliased ? 0 : 1) + optimizer_state_arrays(e.optimizer))};
}

ModelStateBytes engine_model_state_bytes(int64_t params, int64_t world, int stage, const EngineConfig& engine) {
  EngineConfig e = engine;
  e.zero.stage = stage;
  const ModelStateFactors f = model_state_factors(e);
  const int64_t pad = stage == 0 ? 1 : stage == 3 ? world : 2 * world;
  const int64_t padded = (params + pad - 1) / pad * pad;
  ModelStateBytes b = model_state_bytes(static_cast<double>(padded), world, stage, f);
  return b;
}

double deepspeed_zero2_estimate(double params, int64_t world) {
  return 4.0 * params + std::floor(16.0 * params / static_cast<double>(world));
}

double deepspeed_zero3_estimate(double params, double largest_layer_params, int64_t world) {
  return 4.0 * largest_layer_params + std::floor(18.0 * params / static_cast<double>(world));
}

}  // namespace zero
