// Deterministic window sampling; see data_loader.h.
#include "runtime/data/data_loader.h"

#include <algorithm>

#include "core/hash.h"
#include "core/status.h"
#include "core/strings.h"

namespace zero {

absl::StatusOr<std::unique_ptr<DataLoader>> DataLoader::create(std::unique_ptr<TokenSource> source,
                                                               int64_t seq_len, uint64_t seed) {
  std::unique_ptr<DataLoader> loader(new DataLoader(std::move(source), seq_len, seed));
  if (loader->window_starts_.back() == 0) {
    return absl::InvalidArgumentError(cat("data (", loader->source_->describe(), "): no file holds seq_len + 1 = ",
                                          seq_len + 1, " tokens; use more data or a shorter model.seq_len"));
  }
  return loader;
}

DataLoader::DataLoader(std::unique_ptr<TokenSource> source, int64_t seq_len, uint64_t seed)
    : source_(std::move(source)), seq_len_(seq_len), seed_(seed) {
  window_starts_.push_back(0);
  for (int64_t s = 0; s < source_->num_sequences(); ++s) {
    const int64_t windows = std::max<int64_t>(0, source_->sequence_length(s) - seq_len_);
    window_starts_.push_back(window_starts_.back() + windows);
  }
}

absl::Status DataLoader::fill(int64_t first_sample, int64_t count, int32_t* inputs, int32_t* targets) const {
  const int64_t total = window_starts_.back();
  std::vector<int32_t> window(seq_len_ + 1);
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t g = static_cast<uint64_t>(first_sample + i);
    const int64_t w = static_cast<int64_t>(splitmix64(seed_ ^ splitmix64(g)) % static_cast<uint64_t>(total));
    const int64_t seq = std::upper_bound(window_starts_.begin(), window_starts_.end(), w) - window_starts_.begin() - 1;
    ZE_RETURN_IF_ERROR(source_->read(seq, w - window_starts_[seq], seq_len_ + 1, window.data()));
    std::copy(window.begin(), window.end() - 1, inputs + i * seq_len_);
    std::copy(window.begin() + 1, window.end(), targets + i * seq_len_);
  }
  return absl::OkStatus();
}

absl::StatusOr<Batch> DataLoader::micro_batch(int64_t step, int64_t micro_step, int rank, int world,
                                              int64_t micro_batch_size, int64_t accumulation_steps) {
  const int64_t first = first_global_sample(step * accumulation_steps + micro_step, world, rank, micro_batch_size);
  inputs_.resize(micro_batch_size * seq_len_);
  targets_.resize(micro_batch_size * seq_len_);
  ZE_RETURN_IF_ERROR(fill(first, micro_batch_size, inputs_.data(), targets_.data()));
  return Batch{Tensor::wrap(inputs_.data(), {micro_batch_size, seq_len_}, DType::kI32),
          Tensor::wrap(targets_.data(), {micro_batch_size, seq_len_}, DType::kI32)};
}

}  // namespace zero
