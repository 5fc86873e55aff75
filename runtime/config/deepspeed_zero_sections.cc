// DeepSpeed's zero_optimization (with offload and deprecated aliases), aio,
// activation_checkpointing and checkpoint sections; see deepspeed_sections.h.
#include "runtime/base/strings.h"
#include "runtime/config/deepspeed_sections.h"

namespace zero {

namespace {

void parse_offload(ConfigReader r, OffloadConfig& o, bool is_param) {
  const std::string device = r.get_choice("device", "none", {"none", "cpu", "nvme"});
  o.device = device == "cpu" ? OffloadDevice::kCpu : device == "nvme" ? OffloadDevice::kNvme : OffloadDevice::kNone;
  const Json& path = r.get_raw("nvme_path");
  if (!path.is_null()) o.nvme_path = r.get_string("nvme_path", "");
  o.buffer_count = r.get_int("buffer_count", o.buffer_count, 1);
  o.pin_memory = r.get_bool("pin_memory", true);
  if (is_param) {
    o.buffer_size = r.get_int("buffer_size", o.buffer_size, 1);
    o.max_in_cpu = r.get_int("max_in_cpu", o.max_in_cpu, 0);
  } else {
    o.pipeline_read = r.get_bool("pipeline_read", false);
    o.pipeline_write = r.get_bool("pipeline_write", false);
    o.fast_init = r.get_bool("fast_init", false);
    o.ratio = r.get_float("ratio", 1.0);
    if (o.ratio < 0 || o.ratio > 1) r.error("ratio", "must be in [0, 1]");
    r.refuse_unless("ratio", 1.0, "partial (Twin-Flow) offload is not implemented");
    r.refuse_unless("super_offload", false, "SuperOffload is not implemented");
    r.get_float("cpuadam_cores_perc", 0.8);
  }
  if (o.device == OffloadDevice::kNvme) {
    if (o.nvme_path.empty()) r.error("nvme_path", "is required when device is \"nvme\"");
  }
  r.finish();
}

}  // namespace

void parse_zero_section(ConfigReader& root, ZeroConfig& z) {
  const Json& raw = root.get_raw("zero_optimization");
  if (raw.is_boolean()) {
    // DeepSpeed's legacy form: true means stage 1 with allgather bucket 5e8.
    root.warn("zero_optimization", "the boolean form is deprecated; use {\"stage\": 1}");
    z.stage = raw.get<bool>() ? 1 : 0;
    return;
  }
  ConfigReader r = root.section("zero_optimization");
  z.stage = static_cast<int>(r.get_int("stage", 0, 0));
  if (z.stage > 3) r.error("stage", cat(z.stage, " is not a ZeRO stage (0, 1, 2 or 3)"));
  z.contiguous_gradients = r.get_bool("contiguous_gradients", true);
  z.reduce_scatter = r.get_bool("reduce_scatter", true);
  z.reduce_bucket_size = r.get_int("reduce_bucket_size", z.reduce_bucket_size, 0);
  r.get_bool("allgather_partitions", true);  // parsed and unused by DeepSpeed itself
  z.allgather_bucket_size = r.get_int("allgather_bucket_size", z.allgather_bucket_size, 0);
  if (z.allgather_bucket_size % 2 != 0) {
    r.error("allgather_bucket_size", "allgather_bucket_size must be a multiple of nccl_start_alignment_factor (2)");
  }
  // DeepSpeed: unset -> True at stage 3, False below.
  const Json& overlap = r.get_raw("overlap_comm");
  z.overlap_comm_given = !(overlap.is_null() || (overlap.is_string() && overlap.get<std::string>() == "auto"));
  z.overlap_comm = z.overlap_comm_given ? r.get_bool("overlap_comm", z.stage == 3) : z.stage == 3;
  r.set_effective("overlap_comm", z.overlap_comm);
  z.load_from_fp32_weights = r.get_bool("load_from_fp32_weights", true);
  z.round_robin_gradients = r.get_bool("round_robin_gradients", false);
  // DeepSpeed's choice between one all-reduce per bucket and one reduce per
  // owner in ZeRO-1/2; the reduced values are the same either way.
  z.use_multi_rank_bucket_allreduce = r.get_bool("use_multi_rank_bucket_allreduce", true);
  z.ignore_unused_parameters = r.get_bool("ignore_unused_parameters", true);
  z.sub_group_size = r.get_int("sub_group_size", z.sub_group_size, 0);
  z.prefetch_bucket_size = r.get_int(r.pick("prefetch_bucket_size", "stage3_prefetch_bucket_size"),
                                     z.prefetch_bucket_size, 0);
  z.param_persistence_threshold = r.get_int(
      r.pick("param_persistence_threshold", "stage3_param_persistence_threshold"), z.param_persistence_threshold, 0);
  z.model_persistence_threshold = r.get_int(
      r.pick("model_persistence_threshold", "stage3_model_persistence_threshold"), z.model_persistence_threshold, 0);
  z.max_live_parameters = r.get_int(r.pick("max_live_parameters", "stage3_max_live_parameters"),
                                    z.max_live_parameters, 0);
  z.max_reuse_distance = r.get_int(r.pick("max_reuse_distance", "stage3_max_reuse_distance"),
                                   z.max_reuse_distance, 0);
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
    parse_offload(r.section("offload_optimizer"), z.offload_optimizer, false);
  }
  r.mark_known("offload_optimizer");
  if (r.has("offload_param") && !r.get_raw("offload_param").is_null()) {
    parse_offload(r.section("offload_param"), z.offload_param, true);
  }
  r.mark_known("offload_param");
  if (z.offload_optimizer.device == OffloadDevice::kNvme && z.stage == 0) {
    r.error("offload_optimizer", "device \"nvme\" requires stage 1, 2 or 3 (stage 0 has no partitioned optimizer "
                                 "state to offload)");
  }
  if (z.offload_param.device != OffloadDevice::kNone && z.stage != 3) {
    r.error("offload_param", "requires stage 3 (parameters are only partitioned at stage 3)");
  }

