// DeepSpeed's zero_optimization (with offload and deprecated aliases), aio,
// activation_checkpointing and checkpoint sections; see deepspeed_sections.h.
// Their keys are declared at the end of this file (config_schema.h); the
// parsers above add the rules that join keys and the forms a declaration
// does not express.
#include "core/strings.h"
#include "runtime/config/config_key_builders.h"
#include "runtime/config/config_schema.h"
#include "runtime/config/deepspeed_sections.h"
#include "zero/host_step.h"

namespace zero {

namespace {

void parse_offload(ConfigReader r, RunConfig& c, const OffloadConfig& o) {
  read_declared_keys(r, c);
  if (o.device == OffloadDevice::kNvme && o.nvme_path.empty()) {
    r.error("nvme_path", "is required when device is \"nvme\"");
  }
  r.finish();
}

}  // namespace

void parse_zero_section(ConfigReader& root, RunConfig& c) {
  ZeroConfig& z = c.engine.zero;
  const Json& raw = root.get_raw("zero_optimization");
  if (raw.is_boolean()) {
    // DeepSpeed's legacy form: true means stage 1 with allgather bucket 5e8.
    root.warn("zero_optimization", "the boolean form is deprecated; use {\"stage\": 1}");
    z.stage = raw.get<bool>() ? ZeroStage::k1 : ZeroStage::k0;
    return;
  }
  ConfigReader r = root.section("zero_optimization");
  read_declared_keys(r, c);
  if (z.allgather_bucket_size % 2 != 0) {
    r.error("allgather_bucket_size", "allgather_bucket_size must be a multiple of nccl_start_alignment_factor (2)");
  }
  // The windows left unset are sized to the model by stages 2 and 3
  // (zero/window_sizes.h: DeepSpeed's defaults are capped on small models).
  z.given.reduce_bucket_size = r.has("reduce_bucket_size");
  z.given.prefetch_bucket_size = r.has("prefetch_bucket_size") || r.has("stage3_prefetch_bucket_size");
  z.given.max_live_parameters = r.has("max_live_parameters") || r.has("stage3_max_live_parameters");
  z.given.max_reuse_distance = r.has("max_reuse_distance") || r.has("stage3_max_reuse_distance");
  // DeepSpeed: unset -> True at stage 3, False below.
  const Json& overlap = r.get_raw("overlap_comm");
  z.overlap_comm_given = !(overlap.is_null() || (overlap.is_string() && overlap.get<std::string>() == "auto"));
  z.overlap_comm = z.overlap_comm_given ? r.get_bool("overlap_comm", z.stage == ZeroStage::k3) : z.stage == ZeroStage::k3;
  r.set_effective("overlap_comm", z.overlap_comm);
  const std::string gather_key =
      r.pick("gather_16bit_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save");
  if (r.deprecated("stage3_gather_fp16_weights_on_model_save", "gather_16bit_weights_on_model_save",
                   r.has("gather_16bit_weights_on_model_save") || r.has("stage3_gather_16bit_weights_on_model_save"))) {
    z.gather_16bit_weights_on_model_save = r.get_bool("stage3_gather_fp16_weights_on_model_save", false);
  } else {
    z.gather_16bit_weights_on_model_save = r.get_bool(gather_key, false);
  }

  // Deprecated booleans for offload (DeepSpeed maps them with a warning).
  if (r.deprecated("cpu_offload", "offload_optimizer", r.has("offload_optimizer")) &&
      r.get_bool("cpu_offload", false)) {
    z.offload_optimizer.device = OffloadDevice::kCpu;
  }
  if (r.deprecated("cpu_offload_param", "offload_param", r.has("offload_param")) &&
      r.get_bool("cpu_offload_param", false)) {
    z.offload_param.device = OffloadDevice::kCpu;
  }
  if (r.has("cpu_offload_use_pin_memory")) {
    r.warn("cpu_offload_use_pin_memory", "is deprecated; use offload_param/offload_optimizer.pin_memory");
    r.get_bool("cpu_offload_use_pin_memory", true);
  }
  r.mark_known("cpu_offload_use_pin_memory");
  if (r.has("offload_optimizer") && !r.get_raw("offload_optimizer").is_null()) {
    parse_offload(r.section("offload_optimizer"), c, z.offload_optimizer);
  }
  r.mark_known("offload_optimizer");
  if (r.has("offload_param") && !r.get_raw("offload_param").is_null()) {
    parse_offload(r.section("offload_param"), c, z.offload_param);
  }
  r.mark_known("offload_param");
  // Which offload combinations run is the engine's rule (zero/host_step.h), asked here for the run's backend.
  const Tier tier = c.run.backend == "cuda" ? Tier::kDevice : Tier::kHost;
  if (absl::Status s = check_offload(z, host_offload_for(z, tier, c.engine.force_offload_path)); !s.ok()) {
    r.diagnostics().errors.emplace_back(s.message());
  }
  if (!z.contiguous_gradients) {
    r.warn("contiguous_gradients", "false has no effect: gradients always live in contiguous buckets here");
  }
  r.finish();
}

void parse_aio_section(ConfigReader r, RunConfig& c) {
  if (r.has("thread_count")) {
    // DeepSpeed renamed it and now silently ignores the old name; so do we, saying so.
    r.warn("thread_count", "ignored: DeepSpeed renamed it \"intra_op_parallelism\" (DeepSpeed #7056) and ignores the "
                           "old name; rename the key to set it");
  }
  r.mark_known("thread_count");
  read_declared_keys(r, c);
  r.finish();
}

void parse_activation_checkpointing_section(ConfigReader r, RunConfig& c) {
  read_declared_keys(r, c);
  const ActivationCheckpointingConfig& a = c.engine.activation_checkpointing;
  if (a.contiguous_memory_optimization && r.get_raw("partition_activations") != Json(true)) {
    r.error("contiguous_memory_optimization",
            "Contiguous Checkpointing is only available with partitioned activations");
  }
  r.finish();
}

void parse_checkpoint_section(ConfigReader r, RunConfig& c) {
  read_declared_keys(r, c);
  ConfigReader pw = r.section("parallel_write", UnknownKeys::kWarnUnlessNearMiss);
  read_declared_keys(pw, c);
  pw.finish();
  r.finish();
}

namespace config_keys {

void add_offload_keys(std::vector<ConfigKey>& keys, const std::string& s, bool param) {
  auto field = [param](RunConfig& c) -> OffloadConfig& {
    return param ? c.engine.zero.offload_param : c.engine.zero.offload_optimizer;
  };
  const std::string what = param ? "the stage-3 parameter shard" : "master weights and optimizer state";
  keys.push_back(choice(s + ".device", [field](RunConfig& c) -> auto& { return field(c).device; },
                        std::vector<std::pair<std::string, OffloadDevice>>{
                            {"none", OffloadDevice::kNone}, {"cpu", OffloadDevice::kCpu}, {"nvme", OffloadDevice::kNvme}},
                        cat("where ", what, " live", param ? " (stage 3)" : " (nvme: stages 1-3)")));
  ConfigKey path = text(s + ".nvme_path", [field](RunConfig& c) -> auto& { return field(c).nvme_path; },
                        "directory of the swap file (required with device \"nvme\")");
  path.optional = true;
  keys.push_back(path.shown("—"));
  keys.push_back(integer(s + ".buffer_count", [field](RunConfig& c) -> auto& { return field(c).buffer_count; }, 1,
                         kMax,
                         param ? "host buffers the parameter reads ahead of each all-gather go through"
                               : "host buffers the swapped sub-groups stream through"));
  keys.push_back(boolean(s + ".pin_memory", [field](RunConfig& c) -> auto& { return field(c).pin_memory; },
                         "accepted; staging buffers are always pinned (false is logged)"));
  if (param) {
    keys.push_back(integer(s + ".buffer_size", [field](RunConfig& c) -> auto& { return field(c).buffer_size; }, 1,
                           kMax, "elements per parameter swap record; at least the largest parameter chunk"));
    keys.push_back(integer(s + ".max_in_cpu", [field](RunConfig& c) -> auto& { return field(c).max_in_cpu; }, 0,
                           kMax, "accepted; no effect"));
  } else {
    keys.push_back(boolean(s + ".pipeline_read", [field](RunConfig& c) -> auto& { return field(c).pipeline_read; },
                           "accepted; reads, updates and writes always overlap"));
    keys.push_back(boolean(s + ".pipeline_write", [field](RunConfig& c) -> auto& { return field(c).pipeline_write; },
                           "accepted; reads, updates and writes always overlap"));
    keys.push_back(boolean(s + ".fast_init", [field](RunConfig& c) -> auto& { return field(c).fast_init; },
                           "accepted; no effect"));
    keys.push_back(refused(s + ".ratio", 1.0, "partial (Twin-Flow) offload is not implemented"));
    keys.push_back(refused(s + ".super_offload", false, "SuperOffload is not implemented"));
    keys.push_back(accepted(s + ".cpuadam_cores_perc", KeyKind::kNumber, 0.8, "accepted; no effect"));
  }
}

std::vector<ConfigKey> zero_keys() {
  std::vector<ConfigKey> k;
  // ---- zero_optimization.
  const std::string z = "zero_optimization.";
  k.push_back(integer(z + "stage", ZE_FIELD(engine.zero.stage), 0, 3,
                      "0: data parallel; 1: optimizer state, 2: + gradients, 3: + parameters partitioned"));
  k.push_back(boolean(z + "contiguous_gradients", ZE_FIELD(engine.zero.contiguous_gradients),
                      "gradients always live in contiguous buckets (false warns)"));
  k.push_back(boolean(z + "reduce_scatter", ZE_FIELD(engine.zero.reduce_scatter),
                      "reduce-scatter gradients (false: all-reduce and keep the owned part)"));
  // The "auto" of the three bucket keys below: what the Hugging Face Trainer
  // fills in from the model's hidden size.
  k.push_back(integer(z + "reduce_bucket_size", ZE_FIELD(engine.zero.reduce_bucket_size), 0, kMax,
                      "gradient elements per reduction bucket (unset, at stages 2-3: at most an eighth of the "
                      "elements the partitioning saves)")
                  .on_auto("d_model^2", [](const RunConfig& c) -> absl::StatusOr<Json> {
                    return Json(c.model.gpt.d_model * c.model.gpt.d_model);
                  }));
  k.push_back(accepted(z + "allgather_partitions", KeyKind::kBool, true, "accepted; DeepSpeed does not use it either"));
  k.push_back(integer(z + "allgather_bucket_size", ZE_FIELD(engine.zero.allgather_bucket_size), 0, kMax,
                      "elements per all-gather chunk after a stage-1/2 step (even)"));
  k.push_back(boolean(z + "overlap_comm", ZE_FIELD(engine.zero.overlap_comm),
                      "reduce on the communication thread while backward goes on")
                  .shown("true at stage 3, else false")
                  .read_by_code());
  k.push_back(boolean(z + "load_from_fp32_weights", ZE_FIELD(engine.zero.load_from_fp32_weights),
                      "checkpoints load the fp32 master weights (else the 16-bit ones)"));
  k.push_back(refused(z + "round_robin_gradients", false, "buckets follow model order"));
  k.push_back(boolean(z + "use_multi_rank_bucket_allreduce", ZE_FIELD(engine.zero.use_multi_rank_bucket_allreduce),
                      "one all-reduce per bucket (else one reduce per owner); same values"));
  k.push_back(boolean(z + "ignore_unused_parameters", ZE_FIELD(engine.zero.ignore_unused_parameters),
                      "accepted; every parameter here is used"));
  k.push_back(integer(z + "sub_group_size", ZE_FIELD(engine.zero.sub_group_size), 0, kMax,
                      "the optimizer runs over the partition in sub-groups of this many elements (NVMe: the swap "
                      "unit)"));
  k.push_back(integer(z + "prefetch_bucket_size", ZE_FIELD(engine.zero.prefetch_bucket_size), 0, kMax,
                      "stage 3: elements gathered ahead of use (unset: at most an eighth of the elements the "
                      "partitioning saves)")
                  .also("stage3_prefetch_bucket_size")
                  .on_auto("0.9 d_model^2", [](const RunConfig& c) -> absl::StatusOr<Json> {
                    return Json(static_cast<int64_t>(0.9 * static_cast<double>(c.model.gpt.d_model * c.model.gpt.d_model)));
                  }));
  k.push_back(integer(z + "param_persistence_threshold", ZE_FIELD(engine.zero.param_persistence_threshold), 0, kMax,
                      "stage 3: parameters this small stay gathered")
                  .also("stage3_param_persistence_threshold")
                  .on_auto("10 d_model", [](const RunConfig& c) -> absl::StatusOr<Json> {
                    return Json(10 * c.model.gpt.d_model);
                  }));
  k.push_back(integer(z + "model_persistence_threshold", ZE_FIELD(engine.zero.model_persistence_threshold), 0, kMax,
                      "stage 3: total elements allowed to persist")
                  .also("stage3_model_persistence_threshold")
                  .shown("max"));
  k.push_back(integer(z + "max_live_parameters", ZE_FIELD(engine.zero.max_live_parameters), 0, kMax,
                      "stage 3: gathered elements at most (unset: at most an eighth of the elements the partitioning "
                      "saves)")
                  .also("stage3_max_live_parameters"));
  k.push_back(integer(z + "max_reuse_distance", ZE_FIELD(engine.zero.max_reuse_distance), 0, kMax,
                      "stage 3: a parameter used again within this many elements stays gathered (unset: at most an "
                      "eighth of the elements the partitioning saves)")
                  .also("stage3_max_reuse_distance"));
  k.push_back(boolean(z + "gather_16bit_weights_on_model_save",
                      ZE_FIELD(engine.zero.gather_16bit_weights_on_model_save),
                      "accepted; zero-ckpt consolidate gathers weights from any checkpoint")
                  .also("stage3_gather_16bit_weights_on_model_save")
                  .read_by_code());
  add_offload_keys(k, z + "offload_optimizer", false);
  add_offload_keys(k, z + "offload_param", true);
  k.push_back(refused(z + "elastic_checkpoint", false, "superseded by universal checkpoints"));
  k.push_back(refused(z + "legacy_stage1", false, "DeepSpeed removed it too"));
  k.push_back(refused(z + "zero_hpz_partition_size", 1, "ZeRO++ hierarchical partitioning is not implemented"));
  k.push_back(refused(z + "zero_quantized_weights", false, "ZeRO++ quantized weights are not implemented"));
  k.push_back(refused(z + "zero_quantized_nontrainable_weights", false, "ZeRO++ quantization is not implemented"));
  k.push_back(refused(z + "zero_quantized_gradients", false, "ZeRO++ quantized gradients are not implemented"));
  k.push_back(refused(z + "zeropp_loco_param", Json(), "ZeRO++ LoCo is not implemented"));
  k.push_back(refused(z + "mics_shard_size", -1, "MiCS is not implemented"));
  k.push_back(refused(z + "mics_hierarchical_params_gather", false, "MiCS is not implemented"));
  k.push_back(refused(z + "module_granularity_threshold", 0, "leaf-module grouping is not implemented")
                  .also("stage3_module_granularity_threshold"));
  k.push_back(refused(z + "use_all_reduce_for_fetch_params", false, "parameters are always gathered with all-gather")
                  .also("stage3_use_all_reduce_for_fetch_params"));
  k.push_back(refused(z + "allgather_sequential", false, "parameters are gathered in buckets")
                  .also("stage3_allgather_sequential"));
  k.push_back(refused(z + "zenflow", Json(), "ZenFlow is not implemented"));
  k.push_back(refused(z + "pipeline_loading_checkpoint", false,
                      "DeepSpeed's stage-3 loading of a pipeline module's checkpoint; here every stage loads its "
                      "parameters by name from any checkpoint, and stage 3 does not combine with pipeline stages"));
  k.push_back(refused(z + "save_muon_momentum_buffer_in_memory", false, "there is no Muon optimizer"));
  k.push_back(refused(z + "leaf_module", Json::object(), "leaf-module grouping is not implemented"));
  for (const char* name : {"memory_efficient_linear", "override_module_apply"}) {
    k.push_back(accepted(z + name, KeyKind::kBool, true, "accepted; about torch modules, no meaning here"));
  }
  for (const char* name : {"log_trace_cache_warnings", "enable_sanity_checks"}) {
    k.push_back(accepted(z + name, KeyKind::kBool, false, "accepted; about torch modules, no meaning here"));
  }

  // ---- aio, activation checkpointing, checkpoint.
  k.push_back(integer("aio.block_size", ZE_FIELD(engine.aio.block_size), 1, kMax, "bytes per io_uring request"));
  k.push_back(integer("aio.queue_depth", ZE_FIELD(engine.aio.queue_depth), 1, kMax, "requests in flight"));
  k.push_back(integer("aio.intra_op_parallelism", ZE_FIELD(engine.aio.intra_op_parallelism), 1, kMax,
                      "multiplies the requests in flight (DeepSpeed's worker threads)"));
  k.push_back(boolean("aio.single_submit", ZE_FIELD(engine.aio.single_submit),
                      "one submit per request (else per batch)"));
  k.push_back(boolean("aio.overlap_events", ZE_FIELD(engine.aio.overlap_events),
                      "refill as each request completes (else per batch)"));
  k.push_back(refused("aio.use_gds", false, "GPUDirect Storage needs CUDA and cuFile"));
  const std::string ac = "activation_checkpointing.";
  k.push_back(boolean(ac + "partition_activations", ZE_FIELD(engine.activation_checkpointing.partition_activations),
                      "each tensor rank keeps 1/T of every segment input, all-gathered for the recompute "
                      "(no effect at T = 1, or with sequence_parallel, whose inputs are 1/T shards already)"));
  k.push_back(boolean(ac + "contiguous_memory_optimization",
                      ZE_FIELD(engine.activation_checkpointing.contiguous_memory_optimization),
                      "needs partition_activations (DeepSpeed's rule); accepted with no effect: each partition "
                      "comes from the caching allocator on its own"));
  k.push_back(integer(ac + "number_checkpoints", ZE_FIELD(engine.activation_checkpointing.number_checkpoints), 1,
                      kMax, "the model's blocks in this many recomputed segments")
                  .shown("off"));
  k.push_back(boolean(ac + "synchronize_checkpoint_boundary",
                      ZE_FIELD(engine.activation_checkpointing.synchronize_checkpoint_boundary),
                      "accepted; ops complete in order"));
  k.push_back(boolean(ac + "profile", ZE_FIELD(engine.activation_checkpointing.profile),
                      "recompute time in the wall-clock line"));
  k.push_back(boolean(ac + "cpu_checkpointing", ZE_FIELD(engine.activation_checkpointing.cpu_checkpointing),
                      "segment inputs in pinned host memory on GPU ranks"));
  k.push_back(text_choice("checkpoint.tag_validation", ZE_FIELD(switches.tag_validation),
                          {"WARN", "IGNORE", "FAIL", "warn", "ignore", "fail"},
                          "checked; tags are validated by the manifest anyway"));
  k.push_back(accepted("checkpoint.load_universal", KeyKind::kBool, false,
                       "accepted; every checkpoint here loads at any world size"));
  k.push_back(boolean("checkpoint.use_node_local_storage", ZE_FIELD(switches.use_node_local_storage),
                      "each host saves its ranks' shards, the manifest and latest to its own disk; a resume copies "
                      "the shards a host lacks from the hosts that have them"));
  k.push_back(accepted("checkpoint.parallel_write.pipeline_stage", KeyKind::kBool, false,
                       "every rank already writes its own parameters' segments in parallel, pipeline stages too"));
  return k;
}

}  // namespace config_keys

}  // namespace zero
