// DeepSpeed's flops_profiler output for one profiled step: the step's
// summary (the model's family, FLOPs and latency of forward, backward,
// recompute and the optimizer step, and the rates they make), the top modules
// at each depth aggregated over repeated layers (GPT-2's h.0 ... h.11 as h.*,
// Llama's layers.N as layers.*, as DeepSpeed sums a module class), and the
// module tree with every module's figures.
//
// The figures come from graph/module_profiler.h: measured per module and per
// phase (DeepSpeed estimates the backward as twice the forward; here it is
// counted and timed), GEMM FLOPs only.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "comm/device_mesh.h"
#include "graph/module.h"
#include "graph/module_profiler.h"

namespace zero {

// The flops_profiler section's output options.
struct FlopsProfileOptions {
  int64_t module_depth = -1;  // deepest module level shown (-1: all)
  int64_t top_modules = 1;    // modules listed per depth and measure
  bool detailed = true;       // the module tree
};

// What the profiled step was.
struct FlopsProfileStep {
  int64_t profile_step = 1;  // DeepSpeed's global_steps when it ran (0-based)
  int64_t run_steps = 0;     // run.steps (the progress line's N of "step k/N")
  MeshShape mesh;
  int stage = 0;  // this rank's pipeline stage
  int64_t micro_batch = 1, accumulation = 1, seq_len = 1;
  int64_t model_parameters = 0;  // the whole model's
  int64_t rank_parameters = 0;   // the modules this rank runs (its tensor slice, its stage)
  // Wall seconds of the step's phases on this rank (StepResult) and of the step.
  double forward_s = 0, backward_s = 0, step_s = 0, iter_s = 0;
  std::string backend;  // "cpu", "cuda:0 (...)"
};

// The report for `root`'s modules as `profiler` measured them over the step.
std::string flops_profile_report(Module& root, const ModuleProfiler& profiler, const FlopsProfileStep& step,
                                 const FlopsProfileOptions& options);

// Writes the report where the flops_profiler section says: `output_file`
// (stage s > 0 of a pipeline: output_file.stage<s>, so stages do not
// overwrite each other), or `console` when it is empty. An error names the file.
absl::Status write_flops_profile(const std::string& report, const std::string& output_file, int stage,
                                 std::ostream& console);

// A module name with every numeric component replaced by "*" ("h.3.attn" ->
// "h.*.attn", "layers.3.mlp" -> "layers.*.mlp"): the repeated layers a
// depth's figures are summed over.
std::string module_pattern(const std::string& name);

}  // namespace zero
