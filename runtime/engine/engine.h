// The training engine, in the spirit of deepspeed.initialize(): it takes a
// model, a config and a communicator, owns every byte of model state (through
// the ZeRO stage's ModelState), and runs
//
//   for each micro-batch:  loss = engine.forward(batch); engine.backward(); engine.step();
//
// step() is called every micro-batch and updates the weights at the gradient-
// accumulation boundary (DeepSpeed's semantics): the loss gradient is divided
// by gradient_accumulation_steps and by the data-parallel size (DeepSpeed
// divides gradients by the world size before communicating), gradients are
// reduced as backward produces them, the global gradient norm is the
// all-reduce of each rank's owned part, and clipping, unscaling and the
// optimizer run as one fused pass over this rank's partition.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "comm/device_mesh.h"
#include "graph/context.h"
#include "graph/model.h"
#include "kernels/optimizer.h"
#include "runtime/engine/engine_config.h"
#include "zero/model_state.h"

namespace zero {

// The global index of the first sample rank `rank` of `world` trains on at
// micro-step `micro_step` (= optimizer step x accumulation steps + micro-step
// within it) with micro-batches of `micro_batch` rows: the data loader's
// order, and the key dropout's masks follow, so N ranks at micro-batch b see
// what one rank sees at N b.
inline int64_t first_global_sample(int64_t micro_step, int world, int rank, int64_t micro_batch) {
  return (micro_step * world + rank) * micro_batch;
}

// One micro-batch on this rank. inputs: int32 token ids [B, T] (or fp32
// features [B, F]); targets: int32 [B, T] (or [B]); negative targets are ignored.
struct Batch {
  Tensor inputs;
  Tensor targets;
};

// A mixture of experts' routing over one optimizer step (graph/moe.h), from
// this rank's micro-batches.
struct MoeStepStats {
  double aux_loss = 0, z_loss = 0;  // unweighted; the mean over the step's micro-batches
  int64_t dropped = 0;              // (token, expert) choices the capacity dropped, summed
  // Per sparse layer: the top-k choices each expert received, summed.
  std::vector<std::pair<int64_t, std::vector<double>>> expert_tokens;
  int micro_batches = 0;
};

struct StepResult {
  bool boundary = false;      // an optimizer step happened (updated or skipped)
  bool skipped = false;       // gradients held inf/NaN: no update (fp16, bf16 checks)
  int64_t global_step = 0;    // optimizer steps so far, skipped ones included (as DeepSpeed)
  int64_t skipped_steps = 0;  // of those, skipped for overflow
  float loss = 0.0f;          // mean loss over the global batch of this step (all ranks)
  float lr = 0.0f;            // the learning rate this step used
  double grad_norm = 0.0;     // global L2 norm of the unscaled gradients, before clipping
  double loss_scale = 1.0;    // the scale this step's gradients carried
  double next_loss_scale = 1.0;  // the scale after this step's update
  std::string overflow_in;    // first parameters (on this rank) whose gradient held inf/NaN
  // Wall time of this optimizer step's phases, summed over its micro-steps.
  double forward_s = 0, backward_s = 0, step_s = 0;
  double recompute_s = 0;     // of backward_s: recomputing checkpointed segments
  // Pipeline: how long this stage waited for a neighbour's activation or
  // gradient (its share of the bubble), and the whole schedule's wall time.
  double pipeline_wait_s = 0, pipeline_s = 0;
  int64_t comm_bytes = 0;     // bytes this rank sent into collectives during the step
  // Of the step's wall time: how long this rank's threads were blocked
  // waiting for collectives (comm_wait_seconds()): communication not hidden
  // behind compute.
  double comm_wait_s = 0;
  std::optional<MoeStepStats> moe;  // with MoE layers
};

// Where a run is, beyond the weights: what a checkpoint restores so that
// training continues bitwise as if it had never stopped.
struct EngineProgress {
  int64_t global_step = 0;
  int64_t skipped_steps = 0;
  int64_t micro_step = 0;
  int64_t scheduler_iteration = -1;  // DeepSpeed's last_batch_iteration
  LossScalerState loss_scaler;
};

class Engine {
 public:
  // comm: every rank is a data-parallel rank (a mesh of data = world);
  // nullptr means a single process.
  //
  // Frozen parameters (Parameter::requires_grad false, set before this
  // call: graph/freeze.h) train nothing: no gradient buffer, no reduction,
  // no fp32 master, no optimizer state, no part in the gradient norm; their
  // weights stay in the model dtype (whole on every rank at stages 0-2,
  // partitioned and gathered at stage 3) and checkpoints hold them. Refused:
  // a model (or pipeline stage) with no trainable parameter, and ranks of a
  // group that freeze different parameters.
  static absl::StatusOr<std::unique_ptr<Engine>> create(std::unique_ptr<Module> model, const EngineConfig& config,
                                                        Backend& backend, Communicator* comm = nullptr);
  // On a device mesh (comm/device_mesh.h), which must outlive the
  // engine: ZeRO shards over its data group and samples are drawn by the
  // data-parallel rank. With a tensor group of T > 1 the model must be built
  // on it (graph/build_model.h's build_model(spec, mesh)): each rank of a tensor group gets the
  // same batch, the gradient norm adds the split parameters' slices over the
  // group and counts the replicated ones once, and an overflow anywhere
  // skips the step everywhere. With a pipeline of P > 1 stages the model
  // must be built as this rank's stage (build_model does), trained through
  // train_batch() and evaluated through evaluate(); ZeRO stage 3 is refused (its gathers replay one recorded
  // module order per forward and per backward, which a schedule
  // interleaving micro-batches does not have).
  static absl::StatusOr<std::unique_ptr<Engine>> create(std::unique_ptr<Module> model, const EngineConfig& config,
                                                        Backend& backend, const DeviceMesh& mesh);
  ~Engine();

