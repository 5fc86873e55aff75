// Deterministic row sampling and token windows; see data_loader.h.
#include "runtime/data/data_loader.h"

#include <algorithm>
#include <numeric>

#include "core/check.h"
#include "core/hash.h"
#include "core/status.h"
#include "core/strings.h"

namespace zero {

namespace {

// Windows of seq_len + 1 tokens: window w of sequence s starts at token
// w - window_starts_[s] of it.
class TokenWindows final : public SampleSet {
 public:
  TokenWindows(std::unique_ptr<TokenSource> source, int64_t seq_len)
      : source_(std::move(source)), seq_len_(seq_len), window_(seq_len + 1) {
    window_starts_.push_back(0);
    for (int64_t s = 0; s < source_->num_sequences(); ++s) {
      const int64_t windows = std::max<int64_t>(0, source_->sequence_length(s) - seq_len_);
      window_starts_.push_back(window_starts_.back() + windows);
    }
  }
  int64_t size() const override { return window_starts_.back(); }
  int64_t seq_len() const override { return seq_len_; }
  absl::Status fill(int64_t w, int32_t* inputs, int32_t* targets) const override {
    const int64_t seq = std::upper_bound(window_starts_.begin(), window_starts_.end(), w) - window_starts_.begin() - 1;
    ZE_RETURN_IF_ERROR(source_->read(seq, w - window_starts_[seq], seq_len_ + 1, window_.data()));
    std::copy(window_.begin(), window_.end() - 1, inputs);
    std::copy(window_.begin() + 1, window_.end(), targets);
    return absl::OkStatus();
  }
  std::string describe() const override { return source_->describe(); }

 private:
  std::unique_ptr<TokenSource> source_;
  int64_t seq_len_;
  std::vector<int64_t> window_starts_;  // cumulative windows per sequence
  mutable std::vector<int32_t> window_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<SampleSet>> make_token_windows(std::unique_ptr<TokenSource> source, int64_t seq_len) {
  auto windows = std::make_unique<TokenWindows>(std::move(source), seq_len);
  if (windows->size() == 0) {
    return absl::InvalidArgumentError(cat("data (", windows->describe(), "): no file holds seq_len + 1 = ",
                                          seq_len + 1, " tokens; use more data or a shorter model.seq_len"));
  }
  return std::unique_ptr<SampleSet>(std::move(windows));
}

absl::StatusOr<std::unique_ptr<DataLoader>> DataLoader::create(std::unique_ptr<TokenSource> source,
                                                               int64_t seq_len, uint64_t seed) {
  ZE_ASSIGN_OR_RETURN(std::unique_ptr<SampleSet> windows, make_token_windows(std::move(source), seq_len));
  return create(std::move(windows), seed, SampleOrder::kHashed);
}

std::unique_ptr<DataLoader> DataLoader::create(std::unique_ptr<SampleSet> samples, uint64_t seed,
                                               SampleOrder order) {
  ZE_CHECK(samples != nullptr && samples->size() > 0) << "a sample set with no rows";
  return std::unique_ptr<DataLoader>(new DataLoader(std::move(samples), seed, order));
}

int64_t DataLoader::row_of_sample(int64_t g) const {
  const uint64_t n = static_cast<uint64_t>(samples_->size());
  if (order_ == SampleOrder::kHashed) {
    return static_cast<int64_t>(splitmix64(seed_ ^ splitmix64(static_cast<uint64_t>(g))) % n);
  }
  const int64_t epoch = g / static_cast<int64_t>(n);
  if (epoch != permutation_epoch_) {
    // Fisher-Yates, each swap drawn from (seed, epoch, position): the same
    // permutation on every rank and after any resume.
    permutation_.resize(n);
    std::iota(permutation_.begin(), permutation_.end(), int64_t{0});
    const uint64_t key = splitmix64(seed_ ^ splitmix64(static_cast<uint64_t>(epoch) ^ 0x5eed5eed5eed5eedull));
    for (uint64_t i = n - 1; i > 0; --i) {
      std::swap(permutation_[i], permutation_[splitmix64(key ^ splitmix64(i)) % (i + 1)]);
    }
    permutation_epoch_ = epoch;
  }
  return permutation_[static_cast<size_t>(g % static_cast<int64_t>(n))];
}

absl::Status DataLoader::fill(int64_t first_sample, int64_t count, int32_t* inputs, int32_t* targets) const {
  const int64_t seq_len = samples_->seq_len();
  for (int64_t i = 0; i < count; ++i) {
    ZE_RETURN_IF_ERROR(samples_->fill(row_of_sample(first_sample + i), inputs + i * seq_len, targets + i * seq_len));
  }
  return absl::OkStatus();
}

absl::StatusOr<Batch> DataLoader::micro_batch(int64_t step, int64_t micro_step, int rank, int world,
                                              int64_t micro_batch_size, int64_t accumulation_steps) {
  const int64_t first = first_global_sample(step * accumulation_steps + micro_step, world, rank, micro_batch_size);
  const int64_t seq_len = samples_->seq_len();
  inputs_.resize(micro_batch_size * seq_len);
  targets_.resize(micro_batch_size * seq_len);
  ZE_RETURN_IF_ERROR(fill(first, micro_batch_size, inputs_.data(), targets_.data()));
  return Batch{Tensor::wrap(inputs_.data(), {micro_batch_size, seq_len}, DType::kI32),
               Tensor::wrap(targets_.data(), {micro_batch_size, seq_len}, DType::kI32)};
}

}  // namespace zero
