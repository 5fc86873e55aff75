// Plain double-precision reference implementations of the ops and of a GPT
// forward pass. They are written for readability (no SIMD, no threads, no
// fusion) and are what the real kernels and models are compared against; the
// gradient tests differentiate them numerically (central differences in
// double, which are accurate to ~1e-9 here, so the comparison measures the
// fp32 kernel, not the finite-difference error).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace zero::ref {

using Vec = std::vector<double>;

// y[n, o] = sum_i x[n, i] * w[o, i] + b[o]   (w is [out, in], like nn.Linear)
Vec linear(const Vec& x, const Vec& w, const Vec* b, int64_t n, int64_t in, int64_t out);
// C[M,N] = op(A) op(B), A [M,K] (or [K,M] if trans_a), B [K,N] (or [N,K] if trans_b)
Vec matmul(const Vec& a, const Vec& b, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b);
Vec layernorm(const Vec& x, const Vec& gamma, const Vec& beta, double eps, int64_t n, int64_t c);
Vec gelu(const Vec& x);  // tanh form
// RMSNorm of x [n, c]: x / sqrt(mean(x^2) + eps) * gamma.
Vec rmsnorm(const Vec& x, const Vec& gamma, double eps, int64_t n, int64_t c);
// Rotary embedding (rotate-half form) of x [bh, t, d]: row i at position
// first + i, frequency j (j < d/2) inv_freq[j], the angle rounded to fp32 as
// Hugging Face computes it; inverse rotates by -angle.
Vec rope(const Vec& x, const Vec& inv_freq, int64_t bh, int64_t t, int64_t d, int64_t first, bool inverse = false);
// silu(gate) * up.
Vec swiglu(const Vec& gate, const Vec& up);
// Causal row softmax of scores [BH, T, T]; masked entries are 0.
Vec causal_softmax(const Vec& scores, int64_t bh, int64_t t);
// Full causal self-attention core: qkv [B, T, 3C] -> y [B, T, C], scale 1/sqrt(D).
Vec attention(const Vec& qkv, int64_t b, int64_t t, int64_t heads, int64_t head_dim);
Vec embedding(const std::vector<int32_t>& ids, const Vec& table, int64_t cols);
// Per-row losses -log softmax(logits)[target]; negative targets give 0.
Vec cross_entropy(const Vec& logits, const std::vector<int32_t>& targets, int64_t vocab);

// One Lion step (Chen et al. 2023; DeepSpeed's FusedLion, decoupled decay) on
// the weights p and the momentum m, element by element, with
// g = grad * grad_scale:
//   c = beta1 m + (1 - beta1) g;  p = p (1 - lr wd) - lr sign(c);  m = beta2 m + (1 - beta2) g
// where sign(0) = 0 (torch.sign).
struct LionParams {
  double lr, beta1, beta2, weight_decay, grad_scale;
};
void lion_step(Vec& p, Vec& m, const Vec& grad, const LionParams& h);

// Central-difference vector-Jacobian product: returns d(sum_j dy[j] * f(x)[j])/dx.
Vec numeric_vjp(const std::function<Vec(const Vec&)>& f, const Vec& x, const Vec& dy,
                double h = 1e-6);

// GPT-2 forward in double (the structure of graph/gpt.h): token and
// position embeddings, pre-LN blocks (attention, GELU MLP), final LN, LM head
// tied to the token embedding. Returns the mean cross-entropy over B*T.
// dropout > 0: GPT-2's dropout sites with the masks of kernels/dropout_mask.h
// under (seed, site, first_sample + b), as the GPT numbers its sites.
struct GptShape {
  int64_t n_layer, n_head, d_model, vocab, seq;
  float dropout = 0.0f;
  uint64_t dropout_seed = 0;
  int64_t first_sample = 0;
};
// Parameters in the model's registration order (see Gpt::parameters()).
double gpt_loss(const GptShape& s, const std::vector<Vec>& params, const std::vector<int32_t>& inputs,
                const std::vector<int32_t>& targets, int64_t batch);

}  // namespace zero::ref
