// Parameters in memory without an engine, for tests of modules on their own:
// each from its initialisation under `seed` (by name, so a pipeline stage's
// or a twin module's are the whole model's), fp32, gradients zero.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/init.h"
#include "graph/module.h"
#include "kernels/backend.h"

namespace zero::testing {

inline void materialise_parameters(Module& m, Backend& backend, uint64_t seed) {
  for (Parameter* p : m.parameters()) {
    std::vector<float> v(static_cast<size_t>(p->numel()));
    init_parameter_values(*p, seed, 0, p->numel(), v.data());
    p->data = backend.empty(p->shape(), DType::kF32, MemCategory::kParameters);
    upload_fp32(backend, v, p->data);
    p->grad = backend.zeros(p->shape(), DType::kF32, MemCategory::kGradients);
  }
}

}  // namespace zero::testing