  // Runs the model and the fused softmax cross-entropy; returns this rank's
  // mean loss over the micro-batch's targets. Keeps what backward() needs.
  // Fails with the failing operation's own error (a stage-3 gather's
  // collective, a parameter read from NVMe), prefixed by the micro-step.
  absl::StatusOr<float> forward(const Batch& batch);
  // Backward pass of the last forward: gradients accumulate and are reduced.
  // Fails as forward does, or with a gradient reduction's error.
  absl::Status backward();
  // Counts the micro-step; at the accumulation boundary checks for overflow,
  // clips, updates, advances the LR schedule and zeroes the gradients. Fails
  // when fp16's loss scale cannot go lower (DeepSpeed's exit) or a collective
  // fails.
  absl::StatusOr<StepResult> step();

  // One optimizer step over gradient_accumulation_steps micro-batches, the
  // i-th from next(i) (DeepSpeed's PipelineEngine.train_batch). Without a
  // pipeline: forward, backward, step per micro-batch. With one: the
  // configured schedule (runtime/engine/pipeline_schedule.h); every stage
  // draws each micro-batch (the first stage uses its inputs, the last its
  // targets, the others its shape), activations and their gradients travel
  // between neighbouring stages, the tied embedding's copies sum their
  // gradients, and the result (loss, norm, skip) is the same on every rank.
  // A batch next() returns must stay valid until its next call only.
  using MicroBatchSource = std::function<absl::StatusOr<Batch>(int micro)>;
  absl::StatusOr<StepResult> train_batch(const MicroBatchSource& next);
  // The forwards and backwards the last train_batch ran, in order (kForward
  // and kBackward only).
  const std::vector<PipeInstruction>& executed_order() const { return executed_; }

  // The mean per-token loss of a batch, forward only: gradients disabled
  // (so dropout is off), nothing saved, and no gradient, optimizer state,
  // micro-step count or dropout key changes. With a pipeline every rank of
  // the pipeline group calls it with the same batch (as train_batch draws
  // each micro-batch on every stage): the first stage embeds its inputs,
  // each stage hands its activation to the next, the last computes the loss
  // from its targets, and every stage returns that loss. A stage that fails
  // still passes an activation on and joins the final agreement, so every
  // stage fails (its own error, or one naming the failed stages) instead of
  // waiting. Errors: the forward's or a collective's own, annotated.
  absl::StatusOr<float> evaluate(const Batch& batch);

