// Double-precision references; see reference_ops.h.
#include "tests/reference/reference_ops.h"

#include <cmath>

#include "kernels/dropout_mask.h"

namespace zero::ref {

Vec linear(const Vec& x, const Vec& w, const Vec* b, int64_t n, int64_t in, int64_t out) {
  Vec y(n * out);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = b ? (*b)[o] : 0.0;
      for (int64_t i = 0; i < in; ++i) s += x[r * in + i] * w[o * in + i];
      y[r * out + o] = s;
    }
  return y;
}

Vec matmul(const Vec& a, const Vec& b, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b) {
  Vec c(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        const double av = trans_a ? a[p * m + i] : a[i * k + p];
        const double bv = trans_b ? b[j * k + p] : b[p * n + j];
        s += av * bv;
      }
      c[i * n + j] = s;
    }
  return c;
}

Vec layernorm(const Vec& x, const Vec& gamma, const Vec& beta, double eps, int64_t n, int64_t c) {
  Vec y(n * c);
  for (int64_t r = 0; r < n; ++r) {
    double mean = 0.0, var = 0.0;
    for (int64_t i = 0; i < c; ++i) mean += x[r * c + i];
    mean /= c;
    for (int64_t i = 0; i < c; ++i) var += (x[r * c + i] - mean) * (x[r * c + i] - mean);
    var /= c;
    const double rstd = 1.0 / std::sqrt(var + eps);
    for (int64_t i = 0; i < c; ++i) y[r * c + i] = (x[r * c + i] - mean) * rstd * gamma[i] + beta[i];
  }
  return y;
}

Vec rmsnorm(const Vec& x, const Vec& gamma, double eps, int64_t n, int64_t c) {
  Vec y(x.size());
  for (int64_t r = 0; r < n; ++r) {
    double ms = 0.0;
    for (int64_t j = 0; j < c; ++j) ms += x[r * c + j] * x[r * c + j] / static_cast<double>(c);
    const double s = 1.0 / std::sqrt(ms + eps);
    for (int64_t j = 0; j < c; ++j) y[r * c + j] = x[r * c + j] * s * gamma[j];
  }
  return y;
}

Vec rope(const Vec& x, const Vec& inv_freq, int64_t bh, int64_t t, int64_t d, int64_t first, bool inverse) {
  const int64_t half = d / 2;
  Vec y(x.size());
  for (int64_t h = 0; h < bh; ++h) {
    for (int64_t i = 0; i < t; ++i) {
      const double* xr = x.data() + (h * t + i) * d;
      double* yr = y.data() + (h * t + i) * d;
      for (int64_t j = 0; j < half; ++j) {
        // The angle in fp32, as Hugging Face computes it (position x inv_freq
        // in float): beyond a few hundred positions its rounding is larger
        // than everything else here, and it is part of the model's definition.
        const float angle = static_cast<float>(first + i) * static_cast<float>(inv_freq[j]);
        const double a = static_cast<double>(angle) * (inverse ? -1.0 : 1.0);
        yr[j] = xr[j] * std::cos(a) - xr[j + half] * std::sin(a);
        yr[j + half] = xr[j + half] * std::cos(a) + xr[j] * std::sin(a);
      }
    }
  }
  return y;
}

Vec swiglu(const Vec& gate, const Vec& up) {
  Vec h(gate.size());
  for (size_t i = 0; i < gate.size(); ++i) h[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
  return h;
}

Vec gelu(const Vec& x) {
  const double k = std::sqrt(2.0 / M_PI);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    y[i] = 0.5 * v * (1.0 + std::tanh(k * (v + 0.044715 * v * v * v)));
  }
  return y;
}

Vec causal_softmax(const Vec& scores, int64_t bh, int64_t t) {
  Vec p(scores.size(), 0.0);
  for (int64_t r = 0; r < bh * t; ++r) {
    const int64_t row = r % t;
    const double* x = &scores[r * t];
    double m = x[0];
    for (int64_t j = 1; j <= row; ++j) m = std::max(m, x[j]);
    double s = 0.0;
    for (int64_t j = 0; j <= row; ++j) s += std::exp(x[j] - m);
    for (int64_t j = 0; j <= row; ++j) p[r * t + j] = std::exp(x[j] - m) / s;
  }
  return p;
}

Vec attention(const Vec& qkv, int64_t b, int64_t t, int64_t heads, int64_t head_dim) {
  const int64_t c = heads * head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  Vec y(b * t * c, 0.0);
  auto at = [&](int64_t bi, int64_t ti, int64_t part, int64_t h, int64_t d) {
    return qkv[(bi * t + ti) * 3 * c + part * c + h * head_dim + d];
  };
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < t; ++i) {
        Vec s(i + 1);
        double m = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0.0;
          for (int64_t d = 0; d < head_dim; ++d) dot += at(bi, i, 0, h, d) * at(bi, j, 1, h, d);
          s[j] = dot * scale;
          m = std::max(m, s[j]);
        }
        double sum = 0.0;
        for (auto& v : s) sum += (v = std::exp(v - m));
        for (int64_t d = 0; d < head_dim; ++d) {
          double acc = 0.0;
          for (int64_t j = 0; j <= i; ++j) acc += s[j] / sum * at(bi, j, 2, h, d);
          y[(bi * t + i) * c + h * head_dim + d] = acc;
        }
      }
  return y;
}

