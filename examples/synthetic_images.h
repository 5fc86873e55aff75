// Synthetic labelled images for examples/train_mixer.cc: sample g is a
// side x side grey image of stripes whose orientation is its class (class k
// of K: angle k * 180 / K degrees), with a random phase and Gaussian noise,
// already cut into non-overlapping patch x patch squares:
//
//   batch(first, n).inputs  fp32 [n, (side / patch)^2, patch^2]   row-major patches,
//                                                                 row-major pixels in each
//   batch(first, n).targets int32 [n]                             the class
//
// Every value is a pure function of (seed, g, pixel), so a sample is the same
// whichever rank draws it and however the global batch is split.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

#include "core/check.h"
#include "runtime/engine/engine.h"

namespace example {

struct ImageSpec {
  int64_t side = 16;    // pixels per side
  int64_t patch = 4;    // pixels per patch side; divides side
  int64_t classes = 4;  // stripe orientations
  float period = 4.0f;  // pixels per stripe period
  float noise = 0.5f;   // standard deviation of the added noise (the stripes' amplitude is 1)
  uint64_t seed = 1;
};

class SyntheticImages {
 public:
  explicit SyntheticImages(const ImageSpec& spec) : spec_(spec) {
    ZE_CHECK(spec.patch > 0 && spec.side % spec.patch == 0) << "patch " << spec.patch << " side " << spec.side;
  }
  int64_t patches() const { return (spec_.side / spec_.patch) * (spec_.side / spec_.patch); }
  int64_t patch_dim() const { return spec_.patch * spec_.patch; }

  // Samples [first, first + count); the batch views this object's buffers,
  // valid until the next call.
  zero::Batch batch(int64_t first, int64_t count) {
    const int64_t per_image = spec_.side * spec_.side, per_row = spec_.side / spec_.patch;
    pixels_.assign(static_cast<size_t>(count * per_image), 0.0f);
    labels_.resize(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) {
      const uint64_t g = static_cast<uint64_t>(first + i);
      const int32_t label = static_cast<int32_t>(hash(g, 0) % static_cast<uint64_t>(spec_.classes));
      const double angle = std::numbers::pi * label / static_cast<double>(spec_.classes);
      const double phase = 2.0 * std::numbers::pi * uniform(g, 1);
      labels_[static_cast<size_t>(i)] = label;
      for (int64_t y = 0; y < spec_.side; ++y) {
        for (int64_t x = 0; x < spec_.side; ++x) {
          const double along = x * std::cos(angle) + y * std::sin(angle);
          const double value = std::sin(2.0 * std::numbers::pi * along / spec_.period + phase) +
                               spec_.noise * gaussian(g, static_cast<uint64_t>(2 + y * spec_.side + x));
          const int64_t patch = (y / spec_.patch) * per_row + x / spec_.patch;
          const int64_t within = (y % spec_.patch) * spec_.patch + x % spec_.patch;
          pixels_[static_cast<size_t>(i * per_image + patch * patch_dim() + within)] = static_cast<float>(value);
        }
      }
    }
    return {zero::Tensor::wrap(pixels_.data(), {count, patches(), patch_dim()}, zero::DType::kF32),
            zero::Tensor::wrap(labels_.data(), {count}, zero::DType::kI32)};
  }

 private:
  // splitmix64 of (seed, sample, stream): independent draws per sample and use.
  uint64_t hash(uint64_t g, uint64_t stream) const {
    uint64_t z = spec_.seed * 0x9E3779B97F4A7C15ull + g * 0xD1B54A32D192ED03ull + stream * 0x8CB92BA72F3D8DD7ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // In (0, 1).
  double uniform(uint64_t g, uint64_t stream) const {
    return (static_cast<double>(hash(g, stream) >> 11) + 0.5) / 9007199254740992.0;
  }
  // Box-Muller from two uniforms of distinct streams.
  double gaussian(uint64_t g, uint64_t stream) const {
    const double u = uniform(g, 2 * stream), v = uniform(g, 2 * stream + 1);
    return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * std::numbers::pi * v);
  }

  ImageSpec spec_;
  std::vector<float> pixels_;
  std::vector<int32_t> labels_;
};

}  // namespace example
