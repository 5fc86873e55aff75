// Counter-based initialisation; see init.h.
#include "graph/init.h"

#include <cmath>

#include "core/hash.h"

namespace zero {

namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Uniform in (0, 1]: never 0, so log() below is finite.
double unit_uniform(uint64_t bits) { return (static_cast<double>(bits >> 11) + 1.0) * 0x1.0p-53; }

}  // namespace

void init_parameter_values(const Parameter& p, uint64_t seed, int64_t begin, int64_t end, float* out) {
  ZE_CHECK(0 <= begin && begin <= end && end <= p.numel());
  const ParamInit& init = p.init();
  const int64_t n = end - begin;
  if (init.kind == ParamInit::Kind::kZeros || init.kind == ParamInit::Kind::kOnes) {
    const float v = init.kind == ParamInit::Kind::kOnes ? 1.0f : 0.0f;
    for (int64_t i = 0; i < n; ++i) out[i] = v;
    return;
  }
  const uint64_t key = splitmix64(seed ^ splitmix64(fnv1a(p.name())));
  const double two_pi = 6.283185307179586476925;
  if (init.kind == ParamInit::Kind::kUniform) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t c = static_cast<uint64_t>(p.global_index(begin + i));
      out[i] = static_cast<float>(init.std * (2.0 * unit_uniform(splitmix64(key + c)) - 1.0));
    }
    return;
  }
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t c = static_cast<uint64_t>(p.global_index(begin + i));
    const double u1 = unit_uniform(splitmix64(key + 2 * c));
    const double u2 = unit_uniform(splitmix64(key + 2 * c + 1));
    out[i] = static_cast<float>(init.std * std::sqrt(-2.0 * std::log(u1)) * std::cos(two_pi * u2));
  }
}

}  // namespace zero
