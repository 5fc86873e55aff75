// The module API: a tree of modules with named parameters, and forward /
// backward passes that run through a Context.
//
// Who controls what:
//  * A module declares its parameters (name, shape, how to initialise) and
//    computes; it never allocates them. The engine owns parameter memory: it
//    places every Parameter's `data` and `grad` (views into flat buffers) and
//    decides when they are materialised — under ZeRO-3 a parameter's data is
//    only defined between the engine's gather before a module runs and its
//    release after.
//  * A module writes forward only: it calls graph/functional.h's recorded
//    ops and its children through ctx.forward(child, x), never
//    child.forward() directly (that is where the engine's hooks run:
//    gather, release, gradient reduction, activation checkpointing). The
//    ops and child calls are recorded on a tape in the call's frame, which
//    the Context owns, and backward replays it (graph/tape.h), each child's
//    backward again through the Context and its hooks. The frame, with what
//    the ops kept for their rules, goes after the module's backward, or only
//    a checkpoint boundary is kept.
//  * A module may still override backward (with ctx.save() in forward and
//    ctx.backward(child, dy) in backward); none of the library's does.
//
// Conventions: activations are fp32; parameter gradients accumulate (+=).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/tensor.h"

namespace zero {

class Context;

// How a parameter's initial values are drawn (see graph/init.h).
struct ParamInit {
  enum class Kind { kNormal, kZeros, kOnes, kUniform };
  Kind kind = Kind::kZeros;
  float std = 0.0f;  // kNormal: N(0, std^2); kUniform: U(-std, std)

  static ParamInit normal(float std) { return {Kind::kNormal, std}; }
  static ParamInit uniform(float bound) { return {Kind::kUniform, bound}; }
  static ParamInit zeros() { return {Kind::kZeros, 0.0f}; }
  static ParamInit ones() { return {Kind::kOnes, 0.0f}; }
};

// A tensor-parallel slice: the parameter holds elements [offset, offset +
// shape[dim]) along `dim` of the unsplit layer's tensor of `global_shape`
// (its other dimensions whole). With blocks > 1 the unsplit dimension is that
// many equal blocks and the parameter holds [offset, offset + shape[dim] /
// blocks) of each (attention's fused QKV: q, k and v rows, each split by
// heads). Initial values are the slice's (init.h), so a split model starts
// from exactly the unsplit one's weights.
// Uneven blocks (grouped-query attention's fused q/k/v: a q block of H D
// rows and k and v blocks of G D each, every rank holding some heads of
// each) are given as `runs` instead: the parameter is these ranges of the
// unsplit dim, concatenated in order ({offset in the unsplit dim, size});
// offset and blocks are then unused. set_slice turns equal blocks into runs
// too, so readers see runs() only.
struct ParamSlice {
  struct Run {
    int64_t offset = 0, size = 0;
  };
  Shape global_shape;
  int dim = 0;
  int64_t offset = 0;
  int64_t blocks = 1;
  std::vector<Run> runs;
};

class Parameter {
 public:
  Parameter(std::string name, Shape shape, ParamInit init)
      : name_(std::move(name)), shape_(std::move(shape)), numel_(shape_numel(shape_)), init_(init) {}

  const std::string& name() const { return name_; }  // dotted path, e.g. "h.0.attn.c_attn.weight"
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return numel_; }
  const ParamInit& init() const { return init_; }
  // Set by a tensor-parallel layer on the slice it holds; unset: the whole tensor.
  const std::optional<ParamSlice>& slice() const { return slice_; }
  void set_slice(ParamSlice s);
  // Where local element i (row-major) sits in the unsplit tensor: i itself
  // unless the parameter is a slice.
  int64_t global_index(int64_t i) const;
  // The inverse: the local element at unsplit index g, or -1 when g is
  // outside this rank's slice.
  int64_t local_index(int64_t g) const;
  // The unsplit tensor's shape (the parameter's own when it is whole).
  const Shape& global_shape() const { return slice_ ? slice_->global_shape : shape_; }
  // Local elements [begin, end) as the runs that are contiguous in the
  // unsplit tensor, in local (and so in unsplit) order:
  // fn(local_begin, global_begin, count). One run when the parameter is whole.
  void for_each_global_run(int64_t begin, int64_t end,
                           const std::function<void(int64_t, int64_t, int64_t)>& fn) const;
  // Position in Module::parameters() of the root (set when the engine
  // registers the model; -1 before, and again once the engine is gone).
  int64_t index() const { return index_; }
  void set_index(int64_t i) { index_ = i; }

