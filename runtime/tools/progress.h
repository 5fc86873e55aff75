// What a run shows and records: a console line every steps_per_print
// optimizer steps (step, loss, learning rate, tokens/s, memory per category,
// ETA), a final summary, and with --metrics one JSON object per optimizer step
// for plots and for comparing runs. Every memory figure comes from the
// MemoryTracker; the summary sets it beside the process's RSS.
#pragma once

#include <chrono>
#include <fstream>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "core/memory_tracker.h"
#include "runtime/config/json_file.h"
#include "runtime/engine/engine.h"

namespace zero {

struct StepTiming {
  double step_seconds = 0;  // wall time of the whole optimizer step (all micro-batches)
  double tokens = 0;        // tokens processed in the step, all ranks
};

// One step's metrics as a JSON object (the --metrics line).
// rss: the process's resident set now; rss_start: before the engine started.
Json step_metrics_json(const StepResult& r, const StepTiming& t, const MemorySnapshot& mem, int64_t rss,
                       int64_t rss_start);
// Memory by category for one tier, e.g. "param 476M grad 476M ... act 120M":
// the peak of each category since `mem`'s peaks were last reset (a step's
// activations are freed by the time it is printed).
std::string memory_brief(const MemorySnapshot& mem, Tier tier);
// Element-wise maximum of the peaks (to keep a run's peaks across resets).
void merge_peaks(MemorySnapshot& into, const MemorySnapshot& from);

class ProgressReporter {
 public:
  // rss_start: the process's RSS before the engine allocated anything.
  ProgressReporter(std::ostream& out, int64_t total_steps, int64_t print_every, Tier tier, int64_t rss_start);
  // Opens the metrics file (truncated, or appended to when resuming); errors name the path.
  absl::Status open_metrics(const std::string& path, bool append = false);

  // wall_clock: print forward/backward/step times at each print step
  // (DeepSpeed's wall_clock_breakdown); memory: every category and tier.
  void set_breakdowns(bool wall_clock, bool memory) {
    wall_clock_ = wall_clock;
    memory_ = memory;
  }
  void on_step(const StepResult& r, const StepTiming& t);
  void summary();

 private:
  std::ostream& out_;
  int64_t total_steps_;
  int64_t print_every_;
  Tier tier_;
  int64_t rss_start_;
  std::ofstream metrics_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  double tokens_total_ = 0, seconds_total_ = 0;
  double first_loss_ = 0, last_loss_ = 0;
  int64_t steps_seen_ = 0;
  bool wall_clock_ = false, memory_ = false;
  int64_t skipped_ = 0;
  MemorySnapshot run_peaks_;  // peaks over the whole run (the tracker's are reset every step)
};

}  // namespace zero
