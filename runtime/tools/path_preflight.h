// The run's paths, checked before anything is built or allocated, so a typo
// in a path is a usage error (exit 2) found at start, not after the first
// save or twenty steps in: run.resume names an existing directory (unless
// "auto"), run.init_from a readable file (unless it is gone and a
// checkpoint is resumed: then it is not read), run.metrics a file that can be
// written (per rank when it holds "{rank}"), flops_profiler.output_file
// likewise, run.save_dir a writable directory
// or one that can be created, and every nvme_path of an NVMe offload an
// existing, writable directory; data.path, data.val_path and data.tokenizer
// exist (a glob matches a file), and an enabled monitor's output_path can be written.
// "Can be created" is tried (a probe directory made and removed), since root
// passes every permission check. Each error names the key and the path.
#pragma once

#include "absl/status/status.h"
#include "runtime/config/run_config.h"

namespace zero {

absl::Status check_run_paths(const RunConfig& config, int rank);

}  // namespace zero
