// Two safetensors files hold the same model: the same header (names, shapes,
// dtypes, byte offsets) and fp32 values within 1e-5 of the largest. How the
// checkpoint tests hold a consolidated checkpoint of one layout to another's.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace zero::testing {

inline void expect_same_model_file(const std::string& path, const std::string& reference_path) {
  auto bytes = [](const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::vector<char>(std::istreambuf_iterator<char>(f), {});
  };
  const std::vector<char> a = bytes(path), b = bytes(reference_path);
  ASSERT_GE(a.size(), 8u) << path;
  ASSERT_EQ(a.size(), b.size()) << path << " vs " << reference_path;
  uint64_t header = 0;
  std::memcpy(&header, a.data(), 8);
  ASSERT_EQ(std::string(a.begin(), a.begin() + 8 + header), std::string(b.begin(), b.begin() + 8 + header))
      << "names, shapes and offsets";
  double max_abs = 0, max_diff = 0;
  for (size_t i = 8 + header; i + 4 <= a.size(); i += 4) {
    float x, y;
    std::memcpy(&x, a.data() + i, 4);
    std::memcpy(&y, b.data() + i, 4);
    max_abs = std::max(max_abs, std::abs(double(y)));
    max_diff = std::max(max_diff, std::abs(double(x) - y));
  }
  EXPECT_LE(max_diff, 1e-5 * max_abs);
  EXPECT_GT(max_abs, 0.0);
}

}  // namespace zero::testing
