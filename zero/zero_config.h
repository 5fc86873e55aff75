// DeepSpeed's zero_optimization section as typed values, with DeepSpeed's
// defaults (runtime/zero/config.py at HEAD). Sizes are in elements, as there.
#pragma once

#include <cstdint>
#include <string>

#include "core/check.h"
#include "offload/offload_config.h"

namespace zero {

// ZeRO's stages: what the data-parallel ranks partition (1: optimizer
// state; 2: and gradients; 3: and parameters). Ordered, so `stage >=
// ZeroStage::k2` reads as "gradients are partitioned".
enum class ZeroStage { k0 = 0, k1 = 1, k2 = 2, k3 = 3 };
inline int stage_number(ZeroStage s) { return static_cast<int>(s); }
// Stage n (0-3; anything else is a programming error: configs are checked
// against the schema's bounds when parsed).
inline ZeroStage zero_stage(int64_t n) {
  ZE_CHECK(n >= 0 && n <= 3) << "ZeRO stage " << n;
  return static_cast<ZeroStage>(n);
}

struct ZeroConfig {
  ZeroStage stage = ZeroStage::k0;
  bool contiguous_gradients = true;
  bool overlap_comm = false;  // DeepSpeed: None -> True at stage 3, else False
  bool overlap_comm_given = false;  // the config set it (else DeepSpeed's default, which zero-train may revise)
  bool reduce_scatter = true;
  int64_t reduce_bucket_size = 500000000;
  bool use_multi_rank_bucket_allreduce = true;
  int64_t allgather_bucket_size = 500000000;
  bool load_from_fp32_weights = true;
  bool round_robin_gradients = false;
  bool ignore_unused_parameters = true;
  int64_t sub_group_size = 1000000000;
  // stage 3 (each also accepted under its stage3_ alias)
  int64_t prefetch_bucket_size = 50000000;
  int64_t param_persistence_threshold = 100000;
  int64_t model_persistence_threshold = INT64_MAX;
  int64_t max_live_parameters = 1000000000;
  int64_t max_reuse_distance = 1000000000;
  bool gather_16bit_weights_on_model_save = false;
  // Which windows the config set; the config loader clears the flags of the
  // keys it left unset, which the stages then size to the model
  // (zero/window_sizes.h). Set by default: a value given in C++ is kept.
  struct Given {
    bool reduce_bucket_size = true;
    bool prefetch_bucket_size = true;
    bool max_live_parameters = true;
    bool max_reuse_distance = true;
  } given;

  OffloadConfig offload_param = param_offload_defaults();
  OffloadConfig offload_optimizer;
};

}  // namespace zero
