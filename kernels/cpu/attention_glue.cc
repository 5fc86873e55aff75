// Attention layout shuffles; see attention_glue.h.
#include "kernels/cpu/attention_glue.h"

#include <cstring>

namespace zero::cpu {

namespace {
constexpr int64_t kParallelMinFloats = 1 << 15;
}

void split_qkv(const float* qkv, float* q, float* k, float* v, int64_t batch, int64_t seq,
               int64_t heads, int64_t head_dim) {
  const int64_t c = heads * head_dim;
  const size_t row_bytes = static_cast<size_t>(head_dim) * sizeof(float);
  float* outs[3] = {q, k, v};
#pragma omp parallel for collapse(2) schedule(static) if (batch * seq * 3 * c >= kParallelMinFloats)
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < seq; ++t) {
      const float* src = qkv + (b * seq + t) * 3 * c;
      for (int64_t part = 0; part < 3; ++part)
        for (int64_t h = 0; h < heads; ++h)
          std::memcpy(outs[part] + ((b * heads + h) * seq + t) * head_dim,
                      src + part * c + h * head_dim, row_bytes);
    }
  }
}

void merge_qkv(const float* dq, const float* dk, const float* dv, float* dqkv, int64_t batch,
               int64_t seq, int64_t heads, int64_t head_dim) {
  const int64_t c = heads * head_dim;
  const size_t row_bytes = static_cast<size_t>(head_dim) * sizeof(float);
  const float* ins[3] = {dq, dk, dv};
#pragma omp parallel for collapse(2) schedule(static) if (batch * seq * 3 * c >= kParallelMinFloats)
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < seq; ++t) {
      float* dst = dqkv + (b * seq + t) * 3 * c;
      for (int64_t part = 0; part < 3; ++part)
        for (int64_t h = 0; h < heads; ++h)
          std::memcpy(dst + part * c + h * head_dim,
                      ins[part] + ((b * heads + h) * seq + t) * head_dim, row_bytes);
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