  if (!z.contiguous_gradients) {
    r.warn("contiguous_gradients", "false has no effect: gradients always live in contiguous buckets here");
  }
  if (z.round_robin_gradients) r.error("round_robin_gradients", "true is not supported (buckets follow model order)");

  // Known DeepSpeed options ZeroEngine does not implement: refused unless at their defaults.
  r.refuse_unless("elastic_checkpoint", false, "superseded by universal checkpoints");
  r.refuse_unless("legacy_stage1", false, "DeepSpeed removed it too");
  r.refuse_unless("zero_hpz_partition_size", 1, "ZeRO++ hierarchical partitioning is not implemented");
  r.refuse_unless("zero_quantized_weights", false, "ZeRO++ quantized weights are not implemented");
  r.refuse_unless("zero_quantized_nontrainable_weights", false, "ZeRO++ quantization is not implemented");
  r.refuse_unless("zero_quantized_gradients", false, "ZeRO++ quantized gradients are not implemented");
  r.refuse_unless("zeropp_loco_param", Json(), "ZeRO++ LoCo is not implemented");
  r.refuse_unless("mics_shard_size", -1, "MiCS is not implemented");
  r.refuse_unless("mics_hierarchical_params_gather", false, "MiCS is not implemented");
  r.refuse_unless(r.pick("module_granularity_threshold", "stage3_module_granularity_threshold"), 0,
                  "leaf-module grouping is not implemented");
  r.refuse_unless(r.pick("use_all_reduce_for_fetch_params", "stage3_use_all_reduce_for_fetch_params"), false,
                  "parameters are always gathered with all-gather");
  r.refuse_unless(r.pick("allgather_sequential", "stage3_allgather_sequential"), false,
                  "parameters are gathered in buckets");
  r.refuse_unless("zenflow", Json(), "ZenFlow is not implemented");
  r.refuse_unless("pipeline_loading_checkpoint", false, "there is no pipeline parallelism");
  r.refuse_unless("save_muon_momentum_buffer_in_memory", false, "there is no Muon optimizer");
  // Options about torch modules (hooks, logging) that have no meaning here; accepted at any value.
  r.get_bool("memory_efficient_linear", true);
  r.get_bool("override_module_apply", true);
  r.get_bool("log_trace_cache_warnings", false);
  r.get_bool("enable_sanity_checks", false);
  r.refuse_unless("leaf_module", Json::object(), "leaf-module grouping is not implemented");
  r.finish();
}

