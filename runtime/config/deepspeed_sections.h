// Parsers for DeepSpeed's config sections. Each reads every key DeepSpeed
// defines for its section through its declaration (config_schema.h: type,
// DeepSpeed's current default, bounds, or refused with its reason), applies
// the rules that join keys, and reports unknown keys with a did-you-mean
// (ConfigReader::finish).
#pragma once

#include "runtime/config/config_reader.h"
#include "runtime/config/run_config.h"

namespace zero {

// "optimizer": {"type", "params": {...}, "legacy_fusion"}
void parse_optimizer_section(ConfigReader r, RunConfig& out);
// "scheduler": {"type", "params": {...}}
void parse_scheduler_section(ConfigReader r, RunConfig& out);
// "fp16", "bf16" (or legacy "bfloat16"), "data_types", "amp", "torch_autocast"
void parse_precision_sections(ConfigReader& root, RunConfig& out);
// "zero_optimization" with its offload subsections and deprecated aliases
void parse_zero_section(ConfigReader& root, RunConfig& out);
// "aio"
void parse_aio_section(ConfigReader r, RunConfig& out);
// "activation_checkpointing"
void parse_activation_checkpointing_section(ConfigReader r, RunConfig& out);
// "checkpoint"
void parse_checkpoint_section(ConfigReader r, RunConfig& out);
// "tensor_parallel" (DeepSpeed's AutoTP training section): autotp_size, which
// must divide the world and the model's heads; the keys of DeepSpeed's
// module-injection machinery are refused by name.
void parse_tensor_parallel_section(ConfigReader r, RunConfig& out);
// "pipeline": stages, partition_method, schedule,
// activation_checkpoint_interval; the stages must divide the world with the
// tensor size, and each needs a block.
void parse_pipeline_section(ConfigReader r, RunConfig& out);
// DeepSpeed features ZeroEngine does not have (monitors, profilers,
// autotuning, pipeline, ...): accepted when absent or disabled, refused when
// enabled, each with its reason.
void parse_unsupported_feature_sections(ConfigReader& root);

}  // namespace zero