  // Whether training updates this parameter (PyTorch's requires_grad). A
  // frozen one (false) still takes part in forward and passes gradients
  // through to its inputs, but gets no gradient buffer, no reduction, no
  // fp32 master and no optimizer state, at any ZeRO stage; under stage 3 it
  // is still partitioned and gathered. Decided before the engine is built
  // (graph/freeze.h freezes by name): the engine lays its buffers out from
  // it, so changing it on a parameter an engine holds is refused
  // (FAILED_PRECONDITION naming the parameter).
  bool requires_grad() const { return requires_grad_; }
  absl::Status set_requires_grad(bool requires_grad);

  // Set by the engine. `data` in the model dtype; `grad` in the gradient
  // dtype (never defined for a frozen parameter).
  Tensor data;
  Tensor grad;

 private:
  std::string name_;
  Shape shape_;
  int64_t numel_;
  ParamInit init_;
  std::optional<ParamSlice> slice_;
  int64_t index_ = -1;
  bool requires_grad_ = true;
};

class Module {
 public:
  explicit Module(std::string name) : name_(std::move(name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& name() const { return name_; }

  // y = f(x). Called by Context::forward, which has already run the engine's
  // pre-forward hook (this module's parameters are materialised).
  virtual Tensor forward(Context& ctx, const Tensor& x) = 0;
  // dx from dy, accumulating into the gradients of this module's parameters.
  // Called by Context::backward after the pre-backward hook. The default
  // replays what forward recorded (graph/tape.h): a module built from
  // graph/functional.h's ops and child modules writes forward only.
  virtual Tensor backward(Context& ctx, const Tensor& dy);

  // Parameters this module uses directly (its own, then shared ones), not its
  // children's. These are what the engine gathers around this module.
  const std::vector<Parameter*>& direct_parameters() const { return direct_; }
  const std::vector<Module*>& children() const { return children_view_; }
  // Every parameter owned in this subtree, depth-first in registration order,
  // each once (shared parameters are listed where they are owned).
  std::vector<Parameter*> parameters() const;
  // Every module of this subtree, depth-first pre-order (this one first).
  std::vector<Module*> modules();
  // The layers activation checkpointing maps onto, in forward order, each
  // called once per forward with the previous one's output (a GPT's blocks).
  // Empty: the model offers none (segments can still be set by hand).
  virtual std::vector<Module*> checkpointable_layers() { return {}; }

 protected:
  Parameter* add_parameter(const std::string& local_name, Shape shape, ParamInit init);
  // Uses a parameter owned by another module (weight tying).
  void use_parameter(Parameter* p) { direct_.push_back(p); }
  template <typename M, typename... Args>
  M* add_child(const std::string& local_name, Args&&... args) {
    auto child = std::make_unique<M>(child_name(local_name), std::forward<Args>(args)...);
    M* raw = child.get();
    children_view_.push_back(raw);
    children_.push_back(std::move(child));
    return raw;
  }
  // A child built elsewhere (named child_name(local) by its maker).
  Module* adopt_child(std::unique_ptr<Module> child) {
    children_view_.push_back(child.get());
    children_.push_back(std::move(child));
    return children_view_.back();
  }
  std::string child_name(const std::string& local_name) const {
    return name_.empty() ? local_name : name_ + "." + local_name;
  }

 private:
  void collect_owned(std::vector<Parameter*>& out) const;

  std::string name_;
  std::vector<std::unique_ptr<Parameter>> owned_;
  std::vector<Parameter*> direct_;
  std::vector<std::unique_ptr<Module>> children_;
  std::vector<Module*> children_view_;
};

}  // namespace zero
