// Attention layout shuffles; see attention_glue.h.
#include "kernels/cpu/attention_glue.h"

#include <cstring>

namespace zero::cpu {

namespace {
constexpr int64_t kParallelMinFloats = 1 << 15;
}

void split_qkv(const float* qkv, float* q, float* k, float* v, int64_t batch, int64_t seq,
               int64_t heads, int64_t kv_heads, int64_t head_dim) {
  const int64_t row = (heads + 2 * kv_heads) * head_dim;
  const size_t head_bytes = static_cast<size_t>(head_dim) * sizeof(float);
  float* outs[3] = {q, k, v};
  const int64_t counts[3] = {heads, kv_heads, kv_heads};
#pragma omp parallel for collapse(2) schedule(static) if (batch * seq * row >= kParallelMinFloats)
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < seq; ++t) {
      const float* src = qkv + (b * seq + t) * row;
      for (int64_t part = 0; part < 3; ++part) {
        const int64_t n = counts[part];
        for (int64_t h = 0; h < n; ++h, src += head_dim)
          std::memcpy(outs[part] + ((b * n + h) * seq + t) * head_dim, src, head_bytes);
      }
    }
  }
}

void merge_qkv(const float* dq, const float* dk, const float* dv, float* dqkv, int64_t batch,
               int64_t seq, int64_t heads, int64_t kv_heads, int64_t head_dim) {
  const int64_t row = (heads + 2 * kv_heads) * head_dim;
  const size_t head_bytes = static_cast<size_t>(head_dim) * sizeof(float);
  const float* ins[3] = {dq, dk, dv};
  const int64_t counts[3] = {heads, kv_heads, kv_heads};
#pragma omp parallel for collapse(2) schedule(static) if (batch * seq * row >= kParallelMinFloats)
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < seq; ++t) {
      float* dst = dqkv + (b * seq + t) * row;
      for (int64_t part = 0; part < 3; ++part) {
        const int64_t n = counts[part];
        for (int64_t h = 0; h < n; ++h, dst += head_dim)
          std::memcpy(dst, ins[part] + ((b * n + h) * seq + t) * head_dim, head_bytes);
      }
    }
  }
}

void transpose12(const float* src, float* dst, int64_t a, int64_t b, int64_t c, int64_t d) {
  const size_t row_bytes = static_cast<size_t>(d) * sizeof(float);
#pragma omp parallel for collapse(2) schedule(static) if (a * b * c * d >= kParallelMinFloats)
  for (int64_t i = 0; i < a; ++i)
    for (int64_t j = 0; j < b; ++j)
      for (int64_t k = 0; k < c; ++k)
        std::memcpy(dst + ((i * c + k) * b + j) * d, src + ((i * b + j) * c + k) * d, row_bytes);
}

}  // namespace zero::cpu
