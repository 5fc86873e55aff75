// DeepSpeed's monitors (deepspeed/monitor/): events (name, value, step) as
// DeepSpeed's engine writes them — "Train/Samples/train_loss",
// "Train/Samples/lr", "Train/Samples/loss_scale" (fp16),
// "Train/Samples/eval_loss", "Train/Samples/elapsed_time_ms_*" (with
// wall_clock_breakdown) — at step = samples consumed so far (DeepSpeed's
// global_samples), to
//   csv_monitor: output_path/job_name/<name with '/' and ' ' -> '_'>.csv,
//                header "step,<last part of the name>", then "step,value"
//                rows (Python's csv module: "\r\n" line ends);
//   tensorboard: an event file in output_path/job_name/ (tensorboard_writer.h).
// Only rank 0 writes (as in DeepSpeed). Values print as the shortest text
// that reads back to the same float or double. job_name is one directory
// name (the config refuses "/", "\" and ".."), and a write that fails (a full
// disk) is write_events()'s error, naming the file.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/config/run_config.h"
#include "runtime/tools/tensorboard_writer.h"

namespace zero {

struct MonitorEvent {
  std::string name;   // e.g. "Train/Samples/train_loss"
  double value = 0;   // a float's value converted with monitor_float() prints as that float
  int64_t step = 0;   // samples consumed so far
};

// A float as the double its shortest decimal text reads as (0.003f -> 0.003),
// so that printing the double shows the float's precision, not its noise.
double monitor_float(float f);
// Shortest round-trip text of a double ("0.003", "2", "1e-05").
std::string shortest_text(double v);

class Monitors {
 public:
  // Nothing enabled (or rank != 0): a monitor that writes nothing.
  static absl::StatusOr<std::unique_ptr<Monitors>> open(const RunConfig& config, int rank);

  bool enabled() const { return csv_enabled_ || tensorboard_ != nullptr; }
  absl::Status write_events(const std::vector<MonitorEvent>& events);
  // Where the files go, for the start-of-run summary ("" when none).
  std::string describe() const;

 private:
  bool csv_enabled_ = false;
  std::string csv_dir_;
  std::map<std::string, bool> csv_started_;  // file -> header written
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

}  // namespace zero
