// DeepSpeed's zero_optimization (with offload and deprecated aliases), aio,
// activation_checkpointing and checkpoint sections; see deepspeed_sections.h.
// The keys are declared in config_schema.cc; here are the rules that join
// them and the forms a declaration does not express.
#include "core/strings.h"
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
  // (partition_activations is refused; when it is asked for, that error is the one to read.)
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

}  // namespace zero
