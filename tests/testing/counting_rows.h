// Shared by the parity tests that train one model several ways (ZeRO stages,
// tensor-parallel meshes) and compare with one rank: token rows that count up
// from their own start, a pattern a GPT learns in a few steps, addressed by
// global row so every layout draws the same samples; a hash of float
// values to compare weights across ranks; the fp32 master weights of a
// model split over a tensor group, reassembled by name; and the comparisons
// of a run with one rank's.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

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

// Whether h is the same on every rank of `group` (min == max of its top 52 bits).
inline bool same_everywhere(Communicator& group, uint64_t h) {
  const double hv = static_cast<double>(h >> 12);  // 52 bits survive a double
  const double lo = -group.all_reduce_max(-hv).value(), hi = group.all_reduce_max(hv).value();
  return lo == hi;
}

// The engine's fp32 master weights by name, each tensor-parallel slice placed
// in its unsplit tensor and summed over the tensor group (a collective over
// the data and tensor groups).
inline std::map<std::string, std::vector<float>> full_master_weights(Engine& engine, Communicator& tensor) {
  std::map<std::string, std::vector<float>> out;
  for (Parameter* p : engine.model().parameters()) {
    absl::StatusOr<std::vector<float>> v = engine.gather_master(*p);
    EXPECT_TRUE(v.ok()) << v.status();
    if (!v.ok()) continue;
    if (!p->slice()) {
      out[p->name()] = *v;
      continue;
    }
    std::vector<float> full(static_cast<size_t>(shape_numel(p->global_shape())), 0.0f);
    for (int64_t i = 0; i < p->numel(); ++i) full[p->global_index(i)] = (*v)[i];
    EXPECT_TRUE(tensor.all_reduce(full.data(), static_cast<int64_t>(full.size()), DType::kF32, ReduceOp::kSum).ok());
    out[p->name()] = full;
  }
  return out;
}

// A run's losses within 1e-5 relative of the reference's and its gradient
// norms within 5e-5 (1e-6 at step 1), step by step; the reference learns.
inline void expect_same_trajectory(const std::vector<double>& losses, const std::vector<double>& norms,
                                   const std::vector<double>& ref_losses, const std::vector<double>& ref_norms,
                                   const std::string& what) {
  ASSERT_EQ(losses.size(), ref_losses.size()) << what;
  ASSERT_EQ(norms.size(), ref_norms.size()) << what;
  for (size_t s = 0; s < ref_losses.size(); ++s) {
    EXPECT_NEAR(losses[s], ref_losses[s], 1e-5 * ref_losses[s]) << what << " step " << s + 1;
    EXPECT_NEAR(norms[s], ref_norms[s], (s == 0 ? 1e-6 : 5e-5) * ref_norms[s]) << what << " step " << s + 1;
  }
  EXPECT_LT(ref_losses.back(), ref_losses.front() - 0.1) << "the reference run learns";
}

// Every tensor of `some` (a pipeline stage's, or the whole model's) equals
// the reference's of the same name within 1e-5 of the largest value.
inline void expect_same_weights(const std::map<std::string, std::vector<float>>& some,
                                const std::map<std::string, std::vector<float>>& ref, const std::string& what) {
  ASSERT_FALSE(some.empty()) << what;
  double max_abs = 0, max_diff = 0;
  for (const auto& [name, have] : some) {
    const auto it = ref.find(name);
    ASSERT_NE(it, ref.end()) << what << ": " << name << " is not the reference model's";
    ASSERT_EQ(have.size(), it->second.size()) << what << ": " << name;
    for (size_t j = 0; j < have.size(); ++j) {
      max_abs = std::max(max_abs, std::abs(double(it->second[j])));
      max_diff = std::max(max_diff, std::abs(double(have[j]) - it->second[j]));
    }
  }
  EXPECT_LE(max_diff, 1e-5 * max_abs) << what << ": final master weights";
}

}  // namespace zero::testing
