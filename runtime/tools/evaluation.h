// Evaluation on held-out tokens (data.val_path, run.eval_every,
// run.eval_steps): the mean loss over K fixed validation batches, computed
// forward-only (Engine::evaluate: gradients disabled, so dropout is off; no
// gradient, optimizer state, micro-step count or dropout key changes, so the
// training trajectory is the same with or without it).
//
// The batches: batch k of K holds validation samples [k R, (k + 1) R), R =
// train_micro_batch_size_per_gpu x data-parallel ranks (one global
// micro-batch), sampled from the validation source by index with data.seed
// (data_loader.h), never by the training step: the same batches at every
// evaluation and on any layout with the same R. Data-parallel rank r
// evaluates rows [r b, (r + 1) b) of each; the loss sums and the counts of
// targets with a loss are all-reduced over the data-parallel group, so the
// value is the mean over every such target (SFT rows have fewer than
// seq_len: their prompts and padding are masked). The ranks of a tensor group and of a pipeline
// group share their rows: they evaluate the same batch together, and each
// gets the whole loss of it (with pipeline stages the last stage's, passed
// to every stage), so every data group sums each row once.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "runtime/config/run_config.h"
#include "runtime/data/data_loader.h"
#include "runtime/engine/engine.h"

namespace zero {

class Evaluator {
 public:
  // Opens data.val_path in data.format (runtime/tools/training_data.h);
  // errors name the key and the path. Fails when its token ids do not fit
  // model.vocab_size.
  static absl::StatusOr<std::unique_ptr<Evaluator>> create(const RunConfig& config);
  // Over data.val_path's loader, opened already.
  static std::unique_ptr<Evaluator> create(const RunConfig& config, std::unique_ptr<DataLoader> val);

  // Every rank calls it (a collective over engine.mesh()'s data group, and
  // inside Engine::evaluate over its tensor and pipeline groups).
  // Returns the mean per-token loss over the targets of all K batches that
  // have a loss (with pretraining windows, every target: then this is also
  // the mean of the per-batch means).
  absl::StatusOr<double> evaluate(Engine& engine);

  const SampleSet& samples() const { return loader_->samples(); }
  int64_t batches() const { return batches_; }
  int64_t rows_per_batch() const { return rows_per_batch_; }

 private:
  Evaluator(std::unique_ptr<DataLoader> loader, int64_t batches, int64_t micro_batch, int64_t rows_per_batch)
      : loader_(std::move(loader)), batches_(batches), micro_batch_(micro_batch), rows_per_batch_(rows_per_batch) {}

  std::unique_ptr<DataLoader> loader_;
  int64_t batches_, micro_batch_, rows_per_batch_;
  std::vector<int32_t> inputs_, targets_;
};

}  // namespace zero
