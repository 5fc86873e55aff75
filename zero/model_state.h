// Where a model's state lives, per ZeRO stage, and how gradients are reduced
// and weights updated. The engine owns one ModelState; it is also the
// engine's module hook (gathers and releases parameters, fills gradient
// buckets and launches their reduction as backward produces them).
//
//   stage | parameters (model dtype) | gradients           | fp32 master + optimizer
//   ------+--------------------------+---------------------+------------------------
//   0     | full                     | full, all-reduced   | full
//   1     | full, all-gathered       | full, all-reduced   | this rank's partition
//   2     | full, all-gathered       | this rank's part,   | this rank's partition
//         |                          | reduce-scattered    |
//   3     | this rank's part; a      | this rank's part,   | this rank's partition
//         | module's full parameters | reduce-scattered    |
//         | gathered around its use  |                     |
//
// Stages 0-2 use one flat buffer (FlatLayout) padded to a multiple of 2 x
// world (DeepSpeed's nccl_start_alignment_factor), partitioned into equal
// contiguous ranges; a parameter may straddle two ranks. Stage 3 partitions
// each parameter on its own: padded to a multiple of world, rank r owns the
// r-th ceil(numel / world) elements (DeepSpeed's stage-3 layout).
//
// Gradients are pre-divided by the data-parallel size in the loss gradient
// (DeepSpeed divides before communicating), so every reduction is a sum.
//
// Frozen parameters (Parameter::requires_grad false) are laid out apart
// from the trainable ones, in the model dtype only: no gradient buffer, no
// reduction, no master, no optimizer state (see frozen_weights()). The flat
// layout, the stage-3 gradient and master shards and the optimizer store
// cover the trainable parameters alone, so every figure above (and the
// planner's) counts those for gradients and optimizer state.
//
// ZeRO-Offload (offload_optimizer "cpu" on a device backend): the master
// weights and optimizer state live on a host backend the model state owns,
// and the step runs there through zero/host_step.h; at stage 3 with
// offload_param "cpu" the parameter shard lives in host memory too.
// ZeRO-Infinity (offload_optimizer "nvme" on a device backend) is the same
// path over the NVMe store built on that host backend; with offload_param
// "nvme" the shard rides in its records.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "graph/context.h"
#include "kernels/backend.h"
#include "kernels/optimizer.h"
#include "offload/aio_config.h"
#include "offload/optimizer_state_store.h"
#include "zero/host_step.h"
#include "zero/zero_config.h"

namespace zero {

struct ModelStateOptions {
  ZeroConfig zero;
  AioConfig aio;  // NVMe offload's I/O engine
  DType param_dtype = DType::kF32;
  DType grad_dtype = DType::kF32;
  OptimizerConfig optimizer;
  OptimizerPrecision optimizer_precision;  // master weights and states: fp32, or bf16
  uint64_t seed = 42;
  // Start every parameter (and master) at zero rather than at the seed's
  // values: the caller loads a checkpoint holding all of them next
  // (EngineConfig::skip_init), and the random initialisation would be spent
  // for nothing (about 1.5 s per 100M parameters on one core).
  bool skip_init = false;
  std::optional<uint64_t> init_seed() const { return skip_init ? std::nullopt : std::optional<uint64_t>(seed); }
  // Multiplies reduced gradients (prescale_gradients: world / predivide factor, else 1).
  float post_reduce_scale = 1.0f;
  // Run offload "cpu" through the device path (host_step.h) even on the CPU
  // backend, where it otherwise moves nothing: how tests exercise it without
  // a GPU (EngineConfig::force_offload_path).
  bool force_offload_path = false;
  // The parameters this state holds (unset: all of the model's). Expert
  // parallelism builds two states over one model, the dense parameters'
  // over the data group and the experts' over the expert-data group
  // (runtime/engine/engine.h); a module's hooks then reach both, and each
  // gathers, reduces and steps its own parameters only.
  std::function<bool(const Parameter&)> holds;
};

// Elements [begin, end) of one parameter, as held in a rank's fp32 master and
// optimizer-state buffers, where they start at element `offset`.
struct StateRange {
  Parameter* param;
  int64_t begin, end;
  int64_t offset;
};

class ModelState : public ModuleHooks {
 public:
  ~ModelState() override = default;