  Module& model() { return *model_; }
  Backend& backend() { return backend_; }
  // The data-parallel group (the world when the mesh is data only).
  Communicator& comm() { return mesh_->data(); }
  const DeviceMesh& mesh() const { return *mesh_; }
  // The model state: every parameter's, or under expert parallelism
  // (mesh().shape().expert > 1) the dense parameters' over the data group,
  // the experts' being expert_state()'s over the expert-data group.
  ModelState& state() { return *state_; }
  ModelState* expert_state() { return expert_state_.get(); }
  // state(), then expert_state() when it exists: a collective over the
  // states runs on every rank in this order.
  std::vector<ModelState*> states() const {
    return expert_state_ ? std::vector<ModelState*>{state_.get(), expert_state_.get()}
                         : std::vector<ModelState*>{state_.get()};
  }
  // The state that holds p.
  ModelState& state_of(const Parameter& p) {
    return expert_state_ != nullptr && expert_state_->holds(p) ? *expert_state_ : *state_;
  }
  const EngineConfig& config() const { return config_; }
  int64_t global_step() const { return global_step_; }
  int64_t num_parameters() const {
    return state_->num_parameters() + (expert_state_ ? expert_state_->num_parameters() : 0);
  }
  // Of those, the elements that train (Parameter::requires_grad); the rest
  // are frozen: weights only, no gradient or optimizer state.
  int64_t num_trainable_parameters() const {
    return state_->num_trainable_parameters() + (expert_state_ ? expert_state_->num_trainable_parameters() : 0);
  }
  double loss_scale() const { return scaler_.scale(); }
  const LrScheduler& scheduler() const { return scheduler_; }
  bool is_accumulation_boundary() const {
    return (micro_step_ + 1) % config_.gradient_accumulation_steps == 0;
  }

  // Counters, schedule position and loss scale (for checkpoints). restore()
  // is only valid on an accumulation boundary.
  EngineProgress progress() const;
  void restore(const EngineProgress& p);

  // Activation checkpointing by hand (the config's number_checkpoints maps
  // onto Module::checkpointable_layers instead): each segment a run of
  // modules called one after another; see Context.
  void set_checkpoint_segments(std::vector<std::vector<Module*>> segments) {
    for (Context* c : contexts()) c->set_checkpoint_segments(segments);
  }
  size_t num_checkpoint_segments() const { return ctx_.num_checkpoint_segments(); }
  // Reports every module call of the passes that follow to `profiler`
  // (graph/module_profiler.h; the flops_profiler); nullptr turns it off.
  // Between steps only.
  void set_module_profiler(ModuleProfiler* profiler) {
    for (Context* c : contexts()) c->set_profiler(profiler);
  }
  // activation_checkpointing.cpu_checkpointing on a device (or forced): where
  // the segment inputs' host copies live (the compute backend, or a host
  // backend of their own standing in for pinned memory); nullptr when off.
  const Backend* checkpoint_host_backend() const { return checkpoint_host_; }
  // partition_activations in effect: each tensor rank keeps 1/T of every segment input.
  bool checkpoint_inputs_partitioned() const { return ctx_.checkpoint_partition() != nullptr; }

  // fp32 master values of a parameter, gathered from every rank's partition
  // (a frozen parameter has none: its model-dtype weights, as fp32).
  // A collective: every rank calls it, in the same order.
  absl::StatusOr<std::vector<float>> gather_master(const Parameter& p) { return state_of(p).gather_master(p); }
  // Single-process convenience for tests and tools.
  std::vector<float> master_values(const Parameter& p);
  // The gradient of one parameter as fp32, between backward() and step(),
  // where this rank holds full reduced gradients: stage 0 (and stage 1 on
  // one rank or with reduce_scatter false; with the reduce-scatter only this
  // rank's partition of the flat buffer is reduced).
  std::vector<float> grad_values(const Parameter& p);

