// DeepSpeed's "elasticity" section (runtime/config/elasticity.h computes the
// batch), its keys declared in elasticity_section.cc. With enabled true the
// global batch, the micro-batch and gradient accumulation come from it for
// the run's data-parallel size, so a job relaunched on fewer ranks (zero-run)
// keeps its global batch; train_batch_size, train_micro_batch_size_per_gpu
// and gradient_accumulation_steps are then refused by name unless
// ignore_non_elastic_batch_info, as in DeepSpeed.
#pragma once

#include "runtime/config/config_reader.h"
#include "runtime/config/run_config.h"

namespace zero {

// Reads "elasticity" (before the batch).
void parse_elasticity_section(ConfigReader r, RunConfig& out);

// With elasticity enabled: sets the batch triple for out.data_size() ranks
// and returns true; false when elasticity is off (the triple is the
// config's). Errors go to `root`, naming the key.
bool resolve_elastic_batch(ConfigReader& root, RunConfig& out);

}  // namespace zero
