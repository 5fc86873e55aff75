// zero-train's loop; see train_loop.h.
#include "runtime/tools/train_loop.h"

#include <filesystem>

#include <omp.h>

#include <chrono>
#include <cmath>
#include <iostream>
#include <mutex>
#include <optional>
#include <sstream>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_format.h"
#include "comm/comm_log.h"
#include "core/signals.h"
#include "core/status.h"
#include "core/strings.h"
#include "kernels/cpu/bf16_gemm_policy.h"
#include "kernels/cpu/simd_kernels.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/hf_weights.h"
#include "runtime/config/hf_config.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/data/data_loader.h"
#include "runtime/engine/engine.h"
#include "runtime/tools/evaluation.h"
#include "runtime/tools/flops_profile_report.h"
#include "runtime/tools/gemm_rate.h"
#include "runtime/tools/monitors.h"
#include "runtime/tools/progress.h"

namespace zero {

namespace {

// "DIR/TAG" of the checkpoint a run resumed from, or "the model" when none.
std::string last_checkpoint_name(const std::string& resume_dir, const absl::StatusOr<ResumePoint>& point) {
  return resume_dir.empty() || !point.ok() ? std::string("the model") : cat(resume_dir, "/", point->tag);
}

absl::StatusOr<std::unique_ptr<DataLoader>> open_data(const RunConfig& c) {
  std::unique_ptr<TokenSource> source;
  if (c.data.format == "llmc") {
    ZE_ASSIGN_OR_RETURN(source, open_llmc_shards(c.data.path, c.model.gpt.vocab_size));
  } else {
    ZE_ASSIGN_OR_RETURN(source, open_text_bytes(c.data.path));
  }
  if (source->vocab_bound() > c.model.gpt.vocab_size) {
    return absl::InvalidArgumentError(cat("data (", source->describe(), ") has token ids up to ",
                                          source->vocab_bound() - 1, " but model.vocab_size is ",
                                          c.model.gpt.vocab_size));
  }
  return DataLoader::create(std::move(source), c.model.gpt.seq_len, c.data.seed);
}

}  // namespace

absl::StatusOr<int> run_training(const RunConfig& c, Backend& backend, Communicator& comm, std::ostream& rank0_out) {
  std::ostringstream discard;
  std::ostream& out = comm.rank() == 0 ? rank0_out : discard;
  const int64_t rss_baseline = process_rss_bytes();
  // The driver's figure for the device (cudaMemGetInfo), and the tracked one,
  // before the engine allocates: the summary compares their growth.
  const std::optional<int64_t> device_baseline = backend.device_memory_in_use();
  const int64_t tracked_device_baseline =
      MemoryTracker::global().snapshot().reserved[static_cast<int>(Tier::kDevice)].current;
  ZE_ASSIGN_OR_RETURN(std::unique_ptr<DataLoader> data, open_data(c));
  std::unique_ptr<Evaluator> evaluator;
  if (c.run.eval_every > 0) {
    ZE_ASSIGN_OR_RETURN(evaluator, Evaluator::create(c));
  }
  // MFU's denominator: the peak given, else the CPU's ISA peak, or on a GPU
  // this rank's measured rate on the model's MLP GEMM (gemm_rate.h).
  double peak_tflops = c.run.peak_tflops;
  std::string peak_what = absl::StrFormat("%g TFLOP/s per rank (run.peak_tflops)", peak_tflops);
  if (peak_tflops <= 0) {
    const MfuPeak peak = default_mfu_peak(backend, c.engine.param_dtype,
                                          c.engine.micro_batch_size * c.model.gpt.seq_len, c.model.gpt.d_model,
                                          c.model.gpt.ffn_width() / c.tensor_size());
    peak_tflops = peak.tflops;
    peak_what = peak.what;
    MemoryTracker::global().reset_peaks();  // a measurement's buffers are gone; the run's peaks start here
  }
  // DeepSpeed's comms_logger: the world and the groups split from it record
  // into one log, which outlives them (the groups go with the mesh, declared
  // below; the world is detached when this function returns).
  // verbose: lines the communication threads hand over, printed by this
  // thread between steps (never written to `out` from another thread).
  struct VerboseLines {
    std::mutex mu;
    std::string text;
  } verbose_lines;
  auto print_verbose = [&] {
    std::string text;
    {
      std::lock_guard<std::mutex> lock(verbose_lines.mu);
      text.swap(verbose_lines.text);
    }
    out << text;
  };
  std::unique_ptr<CommLog> comm_log;
  const absl::Cleanup detach_log = [&] {
    if (comm_log) comm.set_log(nullptr);
  };
  if (c.comms_logger.enabled && (c.comms_logger.prof_all || !c.comms_logger.prof_ops.empty())) {
    CommLog::VerboseSink verbose;
    if (c.comms_logger.verbose && comm.rank() == 0) {
      verbose = [&verbose_lines](const std::string& line) {
        std::lock_guard<std::mutex> lock(verbose_lines.mu);
        verbose_lines.text += line;
        verbose_lines.text += '\n';
      };
    }
    // The config has checked the names.
    ZE_ASSIGN_OR_RETURN(comm_log, CommLog::create(c.comms_logger.prof_all ? std::vector<std::string>{}
                                                                          : c.comms_logger.prof_ops,
                                                  std::move(verbose)));
    comm.set_log(comm_log.get(), "world");
  }
  // The mesh (comm/device_mesh.h): tensor groups of T adjacent ranks, ZeRO
  // over the data groups; the model splits over this rank's tensor group.
  // With pipeline stages (outermost), this rank builds its own stage.
  ZE_ASSIGN_OR_RETURN(std::unique_ptr<DeviceMesh> mesh,
                      DeviceMesh::create(comm, c.tensor_size(), c.pipeline_size()));
  if (comm_log) {
    mesh->data().set_log(comm_log.get(), "data");
    if (c.tensor_size() > 1) mesh->tensor().set_log(comm_log.get(), "tensor");
    if (c.pipeline_size() > 1) mesh->pipeline().set_log(comm_log.get(), "pipeline");
    if (mesh->embedding() != nullptr) mesh->embedding()->set_log(comm_log.get(), "embedding");
  }
  ZE_ASSIGN_OR_RETURN(const PipelineStage stage,
                      gpt_pipeline_stage(c.model.gpt, mesh->coordinates().pipeline, c.pipeline_size(),
                                         c.engine.pipeline.partition_method));
  ZE_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                      Engine::create(std::make_unique<Gpt>(c.model.gpt, &mesh->tensor(), c.sequence_parallel, stage),
                                     c.engine, backend, *mesh));
  const GptConfig& g = c.model.gpt;
  const std::string family =
      g.llama() ? absl::StrFormat("Llama n_layer=%d n_head=%d n_kv_head=%d d_model=%d d_ff=%d%s", g.n_layer, g.n_head,
                                  g.kv_heads(), g.d_model, g.ffn_width(), g.tied_head() ? " tied head" : "")
                : absl::StrFormat("GPT-2 n_layer=%d n_head=%d d_model=%d", g.n_layer, g.n_head, g.d_model);
  out << absl::StrFormat("model: %s vocab=%d seq_len=%d, %.2fM parameters%s (%s)%s\n", family, g.vocab_size, g.seq_len,
                         static_cast<double>(g.num_parameters()) / 1e6,
                         c.tensor_size() > 1 || c.pipeline_size() > 1
                             ? absl::StrFormat(", %.2fM on rank 0 (its %s)",
                                               static_cast<double>(engine->num_parameters()) / 1e6,
                                               c.pipeline_size() > 1 && c.tensor_size() > 1 ? "stage's tensor slice"
                                               : c.pipeline_size() > 1                     ? "stage"
                                                                                           : "tensor slice")
                             : std::string(),
                         dtype_name(c.engine.param_dtype),
                         g.dropout > 0.0f ? absl::StrFormat(", dropout %g (seed %d)", g.dropout, c.engine.seed) : "");
  out << "data: " << data->source().describe() << "\n";
  if (evaluator) {
    out << absl::StrFormat("eval: every %d steps and at the end, the mean loss over %d fixed batches of %d sequences "
                           "from %s\n",
                           c.run.eval_every, evaluator->batches(), evaluator->rows_per_batch(),
                           evaluator->source().describe());
  }
  out << absl::StrFormat("batch: %d sequences/step = micro %d x accumulation %d x %d %srank%s; ZeRO stage %d%s\n",
                         c.train_batch_size, c.engine.micro_batch_size, c.engine.gradient_accumulation_steps,
                         c.data_size(), c.tensor_size() * c.pipeline_size() > 1 ? "data-parallel " : "",
                         c.data_size() == 1 ? "" : "s",
                         stage_number(c.engine.zero.stage), c.engine.zero.overlap_comm ? " (overlap_comm)" : "");
  if (c.tensor_size() > 1) {
    out << absl::StrFormat("tensor parallel: %d ranks per tensor group (ranks %d-%d hold the first model copy), "
                           "%d data-parallel group%s; Megatron's split: heads, MLP features and vocabulary / %d%s\n",
                           c.tensor_size(), 0, c.tensor_size() - 1, c.data_size(), c.data_size() == 1 ? "" : "s",
                           c.tensor_size(),
                           c.sequence_parallel ? "; sequence parallel: layer norms and residuals on seq_len / T" : "");
  }
  if (c.pipeline_size() > 1) {
    // Stage s holds world ranks [s W / P, (s + 1) W / P) (comm/device_mesh.h).
    const PipelineConfig& p = c.engine.pipeline;
    const int per_stage = c.world_size / p.stages;
    std::string stages;
    for (int s = 0; s < p.stages; ++s) {
      const PipelineStage st = *gpt_pipeline_stage(g, s, p.stages, p.partition_method);
      stages += absl::StrFormat("%s stage %d: ranks %d-%d, blocks %d-%d", s == 0 ? "" : ";", s, s * per_stage,
                                (s + 1) * per_stage - 1, st.layers.offset, st.layers.offset + st.layers.size - 1);
    }
    out << absl::StrFormat("pipeline: %d stages split by %s (embeddings on the first, %s on the last);%s\n"
                           "pipeline: %s over %d micro-batches, ideal bubble (P-1)/(M+P-1) = %.1f%%\n",
                           p.stages, partition_method_name(p.partition_method),
                           g.tied_head() ? "the head and a tied copy of the token table"
                                         : "the head (untied: its own weights, no copy of the token table)",
                           stages, pipeline_schedule_name(p.schedule),
                           c.engine.gradient_accumulation_steps,
                           100.0 * ideal_bubble_fraction(p.stages, static_cast<int>(c.engine.gradient_accumulation_steps)));
  }
  if (backend.compute_tier() == Tier::kHost) {
    out << absl::StrFormat("backend: %s, %d threads per rank, %s kernels; communicator: %s\n", backend.name(),
                           omp_get_max_threads(), cpu::simd_kernels().isa, comm.name());
    // bf16 storage computes in fp32 where this CPU's bf16 GEMMs are the slower (kernels/cpu/bf16_gemm_policy.h).
    if (c.engine.param_dtype == DType::kBF16) out << "backend: " << cpu::bf16_gemm_choice().reason << "\n";
  } else {
    out << absl::StrFormat("backend: %s; communicator: %s\n", backend.description(), comm.name());
  }
  const OptimizerPrecision& precision = c.engine.optimizer_precision;
  out << absl::StrFormat("optimizer: %s lr %g, clipping %g%s; %d steps\n", optimizer_type_name(c.engine.optimizer.type),
                         c.engine.optimizer.lr, c.engine.gradient_clipping,
                         precision.narrow() ? absl::StrFormat("; %s master weights, %s states",
                                                              dtype_name(precision.master), dtype_name(precision.states))
                                            : "",
                         c.run.steps);
  out.flush();

