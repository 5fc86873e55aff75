// The Context a forward and backward pass run through. It owns the saved
// activations (one frame per module call) and is the single place where the
// engine's hooks run around every module: Context::forward(m, x) runs
// pre_forward(m), m.forward, post_forward(m); Context::backward(m, dy) runs
// pre_backward(m), m.backward, post_backward(m), then frees m's frame.
//
// Frames are kept per module as a stack, so a module may be called several
// times in one forward; backward must visit calls in reverse order (which the
// tree structure of forward/backward gives for free).
//
// Activation checkpointing: a checkpoint segment is a run of consecutive
// module calls (e.g. transformer blocks i..j, each called once per forward).
// In forward, the segment keeps only its input; its modules save nothing.
// When backward reaches the segment's last module, the context first runs the
// segment's forward again from that input, this time saving (the engine's
// hooks run as in any forward, so ZeRO-3 gathers the parameters again through
// the same path), and then backward proceeds through the recomputed frames.
// The kernels are deterministic and the only randomness, dropout, is a pure
// function of a key the context holds for the whole micro-batch (the run's
// seed and the global index of the micro-batch's first sample, set by the
// engine before forward; see kernels/dropout_mask.h), so the recomputed
// activations — and hence the gradients — are bitwise those of a run without
// checkpointing. A layer that adds randomness must derive it from that key
// too, never from state that advances with each call.
//
// Segment inputs in host memory (cpu_checkpointing, set_checkpoint_offload):
// right after a segment's forward is issued, its input is copied to a host
// buffer (activations, host tier) on a copy stream of the compute backend,
// ordered after the compute that produced it by an event; when the segment's
// forward ends the host waits for that copy and drops the compute-tier input.
// In backward, a segment's recompute first makes sure its input is back on
// the compute tier (copied host -> compute on the copy stream, the compute
// stream waiting on its event) and starts the same copy for the segment
// backward reaches next (the previous one in forward order), so at most two
// segment inputs are on the compute tier at once. The host copy is dropped
// when the segment's backward is done. Buffers of a copy in flight are never
// dropped before its event has completed (clear() waits too).
//
// Partitioned segment inputs (DeepSpeed's partition_activations,
// set_checkpoint_partition): where a segment's input is the same on every
// rank of a tensor group (plain tensor parallelism), each rank keeps only its
// 1/T of it (flat elements [r ceil(n/T), (r+1) ceil(n/T))) from the end of
// the segment's forward to its recompute, which first all-gathers the input
// back. With host offload too, the partition is what goes to host memory.
#pragma once

#include <cstdint>
#include <deque>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/module.h"
#include "graph/module_profiler.h"
#include "graph/tape.h"
#include "kernels/backend.h"

namespace zero {

class Communicator;

// What the engine does around each module call (ZeRO-3 gathers and releases
// parameters here; gradient buckets fill in post_backward). A hook that fails
// (a gather's collective, a parameter read from NVMe) returns the
// operation's own error; it must still leave the module's parameters
// defined (values then undefined), so the pass runs to its end, and the
// Context hands the first error to the engine (Context::take_status).
class ModuleHooks {
 public:
  virtual ~ModuleHooks() = default;
  virtual absl::Status pre_forward(Module& m) { return absl::OkStatus(); }
  virtual absl::Status post_forward(Module& m) { return absl::OkStatus(); }
  virtual absl::Status pre_backward(Module& m) { return absl::OkStatus(); }
  virtual absl::Status post_backward(Module& m) { return absl::OkStatus(); }
};

// Several hooks around every module call, in the order given (expert
// parallelism's two model states, each acting on its own parameters); the
// first error is the call's.
class FanOutHooks final : public ModuleHooks {
 public:
  explicit FanOutHooks(std::vector<ModuleHooks*> hooks) : hooks_(std::move(hooks)) {}
  absl::Status pre_forward(Module& m) override { return each(&ModuleHooks::pre_forward, m); }
  absl::Status post_forward(Module& m) override { return each(&ModuleHooks::post_forward, m); }
  absl::Status pre_backward(Module& m) override { return each(&ModuleHooks::pre_backward, m); }
  absl::Status post_backward(Module& m) override { return each(&ModuleHooks::post_backward, m); }

