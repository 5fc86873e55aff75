// Comparing Hugging Face model directories as files: the same tensor names,
// dtypes, shapes and stored bytes (what a zero-step export must give back),
// and model descriptions as the model they build; for the format, oracle and
// command-line tests.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <set>
#include <string>

#include "graph/gpt.h"
#include "runtime/checkpoint/hf_weights.h"

namespace zero::testing {

// The stored bytes of one tensor, as they are in its file.
inline std::string hf_raw_bytes(const HfWeights& w, const HfTensor& t) {
  std::ifstream f(w.files().at(static_cast<size_t>(t.file)), std::ios::binary);
  std::string out(static_cast<size_t>(t.bytes), '\0');
  f.seekg(t.offset);
  f.read(out.data(), t.bytes);
  EXPECT_TRUE(f.good()) << w.files().at(static_cast<size_t>(t.file)) << ": " << t.name;
  return out;
}

// A tensor of a golden file as fp32 values (any dtype HfWeights reads).
inline std::vector<float> hf_fp32(const HfWeights& w, const std::string& name) {
  const HfTensor& t = w.tensors().at(name);
  const int64_t n = shape_numel(Shape(t.shape.begin(), t.shape.end()));
  std::vector<float> out(static_cast<size_t>(n));
  const absl::Status s = w.read(t, 0, n, out.data());
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

// An I32 tensor of a golden file (token ids).
inline std::vector<int32_t> hf_i32(const HfWeights& w, const std::string& name) {
  const HfTensor& t = w.tensors().at(name);
  EXPECT_EQ(t.dtype, "I32") << name;
  const std::string raw = hf_raw_bytes(w, t);
  std::vector<int32_t> out(raw.size() / 4);
  std::memcpy(out.data(), raw.data(), raw.size());
  return out;
}

// Every tensor of `got` is `want`'s, bit for bit, and neither has one the other lacks.
inline void expect_same_hf_tensors(const HfWeights& got, const HfWeights& want, const std::string& what) {
  std::set<std::string> got_keys, want_keys;
  for (const auto& [k, t] : got.tensors()) got_keys.insert(k);
  for (const auto& [k, t] : want.tensors()) want_keys.insert(k);
  EXPECT_EQ(got_keys, want_keys) << what;
  for (const auto& [k, t] : got.tensors()) {
    auto it = want.tensors().find(k);
    if (it == want.tensors().end()) continue;  // reported above
    const HfTensor& src = it->second;
    EXPECT_EQ(t.dtype, src.dtype) << what << ": " << k;
    EXPECT_EQ(t.shape, src.shape) << what << ": " << k;
    if (t.bytes != src.bytes) continue;
    const std::string a = hf_raw_bytes(got, t), b = hf_raw_bytes(want, src);
    if (a != b) {
      size_t i = 0;
      while (a[i] == b[i]) ++i;
      ADD_FAILURE() << what << ": tensor " << k << " differs from the source's, first at byte " << i;
    }
  }
}

// The same model, field by field as it computes (the family, kv_heads(),
// head_dim(), the biases, ffn_width(), positions(), the tied head; RoPE's
// settings for the families with RoPE).
inline void expect_same_model(const GptConfig& a, const GptConfig& b) {
  EXPECT_EQ(a.arch, b.arch);
  EXPECT_EQ(a.n_layer, b.n_layer);
  EXPECT_EQ(a.n_head, b.n_head);
  EXPECT_EQ(a.kv_heads(), b.kv_heads());
  EXPECT_EQ(a.d_model, b.d_model);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.positions(), b.positions());
  EXPECT_EQ(a.tied_head(), b.tied_head());
  EXPECT_EQ(a.init_std, b.init_std);
  EXPECT_EQ(a.head_dim(), b.head_dim());
  const ModelFeatures fa = a.features(), fb = b.features();
  EXPECT_EQ(fa.qkv_bias, fb.qkv_bias);
  EXPECT_EQ(fa.o_bias, fb.o_bias);
  EXPECT_EQ(fa.mlp_bias, fb.mlp_bias);
  if (a.rope()) {
    EXPECT_EQ(a.ffn_width(), b.ffn_width());
    EXPECT_EQ(a.norm_eps, b.norm_eps);
    EXPECT_EQ(a.rope_theta, b.rope_theta);
    EXPECT_EQ(a.rope_scaling.type, b.rope_scaling.type);
    EXPECT_EQ(a.rope_scaling.factor, b.rope_scaling.factor);
    EXPECT_EQ(a.rope_scaling.low_freq_factor, b.rope_scaling.low_freq_factor);
    EXPECT_EQ(a.rope_scaling.high_freq_factor, b.rope_scaling.high_freq_factor);
    EXPECT_EQ(a.rope_scaling.original_max_position_embeddings, b.rope_scaling.original_max_position_embeddings);
  }
}

}  // namespace zero::testing
