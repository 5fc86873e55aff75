// The dropout mask as a pure function of a key: which elements of an
// activation [B, T, C] a Dropout layer keeps is decided by hashing counters,
// never by drawing from a stateful generator, and never stored. The same key
// gives the same mask on every backend (the CPU and CUDA kernels include this
// header), on every rank and in an activation-checkpointing recompute.
//
//   keep(b, t, c) = bits32(seed, layer, first_sample + b, first_position + t, first_feature + c) >= threshold(p)
//
// bits32 chains splitmix64's finaliser (Steele, Lea and Flood 2014): one mix
// per call (seed, layer), one per row (global sample index), one per element
// (position t, feature c). first_sample is the global sample index of row 0
// (runtime/data/data_loader.h's g), so N ranks at micro-batch b draw exactly
// the masks one rank draws at micro-batch N*b; first_position is the
// sequence position of column 0 (a sequence-parallel shard's offset), so T
// tensor ranks holding S/T positions each draw the masks of the whole sequence;
// first_feature is the feature index of feature 0 (a row-parallel layer's
// input slice: LoRA's dropout on it), so the slices draw the whole row's mask.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define ZE_DROPOUT_HD __host__ __device__ __forceinline__
#else
#define ZE_DROPOUT_HD inline
#endif

namespace zero {

// Which mask a dropout op applies; see the top of this file.
struct DropoutKey {
  uint64_t seed = 0;         // the run's seed (EngineConfig::seed)
  int64_t layer = 0;         // which dropout site of the model
  int64_t first_sample = 0;  // global sample index of the tensor's row 0
  int64_t first_position = 0;  // sequence position of the tensor's position 0
  int64_t first_feature = 0;   // feature index of the tensor's feature 0
};

ZE_DROPOUT_HD uint64_t dropout_mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Per call: the seed and the layer.
ZE_DROPOUT_HD uint64_t dropout_call_key(uint64_t seed, int64_t layer) {
  return dropout_mix64(seed ^ dropout_mix64(static_cast<uint64_t>(layer)));
}

// Per row: the global sample index.
ZE_DROPOUT_HD uint64_t dropout_row_key(uint64_t call_key, int64_t sample) {
  return dropout_mix64(call_key ^ dropout_mix64(static_cast<uint64_t>(sample) + 0x632BE59BD9B4E019ull));
}

// 32 random bits of element (t, c) of a row.
ZE_DROPOUT_HD uint32_t dropout_bits(uint64_t row_key, int64_t t, int64_t c) {
  const uint64_t pos = (static_cast<uint64_t>(t) << 32) | static_cast<uint64_t>(c);
  return static_cast<uint32_t>(dropout_mix64(row_key ^ (pos * 0xD6E8FEB86659FD93ull)) >> 32);
}

// Elements whose bits are below this are dropped: floor(p 2^32), p in [0, 1).
inline uint32_t dropout_threshold(float p) {
  return static_cast<uint32_t>(static_cast<double>(p) * 4294967296.0);
}

// What a kept element is multiplied by: 1 / (1 - p) rounded to fp32 once, on
// the host, so every backend multiplies by the same number.
inline float dropout_scale(float p) { return static_cast<float>(1.0 / (1.0 - static_cast<double>(p))); }

// Whether element (b, t, c) of a [B, T, C] tensor is kept under key / p
// (a scalar reference for tests and the double-precision reference model).
inline bool dropout_keeps(const DropoutKey& key, float p, int64_t b, int64_t t, int64_t c) {
  const uint64_t row = dropout_row_key(dropout_call_key(key.seed, key.layer), key.first_sample + b);
  return dropout_bits(row, key.first_position + t, key.first_feature + c) >= dropout_threshold(p);
}

}  // namespace zero