  // On a device backend "cpu" is ZeRO-Offload (zero/host_step.h); what it
  // cannot run is refused before we get here (check_backend_supports).
  const ModelState& state = engine->state();
  if (state.host_step() == nullptr && (c.engine.zero.offload_optimizer.device == OffloadDevice::kCpu ||
                                       c.engine.zero.offload_param.device == OffloadDevice::kCpu)) {
    out << "offload: device \"cpu\" requested; on the CPU backend parameters and optimizer state already "
           "live in host memory, so nothing moves\n";
  }
  if (c.engine.zero.offload_optimizer.device == OffloadDevice::kNvme ||
      c.engine.zero.offload_param.device == OffloadDevice::kNvme) {
    out << "optimizer state: " << engine->state().state_store().describe() << "\n";
  }
  if (state.host_step() != nullptr) {
    // With NVMe the line above says where the records are; this one how the
    // step reaches them from the device.
    out << (state.host_offload().optimizer_on_nvme ? "optimizer step: " : "optimizer state: ")
        << state.host_step()->describe() << "\n";
    if (state.host_offload().parameters) {
      out << "parameters: this rank's stage-3 shard in pinned host memory; each gather copies its chunk to "
          << backend.name() << " first (a prefetch starts the copy early)\n";
    }
    const OffloadConfig& oo = c.engine.zero.offload_optimizer;
    if (!oo.pin_memory || (state.host_offload().parameters && !c.engine.zero.offload_param.pin_memory)) {
      out << "offload: pin_memory false: the staging and the host parameter shard are pinned anyway (the "
          << backend.name() << " backend's host memory is always pinned)\n";
    }
  }
  if (c.engine.loss_scaler.dynamic) {
    out << absl::StrFormat("fp16: dynamic loss scale from 2^%d, window %d, hysteresis %d, min %g\n",
                           c.engine.loss_scaler.initial_scale_power, c.engine.loss_scaler.scale_window,
                           c.engine.loss_scaler.hysteresis, c.engine.loss_scaler.min_scale);
  }
  if (c.engine.scheduler.type != SchedulerType::kNone) {
    out << "scheduler: " << scheduler_type_name(c.engine.scheduler.type) << "\n";
  }
  if (engine->num_checkpoint_segments() > 0) {
    out << "activation checkpointing: " << g.n_layer << " blocks in " << engine->num_checkpoint_segments()
        << " segments (each keeps its input; backward recomputes it)\n";
    if (engine->checkpoint_inputs_partitioned()) {
      out << "activation checkpointing: partition_activations: each rank keeps 1/" << c.tensor_size()
          << " of every segment input, all-gathered over its tensor group for the recompute\n";
    } else if (c.engine.activation_checkpointing.partition_activations) {
      out << "activation checkpointing: partition_activations has no effect here ("
          << (c.tensor_size() == 1 ? "no tensor parallelism" : "sequence-parallel inputs are 1/T shards already")
          << ")\n";
    }
    if (engine->checkpoint_host_backend() != nullptr) {
      out << "activation checkpointing: cpu_checkpointing: segment inputs in pinned host memory between forward and "
             "recompute\n";
    } else if (c.engine.activation_checkpointing.cpu_checkpointing && backend.compute_tier() == Tier::kHost) {
      out << "activation checkpointing: cpu_checkpointing requested; on the CPU backend segment inputs already live "
             "in host memory\n";
    }
  }
  if (c.dump_state) out << "effective config:\n" << format_effective_config(c);

