// Layout shuffles around attention (no arithmetic): splitting the fused QKV
// projection into per-head Q, K, V and back, and the [B,H,T,D] <-> [B,T,H,D]
// transpose. Each moves rows of D contiguous floats, threaded over (b, t).
#pragma once

#include <cstdint>

namespace zero::cpu {

// qkv [B, T, H + 2 G, D] -> q [B, H, T, D], k, v [B, G, T, D]
void split_qkv(const float* qkv, float* q, float* k, float* v, int64_t batch, int64_t seq,
               int64_t heads, int64_t kv_heads, int64_t head_dim);
// dq [B, H, T, D], dk, dv [B, G, T, D] -> dqkv [B, T, H + 2 G, D]
void merge_qkv(const float* dq, const float* dk, const float* dv, float* dqkv, int64_t batch,
               int64_t seq, int64_t heads, int64_t kv_heads, int64_t head_dim);
// dst[a, c, b, :] = src[a, b, c, :] with src [A, Bd, Cd, D]
void transpose12(const float* src, float* dst, int64_t a, int64_t b, int64_t c, int64_t d);

}  // namespace zero::cpu
