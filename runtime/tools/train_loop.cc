// zero-train's loop; see train_loop.h.
#include "runtime/tools/train_loop.h"

#include <omp.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_format.h"
#include "comm/comm_log.h"
#include "core/signals.h"
#include "core/status.h"
#include "core/strings.h"
#include "graph/build_model.h"
#include "graph/freeze.h"
#include "kernels/cpu/bf16_gemm_policy.h"
#include "kernels/cpu/simd_kernels.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/hf_model_files.h"
#include "runtime/checkpoint/hf_weights.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/config/hf_config.h"
#include "runtime/engine/engine.h"
#include "runtime/tools/evaluation.h"
#include "runtime/tools/flops_profile_report.h"
#include "runtime/tools/gemm_rate.h"
#include "runtime/tools/model_family.h"
#include "runtime/tools/monitors.h"
#include "runtime/tools/progress.h"

namespace zero {

namespace {

// "DIR/TAG" of the checkpoint a run resumed from, or "the model" when none.
std::string last_checkpoint_name(const std::string& resume_dir, const absl::StatusOr<ResumePoint>& point) {
  return resume_dir.empty() || !point.ok() ? std::string("the model") : cat(resume_dir, "/", point->tag);
}

// The block ranges stage s of the pipeline holds: one, or one per chunk when interleaved.
std::vector<SplitRange> stage_block_ranges(const GptConfig& g, const PipelineConfig& p, int s) {
  const PipelineStage st = *gpt_pipeline_stage(g, s, p.stages, p.partition_method, p.num_layers_per_virtual_stage);
  return st.chunk_layers.empty() ? std::vector<SplitRange>{st.layers} : st.chunk_layers;
}

// One zero-train run as the phases it goes through, in this order (each a
// method, run_training below calls them): take the inputs (the data and the
// evaluation set, opened before the run by open_training_data), choose MFU's
// peak, attach the comms logger, build (the
// mesh, the model through build_model, the engine: the same calls
// zero-estimate's dry run and the benchmarks make), describe the set-up,
// restore (a checkpoint or initial weights), open the outputs (progress,
// monitors, metrics), train (one run_step per optimizer step, until run.steps
// or a signal), finish (the last save and the summaries).
class TrainingRun {
 public:
  TrainingRun(const RunConfig& c, TrainingData data, Backend& backend, Communicator& comm, std::ostream& rank0_out)
      : c_(c),
        g_(c.model.gpt),
        backend_(backend),
        comm_(comm),
        rank0_out_(rank0_out),
        out_(comm.rank() == 0 ? rank0_out : discard_),
        inputs_(std::move(data)) {}
  ~TrainingRun() {
    if (comm_log_) comm_.set_log(nullptr);  // the world outlives the run; the groups go with the mesh
  }

  void take_inputs();
  void choose_mfu_peak();
  absl::Status attach_comms_logger();
  absl::Status build();
  void describe();
  // False: the checkpoint restored is at run.steps already (said so).
  absl::StatusOr<bool> restore();
  absl::Status open_outputs();
  // 0 when every step ran, else the signal that stopped the run at a step
  // boundary (the same one on every rank).
  absl::StatusOr<int> train();
  absl::Status finish();

 private:
  absl::Status run_step(int64_t step);
  // Applies model.freeze to this rank's model before the engine is built.
  absl::Status apply_freeze(Module& model);
  absl::Status save();
  // A signal stops the run at a step boundary, the same one on every rank.
  absl::StatusOr<int> stop_signal();
  // comms_logger verbose lines the communication threads handed over,
  // printed by this thread between steps (never written to out_ from another
  // thread).
  void print_verbose();
  bool fp16() const { return c_.engine.param_dtype == DType::kF16; }

  const RunConfig& c_;
  const GptConfig& g_;
  Backend& backend_;
  Communicator& comm_;
  std::ostream& rank0_out_;
  std::ostringstream discard_;
  std::ostream& out_;  // rank 0's output; the other ranks' goes nowhere
  const int64_t rss_baseline_ = process_rss_bytes();
  // The driver's figure for the device (cudaMemGetInfo), and the tracked one,
  // before the engine allocates: the summary compares their growth.
  const std::optional<int64_t> device_baseline_ = backend_.device_memory_in_use();
  const int64_t tracked_device_baseline_ =
      MemoryTracker::global().snapshot().reserved[static_cast<int>(Tier::kDevice)].current;