  // Resume (checkpoint) or initial weights (safetensors).
  // The newest complete checkpoint, whatever `latest` says; "auto" starts
  // fresh only where there is none (never silently past one).
  std::string resume_dir = c.run.resume;
  absl::StatusOr<ResumePoint> point = absl::NotFoundError("");
  if (!resume_dir.empty()) {
    const bool fresh_dir = resume_dir == "auto" && !std::filesystem::exists(c.run.save_dir);
    if (resume_dir == "auto") resume_dir = c.run.save_dir;
    point = fresh_dir ? absl::NotFoundError("") : resume_point(resume_dir);
    if (!point.ok() && c.run.resume == "auto" && absl::IsNotFound(point.status())) {
      out << "resume: auto, no checkpoint in " << c.run.save_dir << " yet; starting fresh\n";
      resume_dir.clear();
    } else if (!point.ok()) {
      return annotate(point.status(), "resuming");
    }
  }
  if (!resume_dir.empty()) {
    if (!point->note.empty()) out << "resume: " << point->note << "\n";
    ZE_RETURN_IF_ERROR(annotate(load_checkpoint(*engine, resume_dir, point->tag), "resuming"));
    out << "resumed from " << resume_dir << "/" << point->tag << " at step " << engine->global_step() << "\n";
  } else if (!c.run.init_from.empty()) {
    ZE_RETURN_IF_ERROR(annotate(load_hf_weights(*engine, c.model.gpt, c.run.init_from), "initialising"));
    out << "weights initialised from " << c.run.init_from << "\n";
  }
  const int64_t first_step = engine->global_step();
  if (first_step >= c.run.steps) {
    // Nothing to train: say so rather than print an empty summary.
    out << absl::StrFormat("run already complete: %s is at step %d and run.steps is %d; nothing to do (set "
                           "run.steps / --steps above %d to train further)\n",
                           last_checkpoint_name(resume_dir, point), first_step, c.run.steps, first_step);
    out.flush();
    return 0;
  }

