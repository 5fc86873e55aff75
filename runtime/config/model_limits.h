// The ranges of the model section's integer keys (model.n_layer, ...), in
// one place: the section's keys (run_config.cc) and a Hugging Face
// config.json read into the same fields (hf_config.cc) both check against
// them, so a config.json cannot describe a model the section would refuse
// (a billion layers would otherwise run out of memory building the model).
#pragma once

#include <cstdint>

namespace zero {

struct ModelKeyLimit {
  const char* key;  // the model section's key, named in errors ("model.n_layer")
  int64_t min, max;
};

inline constexpr ModelKeyLimit kLayerLimit{"model.n_layer", 1, 100000};
inline constexpr ModelKeyLimit kHeadLimit{"model.n_head", 1, 65536};
inline constexpr ModelKeyLimit kWidthLimit{"model.d_model", 1, int64_t{1} << 20};
inline constexpr ModelKeyLimit kVocabLimit{"model.vocab_size", 1, INT32_MAX};
inline constexpr ModelKeyLimit kSeqLenLimit{"model.seq_len", 1, int64_t{1} << 24};
inline constexpr ModelKeyLimit kPositionsLimit{"model.max_positions", 0, int64_t{1} << 24};  // 0: seq_len
inline constexpr ModelKeyLimit kKvHeadLimit{"model.n_kv_head", 0, 65536};                   // 0: n_head
inline constexpr ModelKeyLimit kFfnWidthLimit{"model.d_ff", 0, int64_t{1} << 24};           // 0: 8/3 d_model
inline constexpr ModelKeyLimit kExpertLimit{"model.num_experts", 0, 65536};                 // 0: dense
// RoPE rotates at most 2 * RopeFreqs::kMaxHalf dimensions per head.
inline constexpr ModelKeyLimit kHeadDimLimit{"model.head_dim", 0, 512};                     // 0: d_model / n_head

}  // namespace zero
