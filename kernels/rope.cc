// RoPE frequencies; see rope.h.
#include "kernels/rope.h"

#include <cmath>

#include "core/strings.h"

namespace zero {

absl::StatusOr<RopeFreqs> rope_frequencies(int64_t head_dim, double theta, const RopeScaling& s) {
  if (head_dim < 2 || head_dim % 2 != 0 || head_dim / 2 > RopeFreqs::kMaxHalf) {
    return absl::InvalidArgumentError(
        cat("rotary embeddings need an even head dimension of at most ", 2 * RopeFreqs::kMaxHalf, ", not ", head_dim));
  }
  if (!(theta > 0.0) || !std::isfinite(theta)) return absl::InvalidArgumentError(cat("rope_theta ", theta, " must be > 0"));
  if (!s.type.empty() && s.type != "default") {
    if (s.type != "linear" && s.type != "llama3") {
      return absl::InvalidArgumentError(cat("rope_scaling type \"", s.type,
                                            "\" is not supported (\"linear\" and \"llama3\" are; dynamic, yarn, "
                                            "longrope and the others are not implemented)"));
    }
    if (!(s.factor >= 1.0) || !std::isfinite(s.factor)) {
      return absl::InvalidArgumentError(cat("rope_scaling factor ", s.factor, " must be >= 1"));
    }
    if (s.type == "llama3" && (!(s.low_freq_factor > 0.0) || !(s.high_freq_factor > s.low_freq_factor) ||
                               s.original_max_position_embeddings < 1)) {
      return absl::InvalidArgumentError(cat("rope_scaling llama3: needs 0 < low_freq_factor (", s.low_freq_factor,
                                            ") < high_freq_factor (", s.high_freq_factor,
                                            ") and original_max_position_embeddings (",
                                            s.original_max_position_embeddings, ") >= 1"));
    }
  }
  RopeFreqs f;
  f.half = static_cast<int32_t>(head_dim / 2);
  const float base = static_cast<float>(theta);
  for (int i = 0; i < f.half; ++i) {
    // As transformers computes it: arange(0, D, 2).float() / D, base ** that, 1 / that, in fp32.
    const float e = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    f.inv_freq[i] = 1.0f / std::pow(base, e);
  }
  if (s.type == "linear") {
    for (int i = 0; i < f.half; ++i) f.inv_freq[i] = f.inv_freq[i] / static_cast<float>(s.factor);
  } else if (s.type == "llama3") {
    const double old_len = static_cast<double>(s.original_max_position_embeddings);
    const double low_wavelen = old_len / s.low_freq_factor, high_wavelen = old_len / s.high_freq_factor;
    for (int i = 0; i < f.half; ++i) {
      const float w = f.inv_freq[i];
      const double wavelen = 2.0 * M_PI / static_cast<double>(w);
      if (wavelen > low_wavelen) {
        f.inv_freq[i] = w / static_cast<float>(s.factor);  // low frequency: interpolated
      } else if (wavelen >= high_wavelen) {               // the band between: smoothed
        const float smooth = static_cast<float>((old_len / wavelen - s.low_freq_factor) /
                                                (s.high_freq_factor - s.low_freq_factor));
        f.inv_freq[i] = (1.0f - smooth) * w / static_cast<float>(s.factor) + smooth * w;
      }
    }
  }
  return f;
}

}  // namespace zero
