// Comparing Hugging Face model directories as files: the same tensor names,
// dtypes, shapes and stored bytes (what a zero-step export must give back),
// for the oracle test and the command-line test.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>

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

}  // namespace zero::testing