 private:
  absl::Status each(absl::Status (ModuleHooks::*hook)(Module&), Module& m) {
    absl::Status s;
    for (ModuleHooks* h : hooks_) s.Update((h->*hook)(m));
    return s;
  }
  std::vector<ModuleHooks*> hooks_;
};

// activation_checkpointing.number_checkpoints = k: `layers` in k contiguous
// segments of (as) equal (as possible) length (k = layers.size(): every layer
// its own segment); an error naming the key when k is out of range. The
// engine and the memory planner both split this way.
absl::StatusOr<std::vector<std::vector<Module*>>> split_checkpoint_segments(const std::vector<Module*>& layers,
                                                                            int64_t k);

class Context {
 public:
  // param_dtype: the model dtype, which is also the precision GEMMs run in.
  Context(Backend& backend, DType param_dtype) : backend_(backend), param_dtype_(param_dtype) {}

  Backend& backend() { return backend_; }
  Ops& ops() { return backend_.ops(); }
  DType param_dtype() const { return param_dtype_; }

  void set_hooks(ModuleHooks* hooks) { hooks_ = hooks; }
  // Reports every module call to `profiler` (graph/module_profiler.h);
  // nullptr (the default) turns it off. Set between passes only.
  void set_profiler(ModuleProfiler* profiler) { profiler_ = profiler; }
  // With grad disabled (evaluation), modules save nothing and no frames exist.
  void set_grad_enabled(bool enabled) { grad_enabled_ = enabled; }
  bool grad_enabled() const { return grad_enabled_; }
  // Whether a checkpoint segment's forward is running again inside backward
  // (what a forward reports once per micro-batch skips it then).
  bool recomputing() const { return recomputing_; }

  // Dropout's key for the micro-batch about to run: the run's seed and the
  // global sample index of its row 0 (runtime/data/data_loader.h's g). Kept
  // until the next call, so the micro-batch's backward (and any recompute in
  // it) sees the same key. Dropout is active only with grad enabled.
  void set_dropout_key(uint64_t seed, int64_t first_sample) {
    dropout_seed_ = seed;
    first_sample_ = first_sample;
  }
  uint64_t dropout_seed() const { return dropout_seed_; }
  int64_t first_sample() const { return first_sample_; }

  Tensor forward(Module& m, const Tensor& x);
  Tensor backward(Module& m, const Tensor& dy);

  // Checkpoint segments: each a list of modules called one after another
  // (the output of one is the input of the next). Replaces earlier segments.
  void set_checkpoint_segments(std::vector<std::vector<Module*>> segments);
  size_t num_checkpoint_segments() const { return segments_.size(); }
  // Keep segment inputs in host memory between forward and recompute (see
  // the top of this file): host buffers from `host` (Tier::kHost; the compute
  // backend itself on a GPU, whose host tier is pinned; a host backend of its
  // own where the CPU backend stands in for the device), copies on a stream
  // of this context's backend. nullptr turns it off. `host` must outlive the
  // saved activations (clear() drops them).
  void set_checkpoint_offload(Backend* host);
  // Keep 1/T of each segment input over `group` (see the top of this file);
  // nullptr or a group of one rank turns it off. The inputs must be the same
  // on every rank of the group. `group` must outlive the context.
  void set_checkpoint_partition(Communicator* group);
  // The group segment inputs are partitioned over, or nullptr.
  const Communicator* checkpoint_partition() const { return partition_; }
  // Seconds spent recomputing segment forwards since the last call (then reset).
  double take_recompute_seconds();

  // ---- for use inside Module::forward / Module::backward
  // Keeps t for this module call's backward (no-op when grad is disabled).
  void save(const Tensor& t);
  // The i-th tensor this module call saved.
  const Tensor& saved(size_t i) const;
  // A new fp32 activation (tracked as activations).
  Tensor activation(const Shape& shape, DType dtype = DType::kF32) {
    Tensor t = backend_.empty(shape, dtype, MemCategory::kActivations);
    if (recording()) current_.back()->tape.note_unrecorded(t);
    return t;
  }

