// The sizes of ZeRO's windows for a model: what stage 2 and stage 3 hold
// beside their partitions. DeepSpeed's defaults — reduce_bucket_size 5e8
// (stage 2's gradient buckets; stage 3's reductions in flight),
// stage3_prefetch_bucket_size 5e7, stage3_max_live_parameters 1e9 and
// stage3_max_reuse_distance 1e9 (the parameters stage 3 keeps gathered) —
// suit models of billions of parameters. On a smaller one they let a stage
// hold more than its partitioning saves, so it takes more memory than the
// stage below (SmolLM-135M, fp32, 2 ranks: stage 2's one bucket was the whole
// gradient, 513 MiB, against the 257 MiB its partition saves; stage 3 had the
// whole model gathered at the start of backward). A window the config leaves
// unset (ZeroConfig::given) is capped at kWindowShareOfSaving of the elements
// the partitioning saves, n - n / W: a tied parameter's bucket (alive from its
// first use in backward to its last), the bucket being filled and those in
// flight then stay below what the stage below holds. A window the config sets
// is used as set. One rank partitions nothing, and with offload_param the
// stage-3 window is what hides the parameters' reads: there DeepSpeed's
// defaults stand.
#pragma once

#include <cstdint>

#include "zero/zero_config.h"

namespace zero {

// A window left unset holds at most 1/kWindowShareOfSaving of n - n / W elements.
inline constexpr int64_t kWindowShareOfSaving = 8;

// `z` with its unset windows capped for a stage that partitions
// `trainable_elems` elements of this rank's model over `world` ranks (stage 2:
// reduce_bucket_size; stage 3: the three stage-3 windows and
// reduce_bucket_size; the stage-3 windows only without offload_param). Every
// cap is at least 1 element; stages 0 and 1 hold no window (they reduce their
// full gradient buffer in place), and one rank saves nothing: both are
// returned as they are.
ZeroConfig windows_for_model(ZeroConfig z, int64_t trainable_elems, int world);

}  // namespace zero
