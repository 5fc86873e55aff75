// Rotary position embeddings (RoPE; Su et al., "RoFormer"), in the
// rotate-half form of GPT-NeoX and Llama: for a head vector x of D values at
// position p, and i < D/2,
//   y[i]       = x[i] cos(p w_i) - x[i + D/2] sin(p w_i)
//   y[i + D/2] = x[i + D/2] cos(p w_i) + x[i] sin(p w_i)
// with w_i = inv_freq[i]. The frequencies are Hugging Face's: theta^(-2i/D)
// computed in fp32, then the config's rope_scaling applied ("linear": all
// divided by the factor; "llama3": Llama 3.1's long-context rule, low
// frequencies divided by the factor, high ones kept, the band between
// interpolated). Other scaling types are refused by name.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace zero {

// A Hugging Face config's "rope_scaling" (type empty: none).
struct RopeScaling {
  std::string type;  // "", "linear" or "llama3"
  double factor = 1.0;
  double low_freq_factor = 1.0;   // llama3
  double high_freq_factor = 4.0;  // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3
};

// The frequencies of one head, passed to the rope op by value.
struct RopeFreqs {
  static constexpr int kMaxHalf = 256;  // head_dim up to 512
  int32_t half = 0;                     // D / 2
  float inv_freq[kMaxHalf] = {};
};

// INVALID_ARGUMENT naming the problem: an odd or too large head_dim, theta
// <= 0, an unknown scaling type, a factor < 1, or llama3's factors out of order.
absl::StatusOr<RopeFreqs> rope_frequencies(int64_t head_dim, double theta, const RopeScaling& scaling);

}  // namespace zero
