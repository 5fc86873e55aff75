// Writing initial parameter values into state buffers, shared by the stage
// implementations. Values come from init_parameter_values (a pure function of
// seed, parameter name and element index), so every rank computes exactly
// the values of the elements it holds, whatever the sharding.
#pragma once

#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/graph/module.h"

namespace zero {

// Converts host fp32 values into dst (any float dtype, any tier of backend),
// through a tracked staging buffer when dst is not host memory.
void upload_fp32(Backend& backend, const std::vector<float>& host, const Tensor& dst);

// Elements [begin, end) of p's initial values.
std::vector<float> initial_values(const Parameter& p, uint64_t seed, int64_t begin, int64_t end);

// dst (fp32, any tier) read back to host.
std::vector<float> download_fp32(Backend& backend, const Tensor& src);

}  // namespace zero