Vec embedding(const std::vector<int32_t>& ids, const Vec& table, int64_t cols) {
  Vec out(ids.size() * cols);
  for (size_t n = 0; n < ids.size(); ++n)
    for (int64_t c = 0; c < cols; ++c) out[n * cols + c] = table[ids[n] * cols + c];
  return out;
}

Vec cross_entropy(const Vec& logits, const std::vector<int32_t>& targets, int64_t vocab) {
  Vec losses(targets.size(), 0.0);
  for (size_t n = 0; n < targets.size(); ++n) {
    if (targets[n] < 0) continue;
    const double* x = &logits[n * vocab];
    double m = x[0];
    for (int64_t j = 1; j < vocab; ++j) m = std::max(m, x[j]);
    double s = 0.0;
    for (int64_t j = 0; j < vocab; ++j) s += std::exp(x[j] - m);
    losses[n] = std::log(s) + m - x[targets[n]];
  }
  return losses;
}

void lion_step(Vec& p, Vec& m, const Vec& grad, const LionParams& h) {
  for (size_t i = 0; i < p.size(); ++i) {
    const double g = grad[i] * h.grad_scale;
    const double c = h.beta1 * m[i] + (1.0 - h.beta1) * g;
    const double sign = c > 0 ? 1.0 : c < 0 ? -1.0 : 0.0;
    p[i] = p[i] * (1.0 - h.lr * h.weight_decay) - h.lr * sign;
    m[i] = h.beta2 * m[i] + (1.0 - h.beta2) * g;
  }
}

Vec numeric_vjp(const std::function<Vec(const Vec&)>& f, const Vec& x, const Vec& dy, double h) {
  Vec g(x.size());
  Vec xp = x;
  for (size_t i = 0; i < x.size(); ++i) {
    xp[i] = x[i] + h;
    const Vec fp = f(xp);
    xp[i] = x[i] - h;
    const Vec fm = f(xp);
    xp[i] = x[i];
    double s = 0.0;
    for (size_t j = 0; j < dy.size(); ++j) s += dy[j] * (fp[j] - fm[j]);
    g[i] = s / (2 * h);
  }
  return g;
}

namespace {

// x [B, T, C] (flat) times the dropout mask of `site`, scaled as the kernels scale.
void apply_dropout(const GptShape& s, int64_t site, int64_t batch, Vec& x) {
  if (s.dropout <= 0.0f) return;
  const DropoutKey key{s.dropout_seed, site, s.first_sample};
  const double scale = dropout_scale(s.dropout);
  const int64_t c = s.d_model;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < s.seq; ++t)
      for (int64_t i = 0; i < c; ++i) {
        double& v = x[(b * s.seq + t) * c + i];
        v = dropout_keeps(key, s.dropout, b, t, i) ? v * scale : 0.0;
      }
}

}  // namespace

double gpt_loss(const GptShape& s, const std::vector<Vec>& params, const std::vector<int32_t>& inputs,
                const std::vector<int32_t>& targets, int64_t batch) {
  const int64_t c = s.d_model, t = s.seq, n = batch * t;
  size_t p = 0;
  const Vec& wte = params[p++];
  const Vec& wpe = params[p++];
  Vec x = embedding(inputs, wte, c);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < c; ++i) x[r * c + i] += wpe[(r % t) * c + i];
  apply_dropout(s, 0, batch, x);
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const Vec &ln1w = params[p++], &ln1b = params[p++];
    const Vec &attn_w = params[p++], &attn_b = params[p++];
    const Vec &proj_w = params[p++], &proj_b = params[p++];
    const Vec &ln2w = params[p++], &ln2b = params[p++];
    const Vec &fc_w = params[p++], &fc_b = params[p++];
    const Vec &fcp_w = params[p++], &fcp_b = params[p++];
    Vec h = layernorm(x, ln1w, ln1b, 1e-5, n, c);
    Vec qkv = linear(h, attn_w, &attn_b, n, c, 3 * c);
    Vec a = attention(qkv, batch, t, s.n_head, c / s.n_head);
    Vec o = linear(a, proj_w, &proj_b, n, c, c);
    apply_dropout(s, 1 + 2 * l, batch, o);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    h = layernorm(x, ln2w, ln2b, 1e-5, n, c);
    Vec f = gelu(linear(h, fc_w, &fc_b, n, c, 4 * c));
    Vec m = linear(f, fcp_w, &fcp_b, n, 4 * c, c);
    apply_dropout(s, 2 + 2 * l, batch, m);
    for (size_t i = 0; i < x.size(); ++i) x[i] += m[i];
  }
  const Vec &lnfw = params[p++], &lnfb = params[p++];
  Vec h = layernorm(x, lnfw, lnfb, 1e-5, n, c);
  Vec logits = linear(h, wte, nullptr, n, c, s.vocab);
  Vec losses = cross_entropy(logits, targets, s.vocab);
  double total = 0.0;
  for (double v : losses) total += v;
  return total / static_cast<double>(n);
}

}  // namespace zero::ref
