// Checking a module's backward against central differences of its forward,
// for tests of recorded ops and of models written with forward only: random
// parameters and inputs, the loss sum(r * forward(x)) summed in double, and
// the comparison of dx and of every parameter's gradient, element by element,
// with (loss(v + h) - loss(v - h)) / 2h.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "graph/context.h"
#include "graph/module.h"
#include "kernels/backend.h"

namespace zero::testing {

inline std::vector<float> random_values(size_t n, uint64_t seed, float mean = 0.0f, float std = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(mean, std);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Every parameter random, fp32 (a norm's 1-d parameters around 1, the rest
// around 0, so every term of each rule is exercised), gradients zero.
inline void materialise_random(Module& m, Backend& backend, uint64_t seed) {
  for (Parameter* p : m.parameters()) {
    const bool norm = p->name().find("norm") != std::string::npos && p->shape().size() == 1;
    const std::vector<float> v = random_values(static_cast<size_t>(p->numel()), seed++, norm ? 1.0f : 0.0f, 0.5f);
    p->data = backend.empty(p->shape(), DType::kF32, MemCategory::kParameters);
    upload_fp32(backend, v, p->data);
    p->grad = backend.zeros(p->shape(), DType::kF32, MemCategory::kGradients);
  }
}

inline Tensor upload(Backend& backend, const std::vector<float>& v, const Shape& shape) {
  Tensor t = backend.empty(shape, DType::kF32, MemCategory::kActivations);
  upload_fp32(backend, v, t);
  return t;
}

// sum(r * forward(x)) in double, as training runs it (dropout active; the
// frames it leaves are dropped).
inline double weighted_sum_loss(Context& ctx, Module& m, Backend& backend, const Tensor& x,
                                const std::vector<float>& r) {
  const std::vector<float> y = download_fp32(backend, ctx.forward(m, x));
  ctx.clear();
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i) s += static_cast<double>(r[i]) * y[i];
  return s;
}

// Expects dx (the gradient of x = xv viewed as `shape`) and grads (each
// parameter's, in m.parameters() order) to be central differences of
// weighted_sum_loss with step h: |analytic - numeric| <= 3e-3 + 2e-2 |numeric|.
// Returns the number of elements checked.
inline int64_t expect_central_differences(Context& ctx, Module& m, Backend& backend, const std::vector<float>& xv,
                                          const Shape& shape, const std::vector<float>& r,
                                          const std::vector<float>& dx,
                                          const std::vector<std::vector<float>>& grads, const std::string& label,
                                          float h = 1e-2f) {
  auto expect_derivative = [&](double analytic, double numeric, const std::string& what) {
    EXPECT_NEAR(analytic, numeric, 3e-3 + 2e-2 * std::fabs(numeric)) << label << ": " << what;
  };
  int64_t checked = 0;
  EXPECT_EQ(dx.size(), xv.size()) << label << ": dx";
  for (size_t i = 0; i < xv.size() && i < dx.size(); ++i, ++checked) {
    std::vector<float> plus = xv, minus = xv;
    plus[i] += h, minus[i] -= h;
    const double numeric = (weighted_sum_loss(ctx, m, backend, upload(backend, plus, shape), r) -
                            weighted_sum_loss(ctx, m, backend, upload(backend, minus, shape), r)) /
                           (2.0 * h);
    expect_derivative(dx[i], numeric, "dx[" + std::to_string(i) + "]");
  }
  const Tensor x = upload(backend, xv, shape);
  const std::vector<Parameter*> params = m.parameters();
  EXPECT_EQ(grads.size(), params.size()) << label;
  for (size_t k = 0; k < params.size() && k < grads.size(); ++k) {
    Parameter* p = params[k];
    std::vector<float> v = download_fp32(backend, p->data);
    for (size_t i = 0; i < v.size(); ++i, ++checked) {
      const float keep = v[i];
      v[i] = keep + h;
      upload_fp32(backend, v, p->data);
      const double lp = weighted_sum_loss(ctx, m, backend, x, r);
      v[i] = keep - h;
      upload_fp32(backend, v, p->data);
      const double lm = weighted_sum_loss(ctx, m, backend, x, r);
      v[i] = keep;
      upload_fp32(backend, v, p->data);
      expect_derivative(grads[k][i], (lp - lm) / (2.0 * h), p->name() + "[" + std::to_string(i) + "]");
    }
  }
  return checked;
}

}  // namespace zero::testing
