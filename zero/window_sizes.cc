// Window sizes for a model; see window_sizes.h.
#include "zero/window_sizes.h"

#include <algorithm>

namespace zero {

ZeroConfig windows_for_model(ZeroConfig z, int64_t trainable_elems, int world) {
  if (z.stage < ZeroStage::k2 || world < 2) return z;
  const int64_t saved = trainable_elems - (trainable_elems + world - 1) / world;
  const int64_t cap = std::max<int64_t>(1, saved / kWindowShareOfSaving);
  auto scale = [cap](int64_t& window, bool given) {
    if (!given) window = std::min(window, cap);
  };
  scale(z.reduce_bucket_size, z.given.reduce_bucket_size);
  if (z.stage == ZeroStage::k3 && z.offload_param.device == OffloadDevice::kNone) {
    scale(z.prefetch_bucket_size, z.given.prefetch_bucket_size);
    scale(z.max_live_parameters, z.given.max_live_parameters);
    scale(z.max_reuse_distance, z.given.max_reuse_distance);
  }
  return z;
}

}  // namespace zero
