// Evaluation on held-out tokens; see evaluation.h.
#include "runtime/tools/evaluation.h"

#include "core/status.h"
#include "core/strings.h"

namespace zero {

absl::StatusOr<std::unique_ptr<Evaluator>> Evaluator::create(const RunConfig& c) {
  const std::string what = cat("data.val_path (", c.data.val_path, ")");
  absl::StatusOr<std::unique_ptr<TokenSource>> source = c.data.format == "llmc"
                                                            ? open_llmc_shards(c.data.val_path, c.model.gpt.vocab_size)
                                                            : open_text_bytes(c.data.val_path);
  if (!source.ok()) return annotate(source.status(), what);
  if ((*source)->vocab_bound() > c.model.gpt.vocab_size) {
    return absl::InvalidArgumentError(cat(what, ": ", (*source)->describe(), " has token ids up to ",
                                          (*source)->vocab_bound() - 1, " but model.vocab_size is ",
                                          c.model.gpt.vocab_size));
  }
  absl::StatusOr<std::unique_ptr<DataLoader>> loader =
      DataLoader::create(std::move(*source), c.model.gpt.seq_len, c.data.seed);
  if (!loader.ok()) return annotate(loader.status(), what);
  const int64_t micro = c.engine.micro_batch_size;
  return std::unique_ptr<Evaluator>(
      new Evaluator(std::move(*loader), c.run.eval_steps, micro, micro * c.data_size()));
}

absl::StatusOr<double> Evaluator::evaluate(Engine& engine) {
  Communicator& dp = engine.comm();
  const int64_t seq = loader_->seq_len();
  ZE_CHECK_EQ(micro_batch_ * dp.world_size(), rows_per_batch_);
  inputs_.resize(micro_batch_ * seq);
  targets_.resize(micro_batch_ * seq);
  double loss_sum = 0.0;  // this rank's per-token losses, summed
  for (int64_t k = 0; k < batches_; ++k) {
    const int64_t first = k * rows_per_batch_ + dp.rank() * micro_batch_;
    ZE_RETURN_IF_ERROR(annotate(loader_->fill(first, micro_batch_, inputs_.data(), targets_.data()), "evaluation"));
    const Batch batch{Tensor::wrap(inputs_.data(), {micro_batch_, seq}, DType::kI32),
                      Tensor::wrap(targets_.data(), {micro_batch_, seq}, DType::kI32)};
    ZE_ASSIGN_OR_RETURN(const float mean, engine.evaluate(batch));
    loss_sum += static_cast<double>(mean) * static_cast<double>(micro_batch_ * seq);
  }
  if (dp.world_size() > 1) {
    ZE_ASSIGN_OR_RETURN(loss_sum, dp.all_reduce_sum(loss_sum));
  }
  return loss_sum / static_cast<double>(batches_ * rows_per_batch_ * seq);
}

}  // namespace zero
