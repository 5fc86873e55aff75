// Internals of the memory planner (zero/memory_plan.h): a simulated run.
//
// SimStorage counts its bytes into the plan's own MemoryTracker when it is
// made and out when the last SimTensor holding it goes, exactly as a tensor's
// Storage does in the real tracker; so the mirrors of the engine's code below
// (memory_plan_graph.cc: the Context and the GPT's layers; memory_plan_state.cc:
// the stage 0-2 and stage-3 model states and the stage-3 coordinator) keep a
// simulated buffer alive exactly as long as the real code keeps its tensor,
// as long as each mirror is written in the shape of the code it mirrors (same
// locals, same temporaries in the same full-expressions, same resets).
#pragma once

#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

#include "runtime/core/memory_tracker.h"
#include "runtime/engine/engine_config.h"
#include "runtime/graph/gpt.h"
#include "zero/memory_plan.h"

namespace zero::memsim {

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
// (memory_plan_graph.cc)

class ContextSim {
 public:
  ContextSim(Sim& sim, WorkspaceSim& ws, const GptConfig& g, int64_t seq, DType param_dtype, DType grad_dtype)
      : sim_(sim), ws_(ws), g_(g), seq_(seq), param_dtype_(param_dtype), grad_dtype_(grad_dtype) {}

  void set_hooks(StateSim* hooks) { hooks_ = hooks; }
  void set_checkpoint_segments(std::vector<std::vector<Module*>> segments);
  // Context::set_checkpoint_offload: segment inputs in host memory (host-tier
  // activations) between forward and recompute, on the compute tier only
  // while the segment runs forward and from its copy back (at most two).
  void set_checkpoint_offload(bool on) { offload_ = on; }

  // Context::forward and Context::backward: the hooks around the call, the
  // frame of saved tensors, checkpoint segments (kept input, recompute).
  SimTensor forward(Module& m, const SimTensor& x);
  SimTensor backward(Module& m, const SimTensor& dy);
  void clear();
  // Context::activation: fp32.
  SimTensor activation(int64_t numel) { return {sim_.alloc(MemCategory::kActivations, numel * 4), numel}; }

 private:
  struct Frame {
    std::vector<SimTensor> saved;
  };
  struct Segment {
    std::vector<Module*> modules;
    SimTensor input;
    bool recomputed = false;
    SimTensor host_input;
  };

  void recompute(Segment& s);
  void start_copy_back(Segment& s);

  void save(const SimTensor& t) {
    if (current_.back() != nullptr) current_.back()->saved.push_back(t);
  }
  const SimTensor& saved(size_t i) const { return current_.back()->saved.at(i); }

  // By the module's class, the mirror of its forward / backward.
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
  bool offload_ = false;
  std::vector<size_t> forward_segments_;
  int no_save_depth_ = 0;
  bool recomputing_ = false;
  std::unordered_map<const Module*, std::deque<Frame>> frames_;
  std::vector<Frame*> current_;
};

// ---- the model states (memory_plan_state.cc)

// Optimizer state arrays beside the master weights: Adam 2, SGD 1 with
// momentum, else 0.
int optimizer_state_arrays(const OptimizerConfig& o);

// The model state of `e.zero.stage` for this rank, its initialisation
// simulated (model-state buffers allocated); fills the plan's layout fields.
std::unique_ptr<StateSim> make_state_sim(Sim& sim, Module& model, const EngineConfig& e, int world, int rank,
                                         MemoryPlan& plan);

}  // namespace zero::memsim