void parse_aio_section(ConfigReader r, AioConfig& a) {
  if (r.has("thread_count")) {
    // DeepSpeed renamed it and now silently ignores the old name; so do we, saying so.
    r.warn("thread_count", "ignored: DeepSpeed renamed it \"intra_op_parallelism\" (DeepSpeed #7056) and ignores the "
                           "old name; rename the key to set it");
  }
  r.mark_known("thread_count");
  a.block_size = r.get_int("block_size", a.block_size, 1);
  a.queue_depth = r.get_int("queue_depth", a.queue_depth, 1);
  a.intra_op_parallelism = r.get_int("intra_op_parallelism", a.intra_op_parallelism, 1);
  a.single_submit = r.get_bool("single_submit", false);
  a.overlap_events = r.get_bool("overlap_events", true);
  a.use_gds = r.get_bool("use_gds", false);
  if (a.use_gds) r.error("use_gds", "true is not supported (GPUDirect Storage needs CUDA and cuFile)");
  r.finish();
}

void parse_activation_checkpointing_section(ConfigReader r, ActivationCheckpointingConfig& c) {
  c.partition_activations = r.get_bool("partition_activations", false);
  if (c.partition_activations) {
    r.error("partition_activations", "true is not supported: it splits checkpoints across tensor-parallel "
                                     "ranks, and ZeroEngine has no tensor parallelism");
  }
  c.contiguous_memory_optimization = r.get_bool("contiguous_memory_optimization", false);
  if (c.contiguous_memory_optimization && !c.partition_activations) {
    r.error("contiguous_memory_optimization",
            "Contiguous Checkpointing is only available with partitioned activations");
  }
  // DeepSpeed leaves the mapping to user code; ours: the model's layers
  // (a GPT's blocks) in number_checkpoints contiguous segments.
  const Json& n = r.get_raw("number_checkpoints");
  if (!n.is_null()) c.number_checkpoints = r.get_int("number_checkpoints", 0, 1);
  // Ops complete in order on the compute stream; on the CPU backend they are
  // synchronous, so the boundary is always synchronised.
  c.synchronize_checkpoint_boundary = r.get_bool("synchronize_checkpoint_boundary", false);
  c.profile = r.get_bool("profile", false);  // recompute time in the wall-clock line
  c.cpu_checkpointing = r.get_bool("cpu_checkpointing", false);
  r.finish();
}

void parse_checkpoint_section(ConfigReader r) {
  const std::string v = r.get_string("tag_validation", "WARN");
  if (v != "WARN" && v != "IGNORE" && v != "FAIL" && v != "warn" && v != "ignore" && v != "fail") {
    r.error("tag_validation", cat("\"", v, "\" is not one of \"WARN\", \"IGNORE\", \"FAIL\""));
  }
  // Every ZeroEngine checkpoint loads at any world size: both values hold.
  r.get_bool("load_universal", false);
  r.refuse_unless("use_node_local_storage", false, "ranks share one checkpoint directory");
  ConfigReader pw = r.section("parallel_write", UnknownKeys::kWarnUnlessNearMiss);
  pw.refuse_unless("pipeline_stage", false, "there is no pipeline parallelism");
  pw.finish();
  r.finish();
}

}  // namespace zero
