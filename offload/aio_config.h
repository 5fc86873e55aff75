// DeepSpeed's "aio" section (block size and queue depth of the NVMe I/O
// engine), with DeepSpeed's config defaults (runtime/swap_tensor/constants.py).
#pragma once

#include <cstdint>

namespace zero {

struct AioConfig {
  int64_t block_size = 1048576;
  int64_t queue_depth = 8;
  int64_t intra_op_parallelism = 1;
  bool single_submit = false;
  bool overlap_events = true;
  bool use_gds = false;
};

}  // namespace zero