 private:
  Engine(std::unique_ptr<Module> model, const EngineConfig& config, Backend& backend, const DeviceMesh& mesh);
  absl::Status init();
  // At least one parameter trains, and every rank of a group freezes the same ones.
  // `experts`: under expert parallelism, the experts this rank holds.
  absl::Status check_frozen_parameters(const std::unordered_set<const Parameter*>& experts);
  Tensor to_compute(const Tensor& host);
  // The loss of logits [N, V] and its gradient in place: the fused kernel,
  // or the vocabulary-parallel one when the model's logits are a slice.
  absl::Status cross_entropy(const Tensor& logits, const Tensor& targets, float grad_scale, const Tensor& losses);
  // The micro-batch's mean loss over its valid targets; logits become their
  // gradient, scaled for the accumulation, the data-parallel pre-divisor and
  // the loss scale.
  // valid_targets >= 0: their count, taken when the targets were drawn (a
  // copy made on the compute backend has no values in the planner's dry run).
  absl::StatusOr<float> loss_and_gradient(const Tensor& logits, const Tensor& targets, int64_t valid_targets = -1);
  // The routers' auxiliary losses of the forward just run (graph/moe.h
  // MoeLosses::finish, with the cross-entropy's gradient scale), added into
  // the step's MoE statistics (`new_micro_batch`: the first forward of a
  // micro-batch, not a later pipeline chunk's); 0 without experts.
  double finish_moe_losses(bool new_micro_batch);
  // Targets >= 0 of host int32 targets.
  static int64_t count_valid_targets(const Tensor& targets);
  // The optimizer step's bookkeeping after a micro-step (step()'s body).
  absl::StatusOr<StepResult> finish_micro_step();
  // train_batch with P > 1 (runtime/engine/pipeline_engine.cc).
  absl::StatusOr<StepResult> run_pipeline(const MicroBatchSource& next);
  // evaluate with P > 1 (runtime/engine/pipeline_engine.cc).
  absl::StatusOr<float> evaluate_pipeline(const Batch& batch);
  // The mean loss over the valid targets of logits [..., V] (no gradient).
  absl::StatusOr<float> evaluation_loss(const Tensor& logits, const Tensor& targets);
  // Sets a context up as the engine's (hooks, checkpoint segments, offload, partition).
  absl::Status configure(Context& ctx);
  // ctx_ and the pipeline's others.
  std::vector<Context*> contexts();
  bool pipelined() const { return mesh_->shape().pipeline > 1; }
  // Interleaved pipeline: the model chunks of this stage (Model::pipeline_chunks)
  // and the module that runs chunk c (the root when there is one chunk).
  int pipeline_chunks() const { return model_of(*model_).pipeline_chunks(); }
  Module& chunk_module(int chunk);
  // Bytes this rank sent into collectives so far: data group, tensor group
  // when split, and with pipeline stages the transfers and the tied table's sum.
  int64_t comm_bytes() const;

  std::unique_ptr<Module> model_;
  EngineConfig config_;
  Backend& backend_;
  std::unique_ptr<Communicator> owned_comm_;  // a single process's, when created without one
  std::unique_ptr<DeviceMesh> owned_mesh_;    // data = world, when created from a communicator
  const DeviceMesh* mesh_;
  // Before ctx_, whose saved segment inputs may live on it.
  std::unique_ptr<Backend> owned_checkpoint_host_;
  Backend* checkpoint_host_ = nullptr;
  Context ctx_;
  // Pipeline: one context per (chunk,) micro-batch in flight (ctx_ the
  // first), each holding that micro-batch's saved activations.
  std::vector<std::unique_ptr<Context>> pipeline_contexts_;
  std::vector<PipeInstruction> executed_;
  std::unique_ptr<ModelState> state_;
  std::unique_ptr<ModelState> expert_state_;  // expert parallelism only
  std::unique_ptr<FanOutHooks> both_states_;  // the contexts' hooks when expert_state_ exists
  // The squares of this rank's share of the global gradient norm (each
  // element of the model once over the world, after the sum over the data
  // group, the tensor and the pipeline groups).
  double local_norm_square_sum();
  LossScaler scaler_;
  LrScheduler scheduler_;

  Tensor pending_dlogits_;  // set by forward(), consumed by backward()
  int64_t micro_step_ = 0;
  int64_t global_step_ = 0;
  int64_t skipped_steps_ = 0;
  double loss_sum_ = 0.0;   // this rank's micro-batch losses of the current step
  MoeStepStats moe_step_;   // the routers' statistics of the current step (MoE layers)
  int64_t comm_bytes_at_step_start_ = 0;
  double comm_wait_at_step_start_ = 0;  // comm_wait_seconds() then
  StepResult timing_;       // phase times accumulating over the current step
};

// deepspeed.initialize() for C++.
inline absl::StatusOr<std::unique_ptr<Engine>> initialize(std::unique_ptr<Module> model, const EngineConfig& config,
                                                          Backend& backend, Communicator* comm = nullptr) {
  return Engine::create(std::move(model), config, backend, comm);
}

}  // namespace zero
