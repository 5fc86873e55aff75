// Deterministic parameter initialisation that does not depend on how
// parameters are laid out or sharded: element i of parameter "name" is a
// pure function of (seed, name, i) — a counter-based hash turned into a
// normal variate with Box-Muller (a uniform one for ParamInit::uniform). So a rank that owns elements [a, b) of a
// parameter (ZeRO-3) computes exactly the values a single rank would, and
// adding a module to a model does not change the others' initial values. A
// tensor-parallel slice (Parameter::slice) takes the values of its elements'
// places in the unsplit tensor.
#pragma once

#include <cstdint>

#include "graph/module.h"

namespace zero {

// Writes elements [begin, end) of p's initial values to out[0 .. end-begin).
void init_parameter_values(const Parameter& p, uint64_t seed, int64_t begin, int64_t end, float* out);

}  // namespace zero