  static absl::StatusOr<std::unique_ptr<ModelState>> create(Module& model, const ModelStateOptions& options,
                                                            Backend& backend, Communicator& comm);

  ZeroStage stage() const { return options_.zero.stage; }
  // The ZeRO settings in effect: the config's, with the windows it left
  // unset sized to the model (zero/window_sizes.h).
  const ZeroConfig& zero_config() const { return options_.zero; }
  int64_t num_parameters() const { return num_parameters_; }
  // Of those, the elements that train (requires_grad): the only ones with a
  // gradient, master weights and optimizer state.
  int64_t num_trainable_parameters() const { return num_trainable_parameters_; }
  // Whether `p` is one of this state's parameters (ModelStateOptions::holds).
  bool holds(const Parameter& p) const { return !options_.holds || options_.holds(p); }

  // Bracket of one micro-step's backward. `boundary`: the last micro-step of
  // an accumulation, after which step() runs.
  virtual void begin_backward(bool boundary) = 0;
  // Waits for this backward's reductions and folds them into the gradients.
  virtual absl::Status end_backward() = 0;
  // Before each forward (stage 3 checks its recorded module order here).
  virtual void begin_forward() {}
  // Brackets an evaluation forward (no backward follows; stage 3 pauses its
  // recorded module order so evaluation neither breaks nor re-records it).
  virtual void set_evaluating(bool) {}

  // Sum of squares of the gradients this rank owns (all of them at stage 0,
  // where every rank holds the same full gradients: then `replicated`).
  double local_grad_square_sum() { return backend_.ops().sum_squares(owned_grads()); }
  // The same over the parameters `include` accepts only (the engine takes
  // the tensor-parallel replicas out of all but one tensor rank's norm).
  double local_grad_square_sum(const std::function<bool(const Parameter&)>& include);
  int64_t local_nonfinite_grads() { return backend_.ops().count_nonfinite(owned_grads()); }
  virtual bool grads_replicated() const { return false; }
  // After end_backward at the boundary: p's reduced gradient becomes its sum
  // over `group`, which holds this data group and another one's (the first
  // and last pipeline stages' copies of a tied embedding). Each element
  // enters the all-reduce once per data group, from the rank that holds it
  // (where every rank holds all, from its even share), the others as zeros,
  // so the sum is exact and the same on every member: the copies stay
  // bitwise equal.
  absl::Status sum_gradient_over(const Parameter& p, Communicator& group);
  // Parameters whose gradients hold inf/NaN (names, for the overflow message).
  virtual std::string nonfinite_gradient_names() = 0;

  // One optimizer update of this rank's partition, then the all-gather (or
  // re-gather of persistent parameters) that makes parameters consistent.
  virtual absl::Status apply_step(const Optimizer::StepArgs& args) = 0;
  virtual void zero_grads() = 0;