  // ---- automatic backward (graph/tape.h), for graph/functional.h's ops
  // Whether this module call keeps a tape (grad enabled, not inside a
  // checkpointed forward): only then do ops record.
  bool recording() const { return !current_.empty() && current_.back() != nullptr; }
  // Records an op of this module call: its inputs, its output, the rule
  // that gives the inputs' gradients from the output's, and the parameters
  // it uses (warned about when backward never reaches the op: Tape).
  void record(std::string op, const std::vector<Tensor>& inputs, const Tensor& output, BackwardRule rule,
              std::vector<Parameter*> params = {}) {
    if (recording()) current_.back()->tape.record(std::move(op), inputs, output, std::move(rule), std::move(params));
  }
  // Module::backward's default: this call's dx, replaying its tape.
  Tensor replay(const Module& m, const Tensor& dy);
  // The name of the innermost module call in progress (forward or
  // backward; "the model" for the unnamed root, "" outside any call): what
  // ops name in their errors and warnings.
  std::string module_name() const;
  // Whether the rule now running may overwrite its dy (see BackwardRule).
  bool grad_writable(const Tensor& dy) const { return dy.defined() && dy.data() == writable_grad_; }
  void set_writable_grad(const void* data) { writable_grad_ = data; }

  // Frames not yet consumed by backward (0 after a full forward + backward).
  size_t live_frames() const;
  // Drops every saved activation (e.g. after an evaluation or an aborted
  // step) and any hook error not yet taken.
  void clear();
  // Keeps the first error of a hook or of a module's own collective (a
  // tensor-parallel layer's all-reduce); the pass goes on.
  void note(absl::Status s) {
    if (!s.ok() && status_.ok()) status_ = std::move(s);
  }
  // The first hook or module error since the last call (then OK again): a
  // pass that failed ran on undefined values and must not be used.
  absl::Status take_status() { return std::exchange(status_, absl::OkStatus()); }

 private:
  struct Frame {
    std::vector<Tensor> saved;
    Tape tape;
  };

  struct Segment {
    std::vector<Module*> modules;
    // On the compute tier: kept from the forward until the segment's
    // backward is done; with offload only from forward entry to forward end
    // and from its upload (recompute, or the prefetch) to backward's end.
    Tensor input;
    bool recomputed = false;  // this backward has rebuilt the frames
    // Offload: the input's host copy (forward end to backward end), and the
    // events of the copy out (compute -> host) and of the copy back.
    Tensor host_input;
    EventPtr copied_out, copied_back;
    // Partitioned: this rank's piece of the input ([ceil(n/T)] elements),
    // from the forward's end (or the copy back) to the recompute's gather.
    Tensor part;
    Shape input_shape;
  };
  bool partitioned() const { return partition_ != nullptr; }
  // Partitioned: the elements each rank keeps of an input of n, ceil(n/T).
  int64_t partition_block(int64_t n) const;
  // Partitioned: elements [r ceil(n/T), ...) of the segment's input, at most
  // ceil(n/T) of them (fewer or none on the last ranks).
  Tensor partition_view(const Segment& s) const;
  // Partitioned: the whole input again from every rank's part (a collective).
  void gather_input(Segment& s);
  // Runs the segment's forward again, saving, from its kept input.
  void recompute(Segment& s);
  // Offload: starts copying the segment's input to host memory (forward).
  void start_copy_out(Segment& s);
  // Offload: starts copying the segment's input back to the compute tier,
  // unless it is there or on its way.
  void start_copy_back(Segment& s);
  // Offload: waits for the segment's copies in flight (before their buffers go).
  void wait_copies(Segment& s);

  Backend& backend_;
  DType param_dtype_;
  ModuleHooks* hooks_ = nullptr;
  ModuleProfiler* profiler_ = nullptr;
  absl::Status status_;  // the first hook error of the pass
  bool grad_enabled_ = true;
  uint64_t dropout_seed_ = 0;
  int64_t first_sample_ = 0;
  std::vector<Segment> segments_;
  Backend* host_ = nullptr;     // offload: where host copies of segment inputs live
  Communicator* partition_ = nullptr;  // partition_activations: the tensor group
  StreamId copy_stream_ = -1;   // offload: the copies' stream (created once)
  std::vector<size_t> forward_segments_;  // segments entered by this forward, in order, not yet through backward
  std::unordered_map<const Module*, size_t> first_of_, last_of_;  // module -> segment it starts / ends
  int no_save_depth_ = 0;  // > 0 inside a checkpointed forward: modules save nothing
  bool recomputing_ = false;
  size_t recompute_base_ = SIZE_MAX;
  const void* writable_grad_ = nullptr;  // the running rule's dy, when it may overwrite it  // recomputing: the depth of the segment's own calls
  double recompute_seconds_ = 0;
  std::unordered_map<const Module*, std::deque<Frame>> frames_;  // deque: stable frame addresses
  std::vector<Frame*> current_;  // the frame of each module call in progress
  std::vector<const Module*> calls_;  // the module of each call in progress
};

}  // namespace zero
