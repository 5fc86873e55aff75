// One hash of parameters' full values as a rank sees them (gathered over
// ZeRO's partitions): ranks that should hold the same model compare it with
// same_everywhere (tests/testing/counting_rows.h).
#pragma once

#include <vector>

#include <gtest/gtest.h>

#include "runtime/engine/engine.h"
#include "tests/testing/counting_rows.h"

namespace zero::testing {

inline uint64_t gathered_hash(Engine& engine, const std::vector<Parameter*>& params) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (Parameter* p : params) {
    absl::StatusOr<std::vector<float>> v = engine.state().gather_parameter(*p);
    EXPECT_TRUE(v.ok()) << v.status();
    if (v.ok()) h = fnv(*v, h);
  }
  return h;
}

}  // namespace zero::testing
