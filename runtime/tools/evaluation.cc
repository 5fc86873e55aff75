// Evaluation on held-out tokens; see evaluation.h.
#include "runtime/tools/evaluation.h"

#include <algorithm>

#include "core/status.h"
#include "core/strings.h"
#include "runtime/tools/training_data.h"

namespace zero {

absl::StatusOr<std::unique_ptr<Evaluator>> Evaluator::create(const RunConfig& c) {
  ZE_ASSIGN_OR_RETURN(const std::unique_ptr<Tokenizer> tokenizer, load_data_tokenizer(c));
  ZE_ASSIGN_OR_RETURN(std::unique_ptr<DataLoader> loader,
                      open_data_path(c, c.data.val_path, "data.val_path", tokenizer.get(), /*threads=*/1));
  return create(c, std::move(loader));
}

std::unique_ptr<Evaluator> Evaluator::create(const RunConfig& c, std::unique_ptr<DataLoader> val) {
  const int64_t micro = c.engine.micro_batch_size;
  return std::unique_ptr<Evaluator>(new Evaluator(std::move(val), c.run.eval_steps, micro, micro * c.data_size()));
}

absl::StatusOr<double> Evaluator::evaluate(Engine& engine) {
  Communicator& dp = engine.comm();
  const int64_t seq = loader_->seq_len();
  ZE_CHECK_EQ(micro_batch_ * dp.world_size(), rows_per_batch_);
  inputs_.resize(micro_batch_ * seq);
  targets_.resize(micro_batch_ * seq);
  double loss_sum = 0.0;  // this rank's per-token losses, summed
  double targets = 0.0;   // and how many targets had a loss
  for (int64_t k = 0; k < batches_; ++k) {
    const int64_t first = k * rows_per_batch_ + dp.rank() * micro_batch_;
    ZE_RETURN_IF_ERROR(annotate(loader_->fill(first, micro_batch_, inputs_.data(), targets_.data()), "evaluation"));
    const Batch batch{Tensor::wrap(inputs_.data(), {micro_batch_, seq}, DType::kI32),
                      Tensor::wrap(targets_.data(), {micro_batch_, seq}, DType::kI32)};
    ZE_ASSIGN_OR_RETURN(const float mean, engine.evaluate(batch));
    const auto valid =
        static_cast<double>(std::count_if(targets_.begin(), targets_.end(), [](int32_t t) { return t >= 0; }));
    loss_sum += static_cast<double>(mean) * valid;
    targets += valid;
  }
  if (dp.world_size() > 1) {
    ZE_ASSIGN_OR_RETURN(loss_sum, dp.all_reduce_sum(loss_sum));
    ZE_ASSIGN_OR_RETURN(targets, dp.all_reduce_sum(targets));
  }
  return targets > 0 ? loss_sum / targets : 0.0;
}

}  // namespace zero
