// What a run shows and records: a console line every steps_per_print
// optimizer steps (step, loss, learning rate, tokens/s and samples/s averaged
// over the last kRateWindowSteps steps, achieved model TFLOP/s over all ranks
// and MFU against a known peak, memory per category, ETA), an "eval:" line
// after each evaluation, a final summary, and with --metrics one JSON object
// per optimizer step for plots and for comparing runs. Every memory figure
// comes from the MemoryTracker; the summary sets it beside the process's RSS.
// Floats (loss, lr) print at float precision (0.003, not 0.003000000026).
#pragma once

#include <chrono>
#include <deque>
#include <fstream>
#include <optional>
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
  double samples = 0;       // sequences processed in the step, all ranks
};

// What turns tokens into FLOPs and FLOP/s into MFU.
struct ThroughputModel {
  int world_size = 1;           // ranks
  double flops_per_token = 0;   // model FLOPs per trained token, forward + backward (GptConfig::flops_per_token)
  double peak_tflops = 0;       // one rank's peak TFLOP/s (0: unknown, no MFU)
};

// What the run has consumed by the end of a step, and the step's evaluation.
struct StepTotals {
  int64_t samples = 0;              // sequences consumed so far, all ranks (global_step x train_batch_size)
  int64_t tokens = 0;               // samples x seq_len
  std::optional<double> val_loss;   // set on steps that evaluated
};

// Steps the progress line's rates average over.
inline constexpr int kRateWindowSteps = 10;

// One step's metrics as a JSON object (the --metrics line; the reporter adds
// "rss_peak", the process's peak resident set so far, VmHWM).
// rss: the process's resident set now; rss_start: before the engine started.
Json step_metrics_json(const StepResult& r, const StepTiming& t, const MemorySnapshot& mem, int64_t rss,
                       int64_t rss_start, const ThroughputModel& model = {}, const StepTotals& totals = {});
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
  void set_throughput_model(const ThroughputModel& m) { model_ = m; }
  // Prints and records the step. A metrics line that cannot be written (a
  // full disk) is an error naming the file: the run ends rather than lose it.
  absl::Status on_step(const StepResult& r, const StepTiming& t, const StepTotals& totals = {});
  void summary();

 private:
  // "12.3k tok/s 24.0 samples/s | 1.23 TFLOP/s MFU 12.3%" over the window.
  std::string throughput_brief() const;

  std::ostream& out_;
  int64_t total_steps_;
  int64_t print_every_;
  Tier tier_;
  int64_t rss_start_;
  std::ofstream metrics_;
  std::string metrics_path_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  double tokens_total_ = 0, seconds_total_ = 0;
  double first_loss_ = 0, last_loss_ = 0;
  int64_t steps_seen_ = 0;
  bool wall_clock_ = false, memory_ = false;
  int64_t skipped_ = 0;
  MemorySnapshot run_peaks_;  // peaks over the whole run (the tracker's are reset every step)
  ThroughputModel model_;
  std::deque<StepTiming> window_;  // the last kRateWindowSteps steps
  std::optional<double> first_val_loss_, last_val_loss_;
};

}  // namespace zero
