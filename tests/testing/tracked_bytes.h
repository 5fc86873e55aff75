// The host bytes the tracking allocator holds now for model states
// (parameters, gradients, optimizer state): what the ZeRO memory tests
// compare with the bytes each stage should keep.
#pragma once

#include <cstdint>

#include "core/memory_tracker.h"

namespace zero::testing {

struct Bytes {
  int64_t params, grads, optim;
};

inline Bytes tracked() {
  const MemorySnapshot s = MemoryTracker::global().snapshot();
  return {s.at(Tier::kHost, MemCategory::kParameters).current, s.at(Tier::kHost, MemCategory::kGradients).current,
          s.at(Tier::kHost, MemCategory::kOptimizerState).current};
}

}  // namespace zero::testing
