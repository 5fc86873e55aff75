// The training engine; see engine.h.
#include "runtime/engine/engine.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <unordered_set>
#include <utility>

#include "core/status.h"
#include "core/strings.h"
#include "graph/freeze.h"
#include "graph/moe.h"
#include "graph/vocab_parallel.h"
#include "zero/state_buffers.h"

namespace zero {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

absl::Status refuse_with_pipeline(std::string_view what, int stages) {
  return absl::FailedPreconditionError(cat(what, " with ", stages, " pipeline stages: a stage's forward and backward "
                                           "need its neighbours'; train with train_batch(), which runs the schedule"));
}

}  // namespace

int64_t Engine::count_valid_targets(const Tensor& targets) {
  ZE_CHECK(targets.dtype() == DType::kI32 && targets.tier() == Tier::kHost) << targets.debug_string();
  int64_t n = 0;
  for (int64_t i = 0; i < targets.numel(); ++i) n += targets.i32()[i] >= 0;
  return n;
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::create(std::unique_ptr<Module> model, const EngineConfig& config,
                                                       Backend& backend, Communicator* comm) {
  std::unique_ptr<Communicator> local = comm == nullptr ? make_local_communicator() : nullptr;
  ZE_ASSIGN_OR_RETURN(std::unique_ptr<DeviceMesh> mesh, DeviceMesh::create(comm != nullptr ? *comm : *local));
  ZE_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, create(std::move(model), config, backend, *mesh));
  engine->owned_comm_ = std::move(local);  // the mesh refers to it: both live as long as the engine
  engine->owned_mesh_ = std::move(mesh);
  return engine;
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::create(std::unique_ptr<Module> model, const EngineConfig& config,
                                                       Backend& backend, const DeviceMesh& mesh) {
  if (model == nullptr) return absl::InvalidArgumentError("initialize: model is null");
  const int stages = mesh.shape().pipeline;
  const Model& layout = model_of(*model);
  const bool a_model = dynamic_cast<const Model*>(model.get()) != nullptr;
  if (stages > 1 && !a_model) {
    return absl::InvalidArgumentError(cat(
        "pipeline.stages ", stages, ": the model, a ", model_type_name(*model),
        ", is one whole module tree that cannot be cut into stages (it implements no zero::Model, graph/model.h); "
        "train it with pipeline.stages 1"));
  }
  if (layout.pipeline_stages() != stages || layout.pipeline_stage_index() != mesh.coordinates().pipeline) {
    return absl::InvalidArgumentError(cat(
        "a mesh of pipeline ", stages, ": this rank is stage ", mesh.coordinates().pipeline, " but the model, a ",
        model_type_name(*model), ", is stage ", layout.pipeline_stage_index(), " of ", layout.pipeline_stages(),
        " (build it as this rank's stage: build_model(spec, mesh), graph/build_model.h)"));
  }
  if (stages > 1 && config.zero.stage == ZeroStage::k3) {
    return absl::InvalidArgumentError(cat(
        "zero_optimization.stage 3 with ", stages, " pipeline stages: refused, as DeepSpeed does. Stage 3 gathers each "
        "module's parameters by replaying the module order it recorded for one forward and one backward, and a "
        "pipeline schedule interleaves the forwards and backwards of several micro-batches; use stage 0, 1 or 2"));
  }
  const bool last_stage = layout.pipeline_stage_index() == stages - 1;
  if (mesh.shape().tensor > 1 && last_stage) {
    // The model's tensor-parallel layers must split over this mesh's tensor
    // group; its logits then come as this rank's vocabulary slice.
    const std::optional<VocabSlice> slice = layout.logits_vocab_slice();
    if (!slice || slice->group != &mesh.tensor()) {
      return absl::InvalidArgumentError(cat(
          "tensor_parallel.autotp_size ", mesh.shape().tensor, ": the model, a ", model_type_name(*model), ", ",
          !a_model ? "has no tensor-parallel layers (train it with autotp_size 1)"
          : !slice ? "was built unsplit, not on the mesh's tensor group (build it with build_model(spec, mesh), "
                     "graph/build_model.h)"
                   : "is split over another group than the mesh's tensor group (build it with build_model(spec, "
                     "mesh), graph/build_model.h)"));
    }
  }
  {
    // Expert parallelism: every sparse block's experts split over this
    // mesh's expert group, or none when the mesh has no ep axis; a model
    // built otherwise would reduce its experts over the wrong ranks.
    Communicator* want = mesh.shape().expert > 1 ? &mesh.expert() : nullptr;
    int64_t sparse = 0, wrong = 0;
    for (Module* m : model->modules()) {
      if (auto* moe = dynamic_cast<MoeMlp*>(m)) ++sparse, wrong += moe->expert_group() != want ? 1 : 0;
    }
    if (wrong > 0 || (want != nullptr && sparse == 0)) {
      return absl::InvalidArgumentError(cat(
          "model.ep_size ", mesh.shape().expert, ": the model, a ", model_type_name(*model), ", ",
          sparse == 0      ? "has no experts to split (train it with ep_size 1)"
          : want == nullptr ? "splits its experts over ranks the mesh has no ep axis for"
                            : "was built with every expert here, not on the mesh's expert group",
          " (build it with build_model(spec, mesh), graph/build_model.h)"));
    }
  }
  if (config.micro_batch_size <= 0)
    return absl::InvalidArgumentError(cat("micro batch size ", config.micro_batch_size, " must be > 0"));
  if (config.gradient_accumulation_steps <= 0)
    return absl::InvalidArgumentError(
        cat("gradient_accumulation_steps ", config.gradient_accumulation_steps, " must be > 0"));
  if (config.gradient_clipping < 0)
    return absl::InvalidArgumentError(cat("gradient_clipping ", config.gradient_clipping, " must be >= 0"));
  if (const int chunks = layout.pipeline_chunks(); chunks > 1) {
    // Interleaved stages (pipeline.num_layers_per_virtual_stage).
    const std::string key = cat("pipeline.num_layers_per_virtual_stage (", chunks, " model chunks per stage): ");
    const absl::Status ok = check_interleaving(config.pipeline.schedule, stages,
                                               static_cast<int>(config.gradient_accumulation_steps), chunks);
    if (!ok.ok()) return absl::InvalidArgumentError(cat(key, ok.message()));
    if (const std::optional<int64_t> k = config.activation_checkpointing.number_checkpoints) {
      return absl::InvalidArgumentError(cat(
          key, "activation_checkpointing.number_checkpoints ", *k, " splits a stage's blocks as one run, and the "
          "chunks' blocks are not one; use pipeline.activation_checkpoint_interval (segments within each chunk)"));
    }
  }
  std::unique_ptr<Engine> engine(new Engine(std::move(model), config, backend, mesh));
  ZE_RETURN_IF_ERROR(engine->init());
  return engine;
}

Engine::Engine(std::unique_ptr<Module> model, const EngineConfig& config, Backend& backend, const DeviceMesh& mesh)
    : model_(std::move(model)),
      config_(config),
      backend_(backend),
      mesh_(&mesh),
      ctx_(backend, config.param_dtype),
      scaler_(config.loss_scaler),
      scheduler_(config.scheduler, config.optimizer.lr, 
                 /*momentum_capable=*/config.optimizer.type != OptimizerType::kSGD) {}

Engine::~Engine() {
  for (Context* c : contexts()) c->clear();
  for (Parameter* p : model_->parameters()) {
    p->data = p->grad = Tensor();
    p->set_index(-1);  // no engine holds it: requires_grad may change again
  }
}

namespace {

// The parameters of the experts this rank holds (graph/moe.h).
std::unordered_set<const Parameter*> expert_parameter_set(Module& model) {
  std::unordered_set<const Parameter*> out;
  for (Module* m : model.modules()) {
    if (auto* moe = dynamic_cast<MoeMlp*>(m)) {
      for (Parameter* p : moe->expert_parameters()) out.insert(p);
    }
  }
  return out;
}

}  // namespace

absl::Status Engine::check_frozen_parameters(const std::unordered_set<const Parameter*>& experts) {
  // Every rank of a data (or tensor) group lays its buffers out and issues
  // its reductions from the same frozen set, and the stages holding a tied
  // table sum its gradient only if they all train it: a rank that froze
  // other parameters would hang its group's collectives. Each group
  // compares count, unsplit elements and a hash of the names (48 bits: exact
  // in a double); then the world agrees on every finding, so every rank returns
  // the same error (none waits in a collective another rank gave up on).
  auto fingerprint = [](const std::vector<Parameter*>& params) {
    std::array<double, 3> f{0, 0, 0};
    uint64_t h = 0xcbf29ce484222325ull;
    for (const Parameter* p : params) {
      if (p->requires_grad()) continue;
      f[0] += 1;
      f[1] += static_cast<double>(shape_numel(p->global_shape()));  // a tensor rank's slice differs
      for (char ch : p->name() + ";") h = (h ^ static_cast<unsigned char>(ch)) * 0x100000001b3ull;
    }
    f[2] = static_cast<double>(h >> 16);
    return f;
  };
  auto differs = [&](Communicator& group, const std::vector<Parameter*>& params) -> absl::StatusOr<double> {
    if (group.world_size() == 1) return 0.0;
    const std::array<double, 3> f = fingerprint(params);
    std::array<double, 6> both{f[0], f[1], f[2], -f[0], -f[1], -f[2]};
    ZE_RETURN_IF_ERROR(annotate(group.all_reduce_doubles(both.data(), 6, ReduceOp::kMax),
                                "comparing the frozen parameters of the ranks"));
    for (int i = 0; i < 3; ++i)
      if (both[i] != -both[i + 3]) return 1.0;
    return 0.0;
  };
  const std::vector<Parameter*> params = model_->parameters();
  const TrainableCount count = count_trainable(*model_);
  const int stages = mesh_->shape().pipeline;
  // found[0]: -(1 + this stage) when it has nothing to train, else -1e18,
  // so the world's max names the first such stage; [1..3]: 1 where the data
  // group, the tensor group, the tied table's stages differ.
  std::array<double, 4> found{count.trainable == 0 ? -(mesh_->coordinates().pipeline + 1.0) : -1e18, 0, 0, 0};
  if (mesh_->shape().expert > 1) {
    // Expert parallelism: the data group holds the same dense parameters,
    // the expert-data group the same experts.
    std::vector<Parameter*> dense, mine;
    for (Parameter* p : params) (experts.count(p) ? mine : dense).push_back(p);
    ZE_ASSIGN_OR_RETURN(found[1], differs(comm(), dense));
    ZE_ASSIGN_OR_RETURN(const double e, differs(mesh_->expert_data(), mine));
    found[1] = std::max(found[1], e);
  } else {
    ZE_ASSIGN_OR_RETURN(found[1], differs(comm(), params));
  }
  if (mesh_->shape().tensor > 1) {
    ZE_ASSIGN_OR_RETURN(found[2], differs(mesh_->tensor(), params));
  }
  if (Communicator* tied = mesh_->embedding()) {
    ZE_ASSIGN_OR_RETURN(found[3], differs(*tied, model_of(*model_).parameters_tied_across_stages()));
  }
  if (mesh_->world().world_size() > 1) {
    ZE_RETURN_IF_ERROR(annotate(mesh_->world().all_reduce_doubles(found.data(), 4, ReduceOp::kMax),
                                "agreeing on the frozen parameters"));
  }
  if (found[0] > -1e18) {
    if (stages > 1) {
      return absl::InvalidArgumentError(cat(
          "no trainable parameters: pipeline stage ", static_cast<int>(-found[0]) - 1, " of ", stages,
          " holds only frozen parameters (requires_grad false); a stage with nothing to train is not supported: "
          "freeze fewer, or cut the stages elsewhere"));
    }
    return absl::InvalidArgumentError(cat(
        "no trainable parameters: every one of the model's ", params.size(), " parameters (", count.frozen,
        " elements) is frozen (requires_grad false), so there is nothing for the optimizer to train; freeze fewer "
        "(model.freeze patterns, graph/freeze.h)"));
  }
  const char* groups[] = {"data-parallel group", "tensor-parallel group", "pipeline stages sharing the tied embedding"};
  for (int i = 1; i <= 3; ++i) {
    if (found[i] > 0) {
      return absl::InvalidArgumentError(cat(
          "the ranks of a ", groups[i - 1], " freeze different parameters: every rank must freeze the same ones "
          "(the same model.freeze patterns, applied before initialize); this rank freezes ",
          fingerprint(i == 3 ? model_of(*model_).parameters_tied_across_stages() : params)[0], " of them"));
    }
  }
  return absl::OkStatus();
}

absl::Status Engine::init() {
  auto experts = std::make_shared<const std::unordered_set<const Parameter*>>(
      mesh_->shape().expert > 1 ? expert_parameter_set(*model_) : std::unordered_set<const Parameter*>());
  ZE_RETURN_IF_ERROR(check_frozen_parameters(*experts));
  ModelStateOptions o;
  o.zero = config_.zero;
  o.aio = config_.aio;
  o.param_dtype = config_.param_dtype;
  o.grad_dtype = config_.gradient_dtype();
  o.optimizer_precision = config_.optimizer_precision;
  o.optimizer = config_.optimizer;
  o.seed = config_.seed;
  o.skip_init = config_.skip_init;
  o.post_reduce_scale = config_.post_reduce_scale;
  o.force_offload_path = config_.force_offload_path;
  if (mesh_->shape().expert > 1) {
    // Expert parallelism: the experts this rank holds live in a state of
    // their own over the ranks that hold the same experts (DeepSpeed's
    // expert-data-parallel group); the rest over the whole data group.
    ModelStateOptions eo = o;
    eo.holds = [experts](const Parameter& p) { return experts->count(&p) > 0; };
    o.holds = [experts](const Parameter& p) { return experts->count(&p) == 0; };
    ZE_ASSIGN_OR_RETURN(expert_state_, ModelState::create(*model_, eo, backend_, mesh_->expert_data()));
  }
  ZE_ASSIGN_OR_RETURN(state_, ModelState::create(*model_, o, backend_, comm()));
  if (expert_state_) {
    both_states_ = std::make_unique<FanOutHooks>(std::vector<ModuleHooks*>{state_.get(), expert_state_.get()});
  }
  // Pipeline: a context for each micro-batch that can be in flight on this
  // stage (1F1B: min(P - s, M); GPipe: M; interleaved: (chunk, micro-batch)
  // pairs, at most its warm-up forwards + 1).
  if (pipelined()) {
    const std::vector<PipeInstruction> order =
        pipeline_compute_order(config_.pipeline.schedule, mesh_->shape().pipeline, mesh_->coordinates().pipeline,
                               static_cast<int>(config_.gradient_accumulation_steps), pipeline_chunks());
    for (int i = 1; i < max_micro_batches_in_flight(order); ++i)
      pipeline_contexts_.push_back(std::make_unique<Context>(backend_, config_.param_dtype));
  }
  for (Context* c : contexts()) ZE_RETURN_IF_ERROR(configure(*c));
  return absl::OkStatus();
}

absl::Status Engine::configure(Context& ctx) {
  ctx.set_hooks(both_states_ ? static_cast<ModuleHooks*>(both_states_.get()) : state_.get());
  // activation_checkpointing.number_checkpoints = K: the model's layers in K
  // contiguous segments of (as) equal (as possible) length, each keeping only
  // its input (K = number of layers: every layer its own segment).
  // With a pipeline, activation_checkpoint_interval = K instead: segments of
  // K consecutive layers of the stage (DeepSpeed's PipelineModule).
  const int64_t interval = config_.pipeline.activation_checkpoint_interval;
  if (const std::optional<int64_t> k = config_.activation_checkpointing.number_checkpoints) {
    if (interval > 0) {
      return absl::InvalidArgumentError(cat("activation_checkpointing.number_checkpoints ", *k,
                                            " and pipeline.activation_checkpoint_interval ", interval,
                                            " both set how layers are checkpointed: keep one"));
    }
    ZE_ASSIGN_OR_RETURN(auto segments, split_checkpoint_segments(model_->checkpointable_layers(), *k));
    ctx.set_checkpoint_segments(std::move(segments));
  } else if (interval > 0) {
    // Interleaved: segments within each chunk (a chunk's forward is one pass).
    std::vector<std::vector<Module*>> segments;
    for (int c = 0; c < pipeline_chunks(); ++c) {
      const std::vector<Module*> layers = chunk_module(c).checkpointable_layers();
      for (size_t i = 0; i < layers.size(); i += static_cast<size_t>(interval)) {
        segments.emplace_back(layers.begin() + i, layers.begin() + std::min(layers.size(), i + interval));
      }
    }
    ctx.set_checkpoint_segments(std::move(segments));
  }
  // partition_activations (DeepSpeed's): each tensor rank keeps 1/T of every
  // segment input, gathered back for the recompute. Only where the inputs
  // are the same on every tensor rank: with sequence parallelism they are
  // already 1/T shards, and with T = 1 there is nothing to split.
  if (config_.activation_checkpointing.partition_activations && mesh_->shape().tensor > 1 &&
      !model_of(*model_).sequence_parallel()) {
    ctx.set_checkpoint_partition(&mesh_->tensor());
  }
  // cpu_checkpointing: segment inputs in pinned host memory of the compute
  // backend; where the CPU backend plays the device (force_offload_path), in
  // a host backend of their own, so that each backend's figures read as on a
  // GPU (the "device" without them, host memory with exactly them).
  if (checkpoint_inputs_to_host(config_, backend_.compute_tier())) {
    if (checkpoint_host_ == nullptr && backend_.compute_tier() == Tier::kHost) {
      owned_checkpoint_host_ = backend_.make_host_backend();
      checkpoint_host_ = owned_checkpoint_host_.get();
    } else if (checkpoint_host_ == nullptr) {
      checkpoint_host_ = &backend_;
    }
    ctx.set_checkpoint_offload(checkpoint_host_);
  }
  return absl::OkStatus();
}

Module& Engine::chunk_module(int chunk) {
  Module* m = model_of(*model_).pipeline_chunk(chunk);
  return m != nullptr ? *m : *model_;
}

std::vector<Context*> Engine::contexts() {
  std::vector<Context*> out{&ctx_};
  for (const auto& c : pipeline_contexts_) out.push_back(c.get());
  return out;
}

absl::Status Engine::cross_entropy(const Tensor& logits, const Tensor& targets, float grad_scale,
                                   const Tensor& losses) {
  if (const std::optional<VocabSlice> slice = model_of(*model_).logits_vocab_slice()) {
    return vocab_parallel_cross_entropy(backend_, *slice->group, logits, to_compute(targets), slice->first, grad_scale,
                                        losses);
  }
  backend_.ops().cross_entropy(logits, to_compute(targets), grad_scale, losses);
  return absl::OkStatus();
}

int64_t Engine::comm_bytes() const {
  int64_t bytes = mesh_->data().bytes_communicated();
  if (mesh_->shape().tensor > 1) bytes += mesh_->tensor().bytes_communicated();
  if (pipelined()) bytes += mesh_->pipeline().bytes_communicated();
  if (const Communicator* tied = mesh_->embedding()) bytes += tied->bytes_communicated();
  if (mesh_->shape().expert > 1) {
    bytes += mesh_->expert().bytes_communicated();
    if (&mesh_->expert_data() != &mesh_->data()) bytes += mesh_->expert_data().bytes_communicated();
  }
  return bytes;
}

Tensor Engine::to_compute(const Tensor& t) {
  if (t.tier() == backend_.compute_tier()) return t;
  Tensor out = backend_.empty(t.shape(), t.dtype(), MemCategory::kActivations);
  backend_.copy(out, t);
  return out;
}

absl::StatusOr<float> Engine::forward(const Batch& batch) {
  if (pipelined()) return refuse_with_pipeline("forward()", mesh_->shape().pipeline);
  const auto t0 = std::chrono::steady_clock::now();
  if (micro_step_ % config_.gradient_accumulation_steps == 0) {
    comm_bytes_at_step_start_ = comm_bytes();
    comm_wait_at_step_start_ = comm_wait_seconds();
  }
  ctx_.clear();  // a forward without backward (or after an error) leaves nothing behind
  if (MoeLosses* moe = model_of(*model_).moe_losses()) moe->discard_pending();
  ctx_.set_grad_enabled(true);
  for (ModelState* s : states()) s->begin_forward();
  // Dropout's key: the run's seed and the global index of this micro-batch's
  // first sample (micro_step_ counts every micro-step of the run), so masks
  // follow the sample, not the rank or the stage.
  const int64_t rows_per_rank = batch.inputs.ndim() > 0 ? batch.inputs.dim(0) : 0;
  ctx_.set_dropout_key(config_.seed,
                       first_global_sample(micro_step_, comm().world_size(), comm().rank(), rows_per_rank));
  Tensor logits = ctx_.forward(*model_, to_compute(batch.inputs));
  if (absl::Status s = ctx_.take_status(); !s.ok()) {
    ctx_.clear();
    return annotate(s, cat("forward of micro-step ", micro_step_));
  }
  absl::StatusOr<float> loss = loss_and_gradient(logits, batch.targets);
  if (!loss.ok()) {
    ctx_.clear();
    return annotate(loss.status(), cat("loss of micro-step ", micro_step_));
  }
  pending_dlogits_ = logits;
  loss_sum_ += *loss;
  timing_.forward_s += seconds_since(t0);
  return *loss;
}

absl::StatusOr<float> Engine::loss_and_gradient(const Tensor& logits, const Tensor& targets, int64_t valid_targets) {
  const int64_t vocab = logits.dim(-1), rows = logits.numel() / vocab;
  ZE_CHECK_EQ(targets.numel(), rows);
  const int64_t valid = valid_targets >= 0 ? valid_targets : count_valid_targets(targets);
  // Mean over this micro-batch's tokens, divided by the accumulation steps
  // (DeepSpeed divides the loss by GAS in backward) and by the data-parallel
  // pre-divisor (DeepSpeed divides gradients by it before communicating),
  // times the loss scale.
  const double divisor = static_cast<double>(valid) * config_.gradient_accumulation_steps * config_.pre_divide;
  const float grad_scale = valid == 0 ? 0.0f : static_cast<float>(scaler_.scale() / divisor);
  Tensor losses = backend_.empty({rows}, DType::kF32, MemCategory::kActivations);
  ZE_RETURN_IF_ERROR(cross_entropy(logits.view({rows, vocab}), targets, grad_scale, losses));
  std::vector<float> host(rows);
  backend_.copy(host.data(), losses.data(), rows * sizeof(float));
  double sum = 0.0;
  for (float l : host) sum += l;
  double loss = valid == 0 ? 0.0 : sum / valid;
  // The routers' auxiliary losses (graph/moe.h); with pipeline stages each
  // stage adds its own layers' after its forward (run_pipeline).
  if (!pipelined()) loss += finish_moe_losses(true);
  return static_cast<float>(loss);
}

double Engine::finish_moe_losses(bool new_micro_batch) {
  MoeLosses* moe = model_of(*model_).moe_losses();
  if (moe == nullptr) return 0.0;
  if (new_micro_batch) ++moe_step_.micro_batches;
  // Already means: their gradients carry the loss scale and the divisors,
  // not the token count.
  const double weighted =
      moe->finish(scaler_.scale() / (static_cast<double>(config_.gradient_accumulation_steps) * config_.pre_divide));
  if (moe->last_choices().empty()) return weighted;  // a pipeline chunk without sparse layers
  moe_step_.aux_loss += moe->last_aux_loss();
  moe_step_.z_loss += moe->last_z_loss();
  moe_step_.dropped += moe->last_dropped();
  // Per layer (a pipeline chunk adds its own layers).
  for (const auto& [layer, add] : moe->last_choices()) {
    auto it = std::find_if(moe_step_.expert_tokens.begin(), moe_step_.expert_tokens.end(),
                           [&](const auto& entry) { return entry.first == layer; });
    if (it == moe_step_.expert_tokens.end()) {
      moe_step_.expert_tokens.emplace_back(layer, add);
      continue;
    }
    for (size_t e = 0; e < it->second.size() && e < add.size(); ++e) it->second[e] += add[e];
  }
  return weighted;
}

absl::Status Engine::backward() {
  if (pipelined()) return refuse_with_pipeline("backward()", mesh_->shape().pipeline);
  ZE_CHECK(pending_dlogits_.defined()) << "backward() without a forward()";
  const auto t0 = std::chrono::steady_clock::now();
  Tensor dlogits = std::move(pending_dlogits_);
  pending_dlogits_ = Tensor();
  for (ModelState* st : states()) st->begin_backward(is_accumulation_boundary());
  ctx_.backward(*model_, dlogits);
  ZE_CHECK_EQ(ctx_.live_frames(), 0u);
  timing_.recompute_s += ctx_.take_recompute_seconds();
  // The hooks' first error (a gather), else the reductions' (end_backward
  // waits for every one in flight either way).
  absl::Status s = ctx_.take_status();
  for (ModelState* st : states()) s.Update(st->end_backward());
  timing_.backward_s += seconds_since(t0);
  return annotate(s, cat("backward of micro-step ", micro_step_));
}

absl::StatusOr<StepResult> Engine::step() {
  if (pipelined()) return refuse_with_pipeline("step()", mesh_->shape().pipeline);
  return finish_micro_step();
}

absl::StatusOr<StepResult> Engine::train_batch(const MicroBatchSource& next) {
  if (pipelined()) return run_pipeline(next);
  ZE_CHECK(micro_step_ % config_.gradient_accumulation_steps == 0) << "train_batch() in the middle of an accumulation";
  executed_.clear();
  StepResult r;
  for (int m = 0; m < config_.gradient_accumulation_steps; ++m) {
    ZE_ASSIGN_OR_RETURN(const Batch batch, next(m));
    ZE_RETURN_IF_ERROR(forward(batch).status());
    executed_.push_back({PipeOp::kForward, m});
    ZE_RETURN_IF_ERROR(backward());
    executed_.push_back({PipeOp::kBackward, m});
    ZE_ASSIGN_OR_RETURN(r, step());
  }
  return r;
}

absl::StatusOr<StepResult> Engine::finish_micro_step() {
  const auto t0 = std::chrono::steady_clock::now();
  StepResult r;
  r.boundary = is_accumulation_boundary();
  ++micro_step_;
  r.lr = static_cast<float>(scheduler_.lr());
  r.global_step = global_step_;
  r.skipped_steps = skipped_steps_;
  r.loss_scale = r.next_loss_scale = scaler_.scale();
  if (!r.boundary) {
    timing_.step_s += seconds_since(t0);
    return r;
  }

  // Overflow anywhere skips the step everywhere: the flag is all-reduced
  // (max) over the world, tensor ranks included.
  bool overflow = false;
  if (config_.check_grad_overflow) {
    int64_t local = 0;
    std::string names;
    for (ModelState* st : states()) {
      if (st->local_nonfinite_grads() == 0) continue;
      ++local;
      names += (names.empty() ? "" : ", ") + st->nonfinite_gradient_names();
    }
    ZE_ASSIGN_OR_RETURN(double any, mesh_->world().all_reduce_max(local > 0 ? 1.0 : 0.0));
    overflow = any > 0;
    if (local > 0) r.overflow_in = cat(names, " (rank ", comm().rank(), ")");
    else if (overflow) r.overflow_in = "another rank's partition";
  }
  ZE_RETURN_IF_ERROR(annotate(scaler_.update(overflow),
                              cat("step ", global_step_ + 1, ": inf/NaN gradients in ", r.overflow_in)));
  r.next_loss_scale = scaler_.scale();
  if (!overflow) {
    // The global norm of the loss-scaled gradients: every rank's owned part,
    // summed in double. Then DeepSpeed's combined unscale-and-clip:
    // c = max(1, (norm/scale + 1e-6) / clip); grads *= 1 / (c scale).
    const bool tensor_split = mesh_->shape().tensor > 1;
    double square_sum = local_norm_square_sum();
    if (expert_state_ != nullptr || !state_->grads_replicated()) {
      ZE_ASSIGN_OR_RETURN(square_sum, comm().all_reduce_sum(square_sum));
    }
    if (tensor_split) {
      ZE_ASSIGN_OR_RETURN(square_sum, mesh_->tensor().all_reduce_sum(square_sum));
    }
    if (pipelined()) {
      ZE_ASSIGN_OR_RETURN(square_sum, mesh_->pipeline().all_reduce_sum(square_sum));
    }
    const double scale = r.loss_scale;
    r.grad_norm = std::sqrt(square_sum) / scale;
  }
  // Without the overflow check a non-finite norm still means inf/NaN
  // gradients: the update would write them into every weight, so the step is
  // skipped like an overflow (the caller decides whether the run goes on).
  if (!overflow && !std::isfinite(r.grad_norm)) {
    overflow = true;
    r.overflow_in = cat("the global gradient norm (", r.grad_norm, ")");
  }
  if (overflow) {
    // DeepSpeed: no update and no schedule step, but the step counts.
    r.skipped = true;
    r.grad_norm = -1.0;  // DeepSpeed's marker for a non-finite norm
    ++skipped_steps_;
  } else {
    const double scale = r.loss_scale;
    double combined = scale;
    if (config_.gradient_clipping > 0.0f) {
      const double coef = (r.grad_norm + 1e-6) / config_.gradient_clipping;
      if (coef > 1.0) combined = coef * scale;
    }
    Optimizer::StepArgs args;
    args.step = global_step_ - skipped_steps_ + 1;  // incremented before the kernel, as DeepSpeed
    args.lr = r.lr;
    args.grad_scale = static_cast<float>(1.0 / combined);
    if (auto betas = scheduler_.betas()) {
      args.betas = std::make_pair(static_cast<float>(betas->first), static_cast<float>(betas->second));
    }
    for (ModelState* st : states()) ZE_RETURN_IF_ERROR(st->apply_step(args));
    scheduler_.step();
  }
  for (ModelState* st : states()) st->zero_grads();
  r.global_step = ++global_step_;
  r.skipped_steps = skipped_steps_;
  // The loss shown is the mean over the global batch: every rank's mean.
  double loss = loss_sum_ / config_.gradient_accumulation_steps;
  ZE_ASSIGN_OR_RETURN(loss, comm().all_reduce_sum(loss));
  // Pipeline: only the last stage has the loss; the others add zeros.
  if (pipelined()) {
    ZE_ASSIGN_OR_RETURN(loss, mesh_->pipeline().all_reduce_sum(loss));
  }
  r.loss = static_cast<float>(loss / comm().world_size());
  loss_sum_ = 0.0;
  timing_.step_s += seconds_since(t0);
  r.forward_s = timing_.forward_s;
  r.backward_s = timing_.backward_s;
  r.step_s = timing_.step_s;
  r.recompute_s = timing_.recompute_s;
  r.pipeline_wait_s = timing_.pipeline_wait_s;
  r.pipeline_s = timing_.pipeline_s;
  r.comm_bytes = comm_bytes() - comm_bytes_at_step_start_;
  r.comm_wait_s = comm_wait_seconds() - comm_wait_at_step_start_;
  if (moe_step_.micro_batches > 0) {
    r.moe = std::exchange(moe_step_, MoeStepStats());
    r.moe->aux_loss /= r.moe->micro_batches;
    r.moe->z_loss /= r.moe->micro_batches;
  }
  timing_ = StepResult();
  return r;
}

double Engine::local_norm_square_sum() {
  // With tensor parallelism the slices of split parameters add up over the
  // tensor group, while the replicated ones (layer norms, the position
  // table, row-parallel biases: the same gradient on every tensor rank)
  // count once, from tensor rank 0 (Megatron's rule). With pipeline stages
  // each adds its own parameters, the tied token table counted once, on the
  // first stage (its copies are equal).
  const bool replica_tensor_rank = mesh_->shape().tensor > 1 && mesh_->coordinates().tensor != 0;
  std::vector<Parameter*> copies;
  if (pipelined() && mesh_->coordinates().pipeline != 0) copies = model_of(*model_).parameters_tied_across_stages();
  double dense = !replica_tensor_rank && copies.empty()
                     ? state_->local_grad_square_sum()
                     : state_->local_grad_square_sum([&](const Parameter& p) {
                         if (std::find(copies.begin(), copies.end(), &p) != copies.end()) return false;
                         return !replica_tensor_rank || p.slice().has_value();
                       });
  if (expert_state_ == nullptr) return dense;
  // Expert parallelism: the sum over the data group follows. Gradients
  // every rank of a group holds whole (stage 0) count from its first rank
  // only; each expert-data group holds other experts, so their squares add.
  if (state_->grads_replicated() && comm().rank() != 0) dense = 0;
  double experts = replica_tensor_rank ? 0.0 : expert_state_->local_grad_square_sum();  // no expert is split
  if (expert_state_->grads_replicated() && mesh_->expert_data().rank() != 0) experts = 0;
  return dense + experts;
}

absl::StatusOr<float> Engine::evaluate(const Batch& batch) {
  if (pipelined()) return evaluate_pipeline(batch);
  ctx_.clear();
  ctx_.set_grad_enabled(false);
  for (ModelState* st : states()) st->set_evaluating(true);
  Tensor logits = ctx_.forward(*model_, to_compute(batch.inputs));
  for (ModelState* st : states()) st->set_evaluating(false);
  ctx_.set_grad_enabled(true);
  if (absl::Status s = ctx_.take_status(); !s.ok()) {
    ctx_.clear();
    return annotate(s, "evaluation forward");
  }
  return evaluation_loss(logits, batch.targets);
}

absl::StatusOr<float> Engine::evaluation_loss(const Tensor& logits, const Tensor& targets) {
  const int64_t vocab = logits.dim(-1), rows = logits.numel() / vocab;
  if (targets.numel() != rows) {
    return absl::InvalidArgumentError(cat("evaluation: ", targets.numel(), " targets ", shape_string(targets.shape()),
                                          " for ", rows, " rows of logits ", shape_string(logits.shape())));
  }
  Tensor losses = ctx_.activation({rows});
  ZE_RETURN_IF_ERROR(annotate(cross_entropy(logits.view({rows, vocab}), targets, 0.0f, losses), "evaluation"));
  std::vector<float> host(rows);
  backend_.copy(host.data(), losses.data(), rows * sizeof(float));
  const int64_t valid = count_valid_targets(targets);
  double sum = 0.0;
  for (float l : host) sum += l;
  return valid == 0 ? 0.0f : static_cast<float>(sum / valid);
}

EngineProgress Engine::progress() const {
  return {global_step_, skipped_steps_, micro_step_, scheduler_.last_batch_iteration(), scaler_.state()};
}

void Engine::restore(const EngineProgress& p) {
  ZE_CHECK(!pending_dlogits_.defined() && micro_step_ % config_.gradient_accumulation_steps == 0)
      << "restore between optimizer steps only";
  global_step_ = p.global_step;
  skipped_steps_ = p.skipped_steps;
  // The micro-steps this configuration would have run to reach the saved
  // step, not the saved count: a resume may change the accumulation steps
  // (the same global batch on fewer ranks), and the micro-step count keys the
  // dropout masks and must stay a multiple of the new value.
  micro_step_ = p.global_step * config_.gradient_accumulation_steps;
  scheduler_.set_last_batch_iteration(p.scheduler_iteration);
  scaler_.set_state(p.loss_scaler);
  loss_sum_ = 0.0;
  for (ModelState* st : states()) st->zero_grads();
}

std::vector<float> Engine::master_values(const Parameter& p) {
  absl::StatusOr<std::vector<float>> v = state_of(p).gather_master(p);
  ZE_CHECK(v.ok()) << v.status().ToString();
  return *std::move(v);
}

std::vector<float> Engine::grad_values(const Parameter& p) {
  ZE_CHECK(p.requires_grad()) << p.name() << " is frozen: it has no gradient";
  ZE_CHECK(p.grad.defined()) << p.name() << " has no full gradient on this rank (stage "
                             << stage_number(state_->stage()) << ")";
  return download_fp32(backend_, p.grad.view({p.numel()}));
}

}  // namespace zero