  ProgressReporter progress(out, c.run.steps, c.steps_per_print, backend.compute_tier(), rss_baseline);
  progress.set_breakdowns(c.wall_clock_breakdown || c.engine.activation_checkpointing.profile, c.memory_breakdown);
  progress.set_throughput_model({c.world_size, g.flops_per_token(g.seq_len), peak_tflops});
  out << absl::StrFormat("throughput: tok/s and samples/s averaged over the last %d steps; TFLOP/s: model FLOPs "
                         "(%.3g per token, forward + backward), %s; MFU against %s\n",
                         kRateWindowSteps, g.flops_per_token(g.seq_len),
                         c.world_size == 1 ? std::string("one rank") : cat("the ", c.world_size, " ranks together"),
                         peak_what);
  ZE_ASSIGN_OR_RETURN(std::unique_ptr<Monitors> monitors, Monitors::open(c, comm.rank()));
  if (monitors->enabled()) out << "monitors: " << monitors->describe() << "\n";
  // Rank 0 writes the metrics; with "{rank}" in the path every rank writes its
  // own file (per-rank memory, e.g. bench/memory_scaling).
  const size_t rank_at = c.run.metrics.find("{rank}");
  if (!c.run.metrics.empty() && (comm.rank() == 0 || rank_at != std::string::npos)) {
    std::string path = c.run.metrics;
    if (rank_at != std::string::npos) path.replace(rank_at, 6, std::to_string(comm.rank()));
    ZE_RETURN_IF_ERROR(progress.open_metrics(path, /*append=*/first_step > 0));
  }
  // The checkpoint this run's weights were last in: the one resumed, then each save.
  std::string last_checkpoint = resume_dir.empty() ? "" : cat(resume_dir, "/", point->tag);
  auto save = [&]() -> absl::Status {
    SaveOptions so{c.run.save_dir, "", static_cast<int>(c.run.keep)};
    so.model = hf_config_json(g, DType::kF32);  // what `zero-ckpt consolidate --format hf` writes as config.json
    ZE_ASSIGN_OR_RETURN(std::string tag, save_checkpoint(*engine, so));
    out << "saved checkpoint " << c.run.save_dir << "/" << tag << "\n";
    last_checkpoint = cat(c.run.save_dir, "/", tag);
    return absl::OkStatus();
  };
  // A save whose tag another run left in save_dir fails rather than overwrite
  // it: say so now, not at that save.
  if (!c.run.save_dir.empty() && resume_dir != c.run.save_dir && std::filesystem::exists(c.run.save_dir)) {
    const absl::StatusOr<std::vector<std::string>> theirs = list_checkpoints(c.run.save_dir);
    if (theirs.ok() && !theirs->empty()) {
      out << "warning: " << c.run.save_dir << " holds " << theirs->size() << " checkpoint(s) this run does not resume "
          << "(newest " << theirs->back() << "); a save whose tag is already there will fail rather than overwrite "
          << "it (--resume auto continues that run)\n";
    }
  }
  int64_t last_saved = first_step;
  const double tokens_per_step = static_cast<double>(c.train_batch_size * g.seq_len);
  // Steps in a row whose gradients or loss were inf/NaN (skipped, never applied).
  int64_t nonfinite_run = 0;
  const bool fp16 = c.engine.param_dtype == DType::kF16;
  // A signal stops the run at a step boundary, the same one on every rank.
  auto stop_signal = [&]() -> absl::StatusOr<int> {
    double sig = stop_requested();
    if (comm.world_size() > 1) {
      ZE_ASSIGN_OR_RETURN(sig, comm.all_reduce_max(sig));
    }
    return static_cast<int>(sig);
  };
  const bool profile_here = c.flops_profiler.enabled && engine->mesh().coordinates().data == 0 &&
                            engine->mesh().coordinates().tensor == 0;
  if (c.flops_profiler.enabled &&
      (c.flops_profiler.profile_step < first_step || c.flops_profiler.profile_step >= c.run.steps)) {
    out << absl::StrFormat("warning: flops_profiler.profile_step %d is outside this run's steps (global_steps %d to "
                           "%d): nothing will be profiled\n",
                           c.flops_profiler.profile_step, first_step, c.run.steps - 1);
  }
  // From here a first SIGINT/SIGTERM stops at the next step boundary; during
  // set-up (a read blocked on a FIFO, a slow load) it ends the run at once.
  enable_graceful_stop();
  for (int64_t step = first_step; step < c.run.steps; ++step) {
    ZE_ASSIGN_OR_RETURN(const int sig, stop_signal());
    if (sig != 0) {
      const std::string last =
          last_checkpoint.empty()
              ? std::string("no checkpoint was saved (--save-dir DIR --save-every N saves them)")
              : absl::StrFormat("the last checkpoint is %s: continue with --resume %s", last_checkpoint,
                                last_checkpoint.substr(0, last_checkpoint.rfind('/')));
      out << absl::StrFormat("stopped by signal %d after step %d of %d; %s\n", sig, step, c.run.steps, last);
      out.flush();
      return sig;
    }
    // DeepSpeed's flops_profiler: the step run at global_steps == profile_step,
    // measured on the first rank of each pipeline stage.
    std::optional<ModuleProfiler> profiler;
    // Detached on every way out of this step (an error too), before the
    // profiler goes.
    const absl::Cleanup detach_profiler = [&] {
      if (profiler) engine->set_module_profiler(nullptr);
    };
    if (profile_here && step == c.flops_profiler.profile_step) {
      profiler.emplace(backend);
      engine->set_module_profiler(&*profiler);
    }
    const auto t0 = std::chrono::steady_clock::now();
    // This data-parallel rank's slice of the global batch (see data_loader.h),
    // one micro-batch at a time as the schedule asks.
    Communicator& dp = engine->mesh().data();
    ZE_ASSIGN_OR_RETURN(const StepResult r, engine->train_batch([&](int micro) {
      return data->micro_batch(step, micro, dp.rank(), dp.world_size(), c.engine.micro_batch_size,
                               c.engine.gradient_accumulation_steps);
    }));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (profiler) {
      FlopsProfileStep ps;
      ps.profile_step = step;
      ps.run_steps = c.run.steps;
      ps.mesh = engine->mesh().shape();
      ps.stage = engine->mesh().coordinates().pipeline;
      ps.micro_batch = c.engine.micro_batch_size;
      ps.accumulation = c.engine.gradient_accumulation_steps;
      ps.seq_len = g.seq_len;
      ps.model_parameters = g.num_parameters();
      ps.rank_parameters = engine->num_parameters();
      ps.forward_s = r.forward_s, ps.backward_s = r.backward_s, ps.step_s = r.step_s, ps.iter_s = seconds;
      ps.backend = backend.description();
      const FlopsProfileOptions po{c.flops_profiler.module_depth, c.flops_profiler.top_modules,
                                   c.flops_profiler.detailed};
      ZE_RETURN_IF_ERROR(write_flops_profile(flops_profile_report(engine->model(), *profiler, ps, po),
                                             c.flops_profiler.output_file, ps.stage,
                                             comm.rank() == 0 ? rank0_out : std::cout));
    }
    StepTotals totals;
    totals.samples = r.global_step * c.train_batch_size;
    totals.tokens = totals.samples * g.seq_len;
    // After the step's time is taken: evaluation is not training throughput.
    if (evaluator && (r.global_step % c.run.eval_every == 0 || r.global_step == c.run.steps)) {
      ZE_ASSIGN_OR_RETURN(totals.val_loss, evaluator->evaluate(*engine));
    }
    print_verbose();  // this step's collectives, before its progress line
    ZE_RETURN_IF_ERROR(
        progress.on_step(r, {seconds, tokens_per_step, static_cast<double>(c.train_batch_size)}, totals));
    if (monitors->enabled()) {
      // DeepSpeed's events, at its x axis: samples consumed.
      std::vector<MonitorEvent> events = {{"Train/Samples/train_loss", monitor_float(r.loss), totals.samples},
                                          {"Train/Samples/lr", monitor_float(r.lr), totals.samples}};
      if (fp16) events.push_back({"Train/Samples/loss_scale", r.loss_scale, totals.samples});
      if (totals.val_loss) events.push_back({"Train/Samples/eval_loss", *totals.val_loss, totals.samples});
      if (c.wall_clock_breakdown) {
        events.push_back({"Train/Samples/elapsed_time_ms_forward", 1e3 * r.forward_s, totals.samples});
        events.push_back({"Train/Samples/elapsed_time_ms_backward", 1e3 * r.backward_s, totals.samples});
        events.push_back({"Train/Samples/elapsed_time_ms_step", 1e3 * r.step_s, totals.samples});
        events.push_back({"Train/Samples/elapsed_time_ms_comm_wait", 1e3 * r.comm_wait_s, totals.samples});
      }
      ZE_RETURN_IF_ERROR(monitors->write_events(events));
    }
    nonfinite_run = (r.skipped || !std::isfinite(r.loss)) ? nonfinite_run + 1 : 0;
    if (nonfinite_run > 0 && fp16 && nonfinite_run % 20 == 0) {
      out << absl::StrFormat("warning: the last %d steps were all skipped: the gradients overflow fp16 at loss scale "
                             "%g (the scaler halves it on each overflow, down to fp16.min_loss_scale)\n",
                             nonfinite_run, r.loss_scale);
    } else if (nonfinite_run > c.run.nonfinite_steps_allowed && !fp16) {
      return absl::DataLossError(absl::StrFormat(
          "step %d: the loss is %g and inf/NaN came up in %s: the run has diverged (%d step%s in a row; "
          "run.nonfinite_steps_allowed is %d). Nothing non-finite was applied or saved%s; lower the learning rate, add "
          "warmup or gradient_clipping, then resume",
          r.global_step, r.loss, r.overflow_in.empty() ? std::string("the loss") : r.overflow_in, nonfinite_run,
          nonfinite_run == 1 ? "" : "s", c.run.nonfinite_steps_allowed,
          last_checkpoint.empty() ? std::string() : cat("; the last checkpoint is ", last_checkpoint)));
    }
    if (!c.run.save_dir.empty() && c.run.save_every > 0 && (step + 1) % c.run.save_every == 0) {
      ZE_RETURN_IF_ERROR(save());
      last_saved = step + 1;
    }
  }
  if (!c.run.save_dir.empty() && last_saved != engine->global_step()) ZE_RETURN_IF_ERROR(save());
  progress.summary();
  if (comm_log) {
    print_verbose();
    out << "comms_logger: rank 0's collectives over the run (latency from each op's start to its end on this rank, "
           "queueing excluded; busbw = algbw x nccl-tests' bus factor)\n"
        << comm_log->summary();
  }
  if (device_baseline) {
    const std::optional<int64_t> in_use = backend.device_memory_in_use();
    const int64_t tracked = MemoryTracker::global().snapshot().reserved[static_cast<int>(Tier::kDevice)].current;
    out << "device memory (driver, all processes) " << format_bytes(*in_use) << " ("
        << format_bytes(*device_baseline) << " before the engine started, +" << format_bytes(*in_use - *device_baseline)
        << "); tracked reserved now " << format_bytes(tracked) << " (+" << format_bytes(tracked - tracked_device_baseline)
        << ")\n";
  }
  return 0;
}

}  // namespace zero