  // ---- checkpoints
  // The ranges this rank holds in its master/optimizer buffers (stage 0:
  // everything; otherwise its partition).
  virtual std::vector<StateRange> held_ranges() const = 0;
  // The ranges rank `rank` writes to a checkpoint: a disjoint cover of every
  // parameter across ranks (its partition, or at stage 0 an even split).
  virtual std::vector<StateRange> written_ranges(int rank) const = 0;
  // This rank's fp32 master weights and optimizer state ("master", then the
  // optimizer's states), indexed by the offsets of held_ranges(). Trainable
  // parameters only.
  OptimizerStateStore& state_store() { return *store_; }
  // Frozen parameters (requires_grad false) hold their weights only, in the
  // model dtype: stages 0-2 a full copy on every rank (as DeepSpeed keeps
  // them, unflattened), stage 3 this rank's chunk of each. As a store of one
  // array, "master" (the model dtype, read and written as fp32), so
  // checkpoints and weight loading treat them as they treat the master
  // weights; writing one sets the parameter (at stage 3 its shard:
  // refresh_parameters() re-gathers the persistent copies). nullptr when
  // nothing is frozen.
  OptimizerStateStore* frozen_weights() { return frozen_store_.get(); }
  // The frozen ranges this rank holds and those rank `rank` writes to a
  // checkpoint (a disjoint cover of every frozen parameter across ranks),
  // offsets into frozen_weights().
  virtual std::vector<StateRange> frozen_held_ranges() const { return {}; }
  virtual std::vector<StateRange> frozen_written_ranges(int rank) const { return {}; }
  std::string_view optimizer_name() const { return optimizer_->name(); }
  // ZeRO-Offload: what moved to host memory, the backend the store and the
  // optimizer live on, and the step that reaches them (nullptr when the
  // state lives on the compute backend).
  const HostOffload& host_offload() const { return host_offload_; }
  Backend* host_backend() const { return host_backend_.get(); }
  const HostStep* host_step() const { return host_step_.get(); }
  // After the master weights changed underneath (a checkpoint load):
  // parameters := cast(master) on every rank (a collective).
  virtual absl::Status refresh_parameters() = 0;

  // fp32 master values of one parameter, gathered from every rank's partition
  // (a collective: every rank must call it, in the same order).
  virtual absl::StatusOr<std::vector<float>> gather_master(const Parameter& p) = 0;
  // The model-dtype parameter as every rank sees it after gathering, as fp32
  // (a collective at stage 3).
  virtual absl::StatusOr<std::vector<float>> gather_parameter(const Parameter& p) = 0;

 protected:
  ModelState(const ModelStateOptions& options, Backend& backend, Communicator& comm)
      : options_(options),
        backend_(backend),
        comm_(comm),
        host_offload_(host_offload_for(options.zero, backend.compute_tier(), options.force_offload_path)) {}

  // Builds the optimizer and the store of `numel` master elements (adopting
  // `master` as the master weights when it is defined). With
  // max_param_read > 0 the store also holds the parameter shard
  // (offload_param "nvme"), read in pieces of at most that many elements.
  // With host_offload().optimizer both are built on a host backend of their
  // own (the store resident or NVMe, as offload_optimizer says), with the
  // staging of the host step.
  absl::Status init_optimizer_state(int64_t numel, Tensor master = Tensor(), int64_t max_param_read = 0);
  // Runs the optimizer over the store, sub-group by sub-group, reading the
  // gradients and writing the model-dtype weights at the same offsets: into
  // param_out when it is defined, into the store when it holds the
  // parameters, else nowhere (the master weights are the parameters).
  absl::Status step_sub_groups(const Tensor& grads, const Tensor& param_out, const Optimizer::StepArgs& args);
  // param_out (or the store's parameters when param_out is undefined) :=
  // cast(master), over the whole store.
  absl::Status cast_master_into(const Tensor& param_out);
  // Elements [offset, offset + count) of the master weights into `dst` (any
  // tier); a helper of gather_master.
  absl::Status copy_master(int64_t offset, const Tensor& dst);
  // The reduced gradients this rank owns and steps, at the offsets of
  // held_ranges() (defined between end_backward and zero_grads).
  virtual Tensor owned_grads() = 0;
  // The model's parameters this state holds, each given its position in the
  // whole model's parameters() (Parameter::index).
  std::vector<Parameter*> held_parameters(Module& model) const;
  // Presents `weights` (the frozen parameters' buffer, model dtype, on
  // `backend`'s compute tier) as frozen_weights(); nothing when it is empty.
  absl::Status init_frozen_weights(Backend& backend, const Tensor& weights);

  ModelStateOptions options_;
  Backend& backend_;
  Communicator& comm_;
  HostOffload host_offload_;
  std::unique_ptr<Backend> host_backend_;  // before what lives on it: destroyed after it
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<OptimizerStateStore> store_;
  std::unique_ptr<HostStep> host_step_;
  std::unique_ptr<OptimizerStateStore> frozen_store_;
  int64_t num_parameters_ = 0;
  int64_t num_trainable_parameters_ = 0;
};

}  // namespace zero
