// Shared by the parity tests that train one model several ways (ZeRO stages,
// tensor-parallel meshes) and compare with one rank: token rows that count up
// from their own start, a pattern a GPT learns in a few steps, addressed by
// global row so every layout draws the same samples; and a hash of float
// values to compare weights across ranks.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/engine/engine.h"

namespace zero::testing {

// Row r holds tokens (r * 5 + t) % vocab for t = 0..seq_len; targets are the next token.
struct CountingRows {
  int64_t seq_len, vocab;
  std::vector<int32_t> ids, targets;

  // Rows [first_row, first_row + count) as a batch (valid until the next call).
  Batch make(int64_t first_row, int64_t count) {
    ids.clear();
    targets.clear();
    for (int64_t r = first_row; r < first_row + count; ++r)
      for (int64_t t = 0; t < seq_len; ++t) {
        ids.push_back(token(r, t));
        targets.push_back(token(r, t + 1));
      }
    return {Tensor::wrap(ids.data(), {count, seq_len}, DType::kI32),
            Tensor::wrap(targets.data(), {count, seq_len}, DType::kI32)};
  }
  int32_t token(int64_t row, int64_t t) const { return static_cast<int32_t>((row * 5 + t) % vocab); }
};

// FNV-1a over the values' bytes, continuing from h.
inline uint64_t fnv(const std::vector<float>& v, uint64_t h = 0xcbf29ce484222325ull) {
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

}  // namespace zero::testing