  TrainingData inputs_;  // until take_inputs()
  std::unique_ptr<DataLoader> data_;
  std::unique_ptr<Evaluator> evaluator_;
  double peak_tflops_ = 0;
  std::string peak_what_;
  struct VerboseLines {
    std::mutex mu;
    std::string text;
  } verbose_lines_;
  // DeepSpeed's comms_logger: the world and the groups split from it record
  // into one log, which outlives them (declared before the mesh).
  std::unique_ptr<CommLog> comm_log_;
  std::unique_ptr<DeviceMesh> mesh_;
  std::unique_ptr<Engine> engine_;
  // This rank's trainable and frozen elements, when model.freeze froze any.
  std::optional<TrainableCount> frozen_count_;
  // find_resume_target's answer, found by build().
  absl::StatusOr<std::optional<ResumeTarget>> resume_target_ = std::nullopt;
  std::string resume_dir_;
  absl::StatusOr<ResumePoint> point_ = absl::NotFoundError("");
  // The tokenizer and generation files of the model (init_from's, or the
  // resumed checkpoint's), saved with each checkpoint.
  std::vector<ModelFile> model_files_;
  int64_t first_step_ = 0;
  std::unique_ptr<ProgressReporter> progress_;
  std::unique_ptr<Monitors> monitors_;
  // The checkpoint this run's weights were last in: the one resumed, then each save.
  std::string last_checkpoint_;
  int64_t last_saved_ = 0;
  // Steps in a row whose gradients or loss were inf/NaN (skipped, never applied).
  int64_t nonfinite_run_ = 0;
};

void TrainingRun::take_inputs() {
  data_ = std::move(inputs_.train);
  if (c_.run.eval_every > 0 && inputs_.val) evaluator_ = Evaluator::create(c_, std::move(inputs_.val));
}

void TrainingRun::choose_mfu_peak() {
  // MFU's denominator: the peak given, else the CPU's ISA peak, or on a GPU
  // this rank's measured rate on the model's MLP GEMM (gemm_rate.h).
  peak_tflops_ = c_.run.peak_tflops;
  peak_what_ = absl::StrFormat("%g TFLOP/s per rank (run.peak_tflops)", peak_tflops_);
  if (peak_tflops_ <= 0) {
    const MfuPeak peak =
        default_mfu_peak(backend_, c_.engine.param_dtype, c_.engine.micro_batch_size * g_.seq_len,
                         g_.d_model, g_.ffn_width() / c_.tensor_size());
    peak_tflops_ = peak.tflops;
    peak_what_ = peak.what;
    MemoryTracker::global().reset_peaks();  // a measurement's buffers are gone; the run's peaks start here
  }
}

absl::Status TrainingRun::attach_comms_logger() {
  if (c_.comms_logger.enabled && (c_.comms_logger.prof_all || !c_.comms_logger.prof_ops.empty())) {
    CommLog::VerboseSink verbose;
    if (c_.comms_logger.verbose && comm_.rank() == 0) {
      verbose = [this](const std::string& line) {
        std::lock_guard<std::mutex> lock(verbose_lines_.mu);
        verbose_lines_.text += line;
        verbose_lines_.text += '\n';
      };
    }
    // The config has checked the names.
    ZE_ASSIGN_OR_RETURN(
        comm_log_, CommLog::create(c_.comms_logger.prof_all ? std::vector<std::string>{} : c_.comms_logger.prof_ops,
                                   std::move(verbose)));
    comm_.set_log(comm_log_.get(), "world");
  }
  return absl::OkStatus();
}

void TrainingRun::print_verbose() {
  std::string text;
  {
    std::lock_guard<std::mutex> lock(verbose_lines_.mu);
    text.swap(verbose_lines_.text);
  }
  out_ << text;
}

absl::Status TrainingRun::build() {
  // The mesh (comm/device_mesh.h): tensor groups of T adjacent ranks, ZeRO
  // over the data groups; the model splits over this rank's tensor group.
  // With pipeline stages (outermost), this rank builds its own stage.
  // The config checked the sizes against mesh.order.
  ZE_ASSIGN_OR_RETURN(const MeshLayout layout, MeshLayout::create(c_.mesh_order, c_.mesh_sizes(), comm_.world_size()));
  ZE_ASSIGN_OR_RETURN(mesh_, DeviceMesh::create(comm_, layout));
  if (comm_log_) {
    mesh_->data().set_log(comm_log_.get(), "data");
    if (c_.tensor_size() > 1) mesh_->tensor().set_log(comm_log_.get(), "tensor");
    if (c_.pipeline_size() > 1) mesh_->pipeline().set_log(comm_log_.get(), "pipeline");
    if (c_.expert_size() > 1) {
      mesh_->expert().set_log(comm_log_.get(), "expert");
      mesh_->expert_data().set_log(comm_log_.get(), "expert_data");
    }
    if (mesh_->embedding() != nullptr) mesh_->embedding()->set_log(comm_log_.get(), "embedding");
  }
  ZE_ASSIGN_OR_RETURN(std::unique_ptr<Gpt> model,
                      build_model(g_, *mesh_, {c_.sequence_parallel, c_.engine.pipeline.partition_method,
                                                    c_.engine.pipeline.num_layers_per_virtual_stage,
                                                    c_.tp_overlap_comm}));
  ZE_RETURN_IF_ERROR(apply_freeze(*model));
  // The checkpoint to resume is found before the engine is built: the
  // parameters then start at zero, not at run.seed's values, which loading
  // would overwrite (the initialisation is 1.5 s per 100M parameters on a
  // core: most of a restart's time to its first step).
  // Rank 0's answer on every rank: with checkpoint.use_node_local_storage
  // another host may hold fewer checkpoints, or none.
  resume_target_ = agree_resume_target(mesh_->world(), c_.run.resume, c_.run.save_dir);
  EngineConfig engine = c_.engine;
  engine.skip_init = resume_target_.ok() && resume_target_->has_value();
  ZE_ASSIGN_OR_RETURN(engine_, Engine::create(std::move(model), engine, backend_, *mesh_));
  return absl::OkStatus();
}

absl::Status TrainingRun::apply_freeze(Module& model) {
  const std::vector<std::string>& patterns = c_.model.freeze;
  if (g_.lora.enabled()) frozen_count_ = count_trainable(model);  // the model froze its base itself
  if (patterns.empty()) return absl::OkStatus();
  // With pipeline stages each rank holds its stage's parameters: a pattern
  // must match somewhere in the pipeline, not on every stage.
  const bool staged = c_.pipeline_size() > 1;
  absl::StatusOr<FreezeCount> count =
      freeze_matching(model, patterns, staged ? UnmatchedPattern::kAllow : UnmatchedPattern::kRefuse);
  if (!count.ok()) return absl::InvalidArgumentError(cat("model.freeze: ", count.status().message()));
  if (staged) {
    std::vector<double> matched(count->per_pattern.begin(), count->per_pattern.end());
    ZE_RETURN_IF_ERROR(mesh_->pipeline().all_reduce_doubles(matched.data(), static_cast<int64_t>(matched.size()),
                                                            ReduceOp::kSum));
    for (size_t i = 0; i < patterns.size(); ++i) {
      if (matched[i] == 0) {
        return absl::InvalidArgumentError(
            cat("model.freeze: freeze pattern \"", patterns[i], "\" matches no parameter on any of the ",
                c_.pipeline_size(), " pipeline stages (a pattern must match a whole dotted name, e.g. "
                "\"h\\\\.0\\\\..*\" for every parameter of block 0)"));
      }
    }
  }
  frozen_count_ = count_trainable(model);
  return absl::OkStatus();
}

void TrainingRun::describe() {
  out_ << absl::StrFormat(
      "model: %s vocab=%d seq_len=%d, %.2fM parameters%s (%s)%s\n", model_family_description(g_), g_.vocab_size,
      g_.seq_len, static_cast<double>(g_.num_parameters()) / 1e6,
      c_.tensor_size() > 1 || c_.pipeline_size() > 1
          ? absl::StrFormat(", %.2fM on rank 0 (its %s)", static_cast<double>(engine_->num_parameters()) / 1e6,
                            c_.pipeline_size() > 1 && c_.tensor_size() > 1 ? "stage's tensor slice"
                            : c_.pipeline_size() > 1                       ? "stage"
                                                                           : "tensor slice")
          : std::string(),
      dtype_name(c_.engine.param_dtype),
      g_.dropout > 0.0f ? absl::StrFormat(", dropout %g (seed %d)", g_.dropout, c_.engine.seed) : "");
  if (frozen_count_) {
    const TrainableCount& n = *frozen_count_;
    out_ << absl::StrFormat("parameters: %d (%d trainable, %d frozen)%s\n", n.trainable + n.frozen, n.trainable,
                            n.frozen,
                            c_.tensor_size() > 1 || c_.pipeline_size() > 1 ? " on rank 0" : "");
  }
  if (g_.lora.enabled()) {
    const LoraConfig& l = g_.lora;
    std::string layers;
    for (const std::string& name : lora_adapted_names(g_, l)) layers += cat(layers.empty() ? "" : ", ", name);
    out_ << absl::StrFormat("LoRA: r %d, lora_alpha %g (scaling %g%s), dropout %g on %s: %d adapter parameters "
                            "train, the base model's %d are frozen\n",
                            l.r, l.alpha, l.scaling(), l.use_rslora ? ", rsLoRA" : "", l.dropout, layers,
                            g_.lora_parameters(), g_.num_parameters() - g_.lora_parameters());
  }
  out_ << "data: " << data_->samples().describe() << "\n";
  if (evaluator_) {
    out_ << absl::StrFormat(
        "eval: every %d steps and at the end, the mean loss over %d fixed batches of %d sequences "
        "from %s\n",
        c_.run.eval_every, evaluator_->batches(), evaluator_->rows_per_batch(), evaluator_->samples().describe());
  }
  out_ << absl::StrFormat("batch: %d sequences/step = micro %d x accumulation %d x %d %srank%s; ZeRO stage %d%s\n",
                          c_.train_batch_size, c_.engine.micro_batch_size, c_.engine.gradient_accumulation_steps,
                          c_.data_size(), c_.tensor_size() * c_.pipeline_size() > 1 ? "data-parallel " : "",
                          c_.data_size() == 1 ? "" : "s", stage_number(c_.engine.zero.stage),
                          c_.engine.zero.overlap_comm ? " (overlap_comm)" : "");
  if (c_.elasticity.enabled) {
    out_ << "elasticity: the batch of " << c_.train_batch_size << " holds at " << describe_sizes(c_.elastic_valid_sizes)
         << " data-parallel ranks (micro-batch sizes " << describe_sizes(c_.elasticity.micro_batch_sizes) << ")\n";
  }
  // The windows the config left unset and the stage sized to the model (zero/window_sizes.h).
  {
    const ZeroConfig& set = c_.engine.zero;
    const ZeroConfig& used = engine_->state().zero_config();
    std::string sized;
    auto note = [&](const char* key, int64_t from, int64_t to) {
      if (from != to) sized += absl::StrFormat("%s%s %d", sized.empty() ? "" : ", ", key, to);
    };
    note("reduce_bucket_size", set.reduce_bucket_size, used.reduce_bucket_size);
    note("stage3_prefetch_bucket_size", set.prefetch_bucket_size, used.prefetch_bucket_size);
    note("stage3_max_live_parameters", set.max_live_parameters, used.max_live_parameters);
    note("stage3_max_reuse_distance", set.max_reuse_distance, used.max_reuse_distance);
    if (!sized.empty()) {
      out_ << "windows: " << sized << " elements: unset, and sized to the model (an eighth of the elements stage "
           << stage_number(set.stage) << "'s partitioning saves; DeepSpeed's defaults would hold more than that "
           << "here); set them to choose\n";
    }
  }
  if (c_.world_size > 1 && (c_.tensor_size() > 1 || c_.pipeline_size() > 1 || c_.mesh_order != kDefaultMeshOrder)) {
    out_ << "mesh: " << mesh_->layout().describe() << " (mesh.order \"" << c_.mesh_order
         << "\": the first axis varies fastest over the ranks)\n";
  }
  if (c_.tensor_size() > 1) {
    std::string first_copy;  // the ranks of the first tensor group
    for (int t = 0; t < c_.tensor_size(); ++t) {
      first_copy += cat(t == 0 ? "" : ",", mesh_->layout().rank_at({{"tp", t}}));
    }
    out_ << absl::StrFormat(
        "tensor parallel: %d ranks per tensor group (ranks %s hold the first model copy), "
        "%d data-parallel group%s; Megatron's split: heads, MLP features and vocabulary / %d%s\n",
        c_.tensor_size(), first_copy, c_.data_size(), c_.data_size() == 1 ? "" : "s", c_.tensor_size(),
        c_.sequence_parallel ? "; sequence parallel: layer norms and residuals on seq_len / T" : "");
  }
  if (c_.expert_size() > 1) {
    const int ep = c_.expert_size();
    out_ << absl::StrFormat(
        "expert parallel: %d ranks per expert group (consecutive data-parallel ranks), each holding %d of the %d "
        "experts of every sparse block; the experts' ZeRO state over the %d rank%s holding the same ones, the "
        "rest over all %d data-parallel ranks\n",
        ep, g_.moe.num_experts / ep, g_.moe.num_experts, c_.data_size() / ep, c_.data_size() / ep == 1 ? "" : "s",
        c_.data_size());
  }
  if (c_.pipeline_size() > 1) {
    // Stage s holds world ranks [s W / P, (s + 1) W / P) (comm/device_mesh.h).
    const PipelineConfig& p = c_.engine.pipeline;
    const int per_stage = c_.world_size / p.stages;
    std::string stages;
    for (int s = 0; s < p.stages; ++s) {
      std::string blocks;  // interleaved: one range per chunk
      for (const SplitRange& r : stage_block_ranges(g_, p, s))
        blocks += absl::StrFormat("%s%d-%d", blocks.empty() ? "" : ", ", r.offset, r.offset + r.size - 1);
      stages += absl::StrFormat("%s stage %d: ranks %d-%d, blocks %s", s == 0 ? "" : ";", s, s * per_stage,
                                (s + 1) * per_stage - 1, blocks);
    }
    const int chunks = p.num_layers_per_virtual_stage > 0
                           ? static_cast<int>(g_.n_layer / (p.num_layers_per_virtual_stage * p.stages))
                           : 1;
    const int m = static_cast<int>(c_.engine.gradient_accumulation_steps);
    const std::string split =
        chunks > 1 ? absl::StrFormat("interleaving (%d chunks of %d blocks per stage)", chunks,
                                     p.num_layers_per_virtual_stage)
                   : std::string(partition_method_name(p.partition_method));
    const std::string bubble =
        chunks > 1 ? absl::StrFormat("bubble (P-1)/(vM) of the compute time = %.1f%%",
                                     100.0 * interleaved_bubble_fraction(p.stages, m, chunks))
                   : absl::StrFormat("ideal bubble (P-1)/(M+P-1) = %.1f%%", 100.0 * ideal_bubble_fraction(p.stages, m));
    out_ << absl::StrFormat(
        "pipeline: %d stages split by %s (embeddings on the first, %s on the last);%s\n"
        "pipeline: %s over %d micro-batches, %s\n",
        p.stages, split,
        g_.tied_head() ? "the head and a tied copy of the token table"
                       : "the head (untied: its own weights, no copy of the token table)",
        stages, pipeline_schedule_name(p.schedule), c_.engine.gradient_accumulation_steps, bubble);
  }
  if (backend_.compute_tier() == Tier::kHost) {
    out_ << absl::StrFormat("backend: %s, %d threads per rank, %s kernels; communicator: %s\n", backend_.name(),
                            omp_get_max_threads(), cpu::simd_kernels().isa, comm_.name());
    // bf16 storage computes in fp32 where this CPU's bf16 GEMMs are the slower (kernels/cpu/bf16_gemm_policy.h).
    if (c_.engine.param_dtype == DType::kBF16) out_ << "backend: " << cpu::bf16_gemm_choice().reason << "\n";
  } else {
    out_ << absl::StrFormat("backend: %s; communicator: %s\n", backend_.description(), comm_.name());
  }
  const OptimizerPrecision& precision = c_.engine.optimizer_precision;
  out_ << absl::StrFormat(
      "optimizer: %s lr %g, clipping %g%s; %d steps\n", optimizer_type_name(c_.engine.optimizer.type),
      c_.engine.optimizer.lr, c_.engine.gradient_clipping,
      precision.narrow() ? absl::StrFormat("; %s master weights, %s states", dtype_name(precision.master),
                                           dtype_name(precision.states))
                         : "",
      c_.run.steps);
  out_.flush();

  // On a device backend "cpu" is ZeRO-Offload (zero/host_step.h); what it
  // cannot run is refused before we get here (check_backend_supports).
  const ModelState& state = engine_->state();
  if (state.host_step() == nullptr && (c_.engine.zero.offload_optimizer.device == OffloadDevice::kCpu ||
                                       c_.engine.zero.offload_param.device == OffloadDevice::kCpu)) {
    out_ << "offload: device \"cpu\" requested; on the CPU backend parameters and optimizer state already "
            "live in host memory, so nothing moves\n";
  }
  if (c_.engine.zero.offload_optimizer.device == OffloadDevice::kNvme ||
      c_.engine.zero.offload_param.device == OffloadDevice::kNvme) {
    out_ << "optimizer state: " << engine_->state().state_store().describe() << "\n";
  }
  if (state.host_step() != nullptr) {
    // With NVMe the line above says where the records are; this one how the
    // step reaches them from the device.
    out_ << (state.host_offload().optimizer_on_nvme ? "optimizer step: " : "optimizer state: ")
         << state.host_step()->describe() << "\n";
    if (state.host_offload().parameters) {
      out_ << "parameters: this rank's stage-3 shard in pinned host memory; each gather copies its chunk to "
           << backend_.name() << " first (a prefetch starts the copy early)\n";
    }
    const OffloadConfig& oo = c_.engine.zero.offload_optimizer;
    if (!oo.pin_memory || (state.host_offload().parameters && !c_.engine.zero.offload_param.pin_memory)) {
      out_ << "offload: pin_memory false: the staging and the host parameter shard are pinned anyway (the "
           << backend_.name() << " backend's host memory is always pinned)\n";
    }
  }
  if (c_.engine.loss_scaler.dynamic) {
    out_ << absl::StrFormat("fp16: dynamic loss scale from 2^%d, window %d, hysteresis %d, min %g\n",
                            c_.engine.loss_scaler.initial_scale_power, c_.engine.loss_scaler.scale_window,
                            c_.engine.loss_scaler.hysteresis, c_.engine.loss_scaler.min_scale);
  }
  if (c_.engine.scheduler.type != SchedulerType::kNone) {
    out_ << "scheduler: " << scheduler_type_name(c_.engine.scheduler.type) << "\n";
  }
  if (engine_->num_checkpoint_segments() > 0) {
    // With pipeline stages a rank checkpoints its own stage's blocks only.
    std::string blocks = absl::StrCat(g_.n_layer, " blocks");
    if (c_.pipeline_size() > 1) {
      const int stage = mesh_->coordinates().pipeline;
      int64_t n = 0;
      for (const SplitRange& r : stage_block_ranges(g_, c_.engine.pipeline, stage)) n += r.size;
      blocks = absl::StrCat("stage ", stage, "'s ", n, " blocks");
    }
    out_ << "activation checkpointing: " << blocks << " in " << engine_->num_checkpoint_segments()
         << " segments (each keeps its input; backward recomputes it)\n";
    if (engine_->checkpoint_inputs_partitioned()) {
      out_ << "activation checkpointing: partition_activations: each rank keeps 1/" << c_.tensor_size()
           << " of every segment input, all-gathered over its tensor group for the recompute\n";
    } else if (c_.engine.activation_checkpointing.partition_activations) {
      out_ << "activation checkpointing: partition_activations has no effect here ("
           << (c_.tensor_size() == 1 ? "no tensor parallelism" : "sequence-parallel inputs are 1/T shards already")
           << ")\n";
    }
    if (engine_->checkpoint_host_backend() != nullptr) {
      out_ << "activation checkpointing: cpu_checkpointing: segment inputs in pinned host memory between forward and "
              "recompute\n";
    } else if (c_.engine.activation_checkpointing.cpu_checkpointing && backend_.compute_tier() == Tier::kHost) {
      out_ << "activation checkpointing: cpu_checkpointing requested; on the CPU backend segment inputs already live "
              "in host memory\n";
    }
  }
  if (c_.dump_state) out_ << "effective config:\n" << format_effective_config(c_);
}

absl::StatusOr<bool> TrainingRun::restore() {
  // A checkpoint (the newest complete one, whatever `latest` says; "auto":
  // save_dir's, starting fresh only where there is none, never silently past
  // one) wins over run.init_from: one launch command starts a job from
  // init_from and restarts it from its checkpoint.
  if (!resume_target_.ok()) return annotate(resume_target_.status(), "resuming");
  const std::optional<ResumeTarget>& target = *resume_target_;
  const std::string& init_from = c_.run.init_from;
  if (!target && c_.run.resume == "auto") {
    out_ << "resume: auto, no checkpoint in " << c_.run.save_dir << " yet; starting from "
         << (init_from.empty() ? cat("a fresh initialisation (run.seed ", c_.engine.seed, ")") : init_from) << "\n";
  }
  if (target) {
    resume_dir_ = target->dir;
    point_ = target->point;
    if (!point_->note.empty()) out_ << "resume: " << point_->note << "\n";
    LoadOptions lo;
    lo.node_local = c_.switches.use_node_local_storage;  // first copies the shards this host lacks
    lo.log = &out_;
    ZE_RETURN_IF_ERROR(annotate(load_checkpoint(*engine_, resume_dir_, point_->tag, lo), "resuming"));
    std::error_code ec;
    const bool gone = !init_from.empty() && !std::filesystem::exists(init_from, ec);
    out_ << "resumed from " << target->name() << " at step " << engine_->global_step()
         << (init_from.empty() ? std::string()
                               : cat(" (its weights, optimizer state and step; --init-from ", init_from, " is not read",
                                     gone ? ", and is gone" : "", ")"))
         << "\n";
    // The model's files travel with each checkpoint; an older one without
    // them takes init_from's.
    ZE_ASSIGN_OR_RETURN(const Manifest m, read_manifest(resume_dir_, point_->tag));
    ZE_ASSIGN_OR_RETURN(model_files_, read_model_files(resume_dir_, point_->tag, m));
  }
  std::string files_from = target ? target->name() : "";
  if (model_files_.empty() && !init_from.empty()) {
    ZE_ASSIGN_OR_RETURN(model_files_, read_hf_model_files(init_from));
    files_from = init_from;
  }
  if (!target && !init_from.empty()) {
    ZE_RETURN_IF_ERROR(annotate(load_hf_weights(*engine_, g_, init_from), "initialising"));
    out_ << "weights initialised from " << init_from << "\n";
  }
  if (!target && !c_.model.lora_init_from.empty()) {
    ZE_RETURN_IF_ERROR(
        annotate(load_peft_adapter(*engine_, g_, c_.model.lora_init_from), "initialising the LoRA adapters"));
    out_ << "LoRA adapters initialised from " << c_.model.lora_init_from << "\n";
  }
  if (!model_files_.empty() && !c_.run.save_dir.empty()) {
    std::string names;
    for (const ModelFile& f : model_files_) names += cat(names.empty() ? "" : ", ", f.name);
    out_ << "model files: " << names << " (from " << files_from
         << "), saved with every checkpoint and written back by zero-ckpt consolidate --format hf\n";
  }
  first_step_ = engine_->global_step();
  if (first_step_ >= c_.run.steps) {
    // Nothing to train: say so rather than print an empty summary.
    out_ << absl::StrFormat(
        "run already complete: %s is at step %d and run.steps is %d; nothing to do (set "
        "run.steps / --steps above %d to train further)\n",
        last_checkpoint_name(resume_dir_, point_), first_step_, c_.run.steps, first_step_);
    out_.flush();
    return false;
  }
  return true;
}

absl::Status TrainingRun::open_outputs() {
  progress_ = std::make_unique<ProgressReporter>(out_, c_.run.steps, c_.steps_per_print, backend_.compute_tier(),
                                                 rss_baseline_);
  progress_->set_breakdowns(c_.wall_clock_breakdown || c_.engine.activation_checkpointing.profile, c_.memory_breakdown);
  progress_->set_throughput_model({c_.world_size, g_.flops_per_token(g_.seq_len), peak_tflops_});
  out_ << absl::StrFormat(
      "throughput: tok/s and samples/s averaged over the last %d steps; TFLOP/s: model FLOPs "
      "(%.3g per token, forward + backward), %s; MFU against %s\n",
      kRateWindowSteps, g_.flops_per_token(g_.seq_len),
      c_.world_size == 1 ? std::string("one rank") : cat("the ", c_.world_size, " ranks together"), peak_what_);
  ZE_ASSIGN_OR_RETURN(monitors_, Monitors::open(c_, comm_.rank()));
  if (monitors_->enabled()) out_ << "monitors: " << monitors_->describe() << "\n";
  // Rank 0 writes the metrics; with "{rank}" in the path every rank writes its
  // own file (per-rank memory, e.g. bench/memory_scaling).
  const size_t rank_at = c_.run.metrics.find("{rank}");
  if (!c_.run.metrics.empty() && (comm_.rank() == 0 || rank_at != std::string::npos)) {
    std::string path = c_.run.metrics;
    if (rank_at != std::string::npos) path.replace(rank_at, 6, std::to_string(comm_.rank()));
    ZE_RETURN_IF_ERROR(progress_->open_metrics(path, /*append=*/first_step_ > 0));
  }
  // The checkpoint this run's weights were last in: the one resumed, then each save.
  last_checkpoint_ = resume_dir_.empty() ? "" : cat(resume_dir_, "/", point_->tag);
  // A save whose tag another run left in save_dir fails rather than overwrite
  // it: say so now, not at that save.
  if (!c_.run.save_dir.empty() && resume_dir_ != c_.run.save_dir && std::filesystem::exists(c_.run.save_dir)) {
    const absl::StatusOr<std::vector<std::string>> theirs = list_checkpoints(c_.run.save_dir);
    if (theirs.ok() && !theirs->empty()) {
      out_ << "warning: " << c_.run.save_dir << " holds " << theirs->size()
           << " checkpoint(s) this run does not resume "
           << "(newest " << theirs->back() << "); a save whose tag is already there will fail rather than overwrite "
           << "it (--resume auto continues that run)\n";
    }
  }
  last_saved_ = first_step_;
  if (c_.flops_profiler.enabled &&
      (c_.flops_profiler.profile_step < first_step_ || c_.flops_profiler.profile_step >= c_.run.steps)) {
    out_ << absl::StrFormat(
        "warning: flops_profiler.profile_step %d is outside this run's steps (global_steps %d to "
        "%d): nothing will be profiled\n",
        c_.flops_profiler.profile_step, first_step_, c_.run.steps - 1);
  }
  return absl::OkStatus();
}

absl::Status TrainingRun::save() {
  SaveOptions so{c_.run.save_dir, "", static_cast<int>(c_.run.keep)};
  // What `zero-ckpt consolidate --format hf` writes as config.json, and
  // what a resumed run builds.
  so.model = hf_config_json(g_, DType::kF32, c_.model.hf_source);
  if (g_.lora.enabled()) so.adapter = peft_adapter_config_json(g_, c_.run.init_from);
  so.model_files = model_files_;
  so.node_local = c_.switches.use_node_local_storage;
  ZE_ASSIGN_OR_RETURN(std::string tag, save_checkpoint(*engine_, so));
  out_ << "saved checkpoint " << c_.run.save_dir << "/" << tag << "\n";
  last_checkpoint_ = cat(c_.run.save_dir, "/", tag);
  return absl::OkStatus();
}

absl::StatusOr<int> TrainingRun::stop_signal() {
  double sig = stop_requested();
  if (comm_.world_size() > 1) {
    ZE_ASSIGN_OR_RETURN(sig, comm_.all_reduce_max(sig));
  }
  return static_cast<int>(sig);
}

absl::StatusOr<int> TrainingRun::train() {
  // From here a first SIGINT/SIGTERM stops at the next step boundary; during
  // set-up (a read blocked on a FIFO, a slow load) it ends the run at once.
  enable_graceful_stop();
  for (int64_t step = first_step_; step < c_.run.steps; ++step) {
    ZE_ASSIGN_OR_RETURN(const int sig, stop_signal());
    if (sig != 0) {
      const std::string last =
          last_checkpoint_.empty()
              ? std::string("no checkpoint was saved (--save-dir DIR --save-every N saves them)")
              : absl::StrFormat("the last checkpoint is %s: continue with --resume %s", last_checkpoint_,
                                last_checkpoint_.substr(0, last_checkpoint_.rfind('/')));
      out_ << absl::StrFormat("stopped by signal %d after step %d of %d; %s\n", sig, step, c_.run.steps, last);
      out_.flush();
      return sig;
    }
    ZE_RETURN_IF_ERROR(run_step(step));
  }
  return 0;
}

absl::Status TrainingRun::run_step(int64_t step) {
  // DeepSpeed's flops_profiler: the step run at global_steps == profile_step,
  // measured on the first rank of each pipeline stage.
  std::optional<ModuleProfiler> profiler;
  // Detached on every way out of this step (an error too), before the
  // profiler goes.
  const absl::Cleanup detach_profiler = [&] {
    if (profiler) engine_->set_module_profiler(nullptr);
  };
  const bool profile_here =
      c_.flops_profiler.enabled && engine_->mesh().coordinates().data == 0 && engine_->mesh().coordinates().tensor == 0;
  if (profile_here && step == c_.flops_profiler.profile_step) {
    profiler.emplace(backend_);
    engine_->set_module_profiler(&*profiler);
  }
  const auto t0 = std::chrono::steady_clock::now();
  // This data-parallel rank's slice of the global batch (see data_loader.h),
  // one micro-batch at a time as the schedule asks.
  Communicator& dp = engine_->mesh().data();
  ZE_ASSIGN_OR_RETURN(const StepResult r, engine_->train_batch([&](int micro) {
    return data_->micro_batch(step, micro, dp.rank(), dp.world_size(), c_.engine.micro_batch_size,
                              c_.engine.gradient_accumulation_steps);
  }));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (profiler) {
    FlopsProfileStep ps;
    ps.profile_step = step;
    ps.run_steps = c_.run.steps;
    ps.mesh = engine_->mesh().shape();
    ps.stage = engine_->mesh().coordinates().pipeline;
    ps.micro_batch = c_.engine.micro_batch_size;
    ps.accumulation = c_.engine.gradient_accumulation_steps;
    ps.seq_len = g_.seq_len;
    ps.model_parameters = g_.num_parameters();
    ps.rank_parameters = engine_->num_parameters();
    ps.forward_s = r.forward_s, ps.backward_s = r.backward_s, ps.step_s = r.step_s, ps.iter_s = seconds;
    ps.backend = backend_.description();
    const FlopsProfileOptions po{c_.flops_profiler.module_depth, c_.flops_profiler.top_modules,
                                 c_.flops_profiler.detailed};
    ZE_RETURN_IF_ERROR(write_flops_profile(flops_profile_report(engine_->model(), *profiler, ps, po),
                                           c_.flops_profiler.output_file, ps.stage,
                                           comm_.rank() == 0 ? rank0_out_ : std::cout));
  }
  StepTotals totals;
  totals.samples = r.global_step * c_.train_batch_size;
  totals.tokens = totals.samples * g_.seq_len;
  // After the step's time is taken: evaluation is not training throughput.
  if (evaluator_ && (r.global_step % c_.run.eval_every == 0 || r.global_step == c_.run.steps)) {
    ZE_ASSIGN_OR_RETURN(totals.val_loss, evaluator_->evaluate(*engine_));
  }
  const double tokens_per_step = static_cast<double>(c_.train_batch_size * g_.seq_len);
  print_verbose();  // this step's collectives, before its progress line
  ZE_RETURN_IF_ERROR(
      progress_->on_step(r, {seconds, tokens_per_step, static_cast<double>(c_.train_batch_size)}, totals));
  if (monitors_->enabled()) {
    // DeepSpeed's events, at its x axis: samples consumed.
    std::vector<MonitorEvent> events = {{"Train/Samples/train_loss", monitor_float(r.loss), totals.samples},
                                        {"Train/Samples/lr", monitor_float(r.lr), totals.samples}};
    if (fp16()) events.push_back({"Train/Samples/loss_scale", r.loss_scale, totals.samples});
    if (totals.val_loss) events.push_back({"Train/Samples/eval_loss", *totals.val_loss, totals.samples});
    if (c_.wall_clock_breakdown) {
      events.push_back({"Train/Samples/elapsed_time_ms_forward", 1e3 * r.forward_s, totals.samples});
      events.push_back({"Train/Samples/elapsed_time_ms_backward", 1e3 * r.backward_s, totals.samples});
      events.push_back({"Train/Samples/elapsed_time_ms_step", 1e3 * r.step_s, totals.samples});
      events.push_back({"Train/Samples/elapsed_time_ms_comm_wait", 1e3 * r.comm_wait_s, totals.samples});
    }
    if (r.moe) {
      // The routing: rank 0's micro-batches of the step (graph/moe.h).
      events.push_back({"Train/Samples/moe_aux_loss", r.moe->aux_loss, totals.samples});
      if (g_.moe.z_loss_coef > 0.0f) events.push_back({"Train/Samples/moe_z_loss", r.moe->z_loss, totals.samples});
      if (g_.moe.capacity_factor > 0.0) {
        events.push_back({"Train/Samples/moe_dropped_tokens", static_cast<double>(r.moe->dropped), totals.samples});
      }
      for (const auto& [layer, counts] : r.moe->expert_tokens) {
        for (size_t e = 0; e < counts.size(); ++e) {
          events.push_back({cat("Train/Samples/moe_expert_tokens/layer_", layer, "/expert_", e), counts[e],
                            totals.samples});
        }
      }
    }
    ZE_RETURN_IF_ERROR(monitors_->write_events(events));
  }
  nonfinite_run_ = (r.skipped || !std::isfinite(r.loss)) ? nonfinite_run_ + 1 : 0;
  if (nonfinite_run_ > 0 && fp16() && nonfinite_run_ % 20 == 0) {
    out_ << absl::StrFormat(
        "warning: the last %d steps were all skipped: the gradients overflow fp16 at loss scale "
        "%g (the scaler halves it on each overflow, down to fp16.min_loss_scale)\n",
        nonfinite_run_, r.loss_scale);
  } else if (nonfinite_run_ > c_.run.nonfinite_steps_allowed && !fp16()) {
    return absl::DataLossError(absl::StrFormat(
        "step %d: the loss is %g and inf/NaN came up in %s: the run has diverged (%d step%s in a row; "
        "run.nonfinite_steps_allowed is %d). Nothing non-finite was applied or saved%s; lower the learning rate, add "
        "warmup or gradient_clipping, then resume",
        r.global_step, r.loss, r.overflow_in.empty() ? std::string("the loss") : r.overflow_in, nonfinite_run_,
        nonfinite_run_ == 1 ? "" : "s", c_.run.nonfinite_steps_allowed,
        last_checkpoint_.empty() ? std::string() : cat("; the last checkpoint is ", last_checkpoint_)));
  }
  if (!c_.run.save_dir.empty() && c_.run.save_every > 0 && (step + 1) % c_.run.save_every == 0) {
    ZE_RETURN_IF_ERROR(save());
    last_saved_ = step + 1;
  }
  return absl::OkStatus();
}

absl::Status TrainingRun::finish() {
  if (!c_.run.save_dir.empty() && last_saved_ != engine_->global_step()) ZE_RETURN_IF_ERROR(save());
  progress_->summary();
  if (comm_log_) {
    print_verbose();
    out_ << "comms_logger: rank 0's collectives over the run (latency from each op's start to its end on this rank, "
            "queueing excluded; busbw = algbw x nccl-tests' bus factor)\n"
         << comm_log_->summary();
  }
  if (device_baseline_) {
    const std::optional<int64_t> in_use = backend_.device_memory_in_use();
    const int64_t tracked = MemoryTracker::global().snapshot().reserved[static_cast<int>(Tier::kDevice)].current;
    out_ << "device memory (driver, all processes) " << format_bytes(*in_use) << " (" << format_bytes(*device_baseline_)
         << " before the engine started, +" << format_bytes(*in_use - *device_baseline_) << "); tracked reserved now "
         << format_bytes(tracked) << " (+" << format_bytes(tracked - tracked_device_baseline_) << ")\n";
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int> run_training(const RunConfig& c, TrainingData data, Backend& backend, Communicator& comm,
                                 std::ostream& rank0_out) {
  TrainingRun run(c, std::move(data), backend, comm, rank0_out);
  run.take_inputs();
  run.choose_mfu_peak();
  ZE_RETURN_IF_ERROR(run.attach_comms_logger());
  ZE_RETURN_IF_ERROR(run.build());
  run.describe();
  ZE_ASSIGN_OR_RETURN(const bool steps_to_run, run.restore());
  if (!steps_to_run) return 0;
  ZE_RETURN_IF_ERROR(run.open_outputs());
  ZE_ASSIGN_OR_RETURN(const int signal, run.train());
  if (signal != 0) return signal;
  ZE_RETURN_IF_ERROR(run.finish());
  return 0;
}

}  // namespace zero
