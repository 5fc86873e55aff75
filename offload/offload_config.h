// DeepSpeed's zero_optimization.offload_optimizer and offload_param
// sections as typed values, with DeepSpeed's defaults (runtime/zero/
// offload_config.py at HEAD). Sizes are in elements, as there.
#pragma once

#include <cstdint>
#include <string>

namespace zero {

enum class OffloadDevice { kNone, kCpu, kNvme };

struct OffloadConfig {
  OffloadDevice device = OffloadDevice::kNone;
  std::string nvme_path;
  int64_t buffer_count = 4;            // optimizer: 4; param: 5
  int64_t buffer_size = 100000000;     // param only (elements)
  int64_t max_in_cpu = 1000000000;     // param only (elements)
  bool pin_memory = true;              // True since DeepSpeed v0.19.5
  bool pipeline_read = false, pipeline_write = false;  // optimizer only
  bool fast_init = false;              // optimizer only
  double ratio = 1.0;                  // optimizer only
};

// offload_param's defaults differ from offload_optimizer's in buffer_count.
inline OffloadConfig param_offload_defaults() {
  OffloadConfig o;
  o.buffer_count = 5;
  return o;
}

}  // namespace zero
