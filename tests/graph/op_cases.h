// The cases every recorded op's backward rule is tested on
// (graph/functional.h), shared by the CPU test against central differences
// (tests/graph/autograd_test.cc) and the CUDA test against the CPU
// (tests/kernels/cuda/autograd_rules_test.cc): a module per op whose forward is
// that op (with a few others around it where its rule needs gradients
// meeting, or an input of a given form), its parameters, and its input's
// shape.
#pragma once

#include <array>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "graph/context.h"
#include "graph/functional.h"
#include "kernels/rope.h"
#include "tests/testing/central_differences.h"

namespace zero::autograd_cases {

// A module whose forward is a function of its input and its parameters,
// written with recorded ops only (no backward of its own).
class FnModule : public Module {
 public:
  using Body = std::function<Tensor(Context&, const Tensor&, FnModule&)>;
  FnModule(std::string name, Body body) : Module(std::move(name)), body_(std::move(body)) {}
  Parameter* param(const std::string& name, Shape shape, ParamInit init = ParamInit::normal(0.5f)) {
    return params_.emplace_back(add_parameter(name, std::move(shape), init));
  }
  Parameter& p(size_t i) { return *params_.at(i); }
  Tensor forward(Context& ctx, const Tensor& x) override { return body_(ctx, x, *this); }

 private:
  Body body_;
  std::vector<Parameter*> params_;
};

using testing::random_values;
using testing::upload;

struct OpCase {
  std::string name;
  std::function<void(FnModule&)> params;
  FnModule::Body body;
  Shape input = {2, 3, 5};
};

inline RopeFreqs small_rope() { return rope_frequencies(4, 10000.0, {}).value(); }

// Token ids [2, 3] for the embedding cases (a constant of the call: no
// gradient), two of them repeated so their rows' gradients add up.
// On the call's backend, so that the cases run on any.
inline Tensor token_ids(Context& c) {
  static const std::vector<int32_t> ids = {4, 0, 4, 6, 2, 3};
  Tensor t = c.backend().empty({2, 3}, DType::kI32, MemCategory::kActivations);
  c.backend().copy(t.data(), ids.data(), ids.size() * sizeof(int32_t));
  return t;
}

inline constexpr int64_t kRows = 6, kFeatures = 5;

inline std::vector<OpCase> op_cases() {
  return {
      {"linear", [](FnModule& m) { m.param("w", {kFeatures, kFeatures}); m.param("b", {kFeatures}); },
       [](Context& c, const Tensor& x, FnModule& m) { return fn::linear(c, x, m.p(0), &m.p(1)); }},
      {"linear_no_bias", [](FnModule& m) { m.param("w", {3, kFeatures}); },
       [](Context& c, const Tensor& x, FnModule& m) { return fn::linear(c, x, m.p(0)); }},
      {"add_gelu", [](FnModule&) {}, [](Context& c, const Tensor& x, FnModule&) { return fn::add(c, x, fn::gelu(c, x)); }},
      {"layer_norm", [](FnModule& m) { m.param("norm.weight", {kFeatures}); m.param("norm.bias", {kFeatures}); },
       [](Context& c, const Tensor& x, FnModule& m) { return fn::layer_norm(c, x, m.p(0), m.p(1), 1e-5f); }},
      {"rms_norm", [](FnModule& m) { m.param("norm.weight", {kFeatures}); },
       [](Context& c, const Tensor& x, FnModule& m) { return fn::rms_norm(c, x, m.p(0), 1e-6f); }},
      {"swiglu", [](FnModule& m) { m.param("w", {kFeatures, kFeatures}); },
       [](Context& c, const Tensor& x, FnModule& m) { return fn::swiglu(c, fn::linear(c, x, m.p(0)), x); }},
      // Gemma's: the (1 + w) RMSNorm, the GeGLU gate, the embedding scale.
      {"rms_norm_unit_offset", [](FnModule& m) { m.param("norm.weight", {kFeatures}); },
       [](Context& c, const Tensor& x, FnModule& m) { return fn::rms_norm(c, x, m.p(0), 1e-6f, nullptr, true); }},
      {"geglu", [](FnModule& m) { m.param("w", {kFeatures, kFeatures}); },
       [](Context& c, const Tensor& x, FnModule& m) { return fn::geglu(c, fn::linear(c, x, m.p(0)), x); }},
      {"scale", [](FnModule&) {}, [](Context& c, const Tensor& x, FnModule&) { return fn::scale(c, x, 2.5f); }},
      {"softcap", [](FnModule&) {}, [](Context& c, const Tensor& x, FnModule&) { return fn::softcap(c, x, 0.8f); }},
      {"dropout", [](FnModule&) {}, [](Context& c, const Tensor& x, FnModule&) { return fn::dropout(c, x, 0.3f, 4); }},
      // x against itself: both of the rule's GEMMs, and their gradients meeting at x.
      {"matmul_nt_scaled", [](FnModule&) {},
       [](Context& c, const Tensor& x, FnModule&) {
         MatmulSpec s;
         s.trans_b = true, s.alpha = 0.7f;
         return fn::matmul(c, x, x, s);
       }},
      {"matmul_tn", [](FnModule&) {},
       [](Context& c, const Tensor& x, FnModule&) {
         MatmulSpec s;
         s.trans_a = true;
         return fn::matmul(c, x, fn::gelu(c, x), s);
       }},
      {"causal_softmax", [](FnModule&) {},
       [](Context& c, const Tensor& x, FnModule&) { return fn::causal_softmax_(c, fn::add(c, x, x), {2, 4, 4}); },
       {2, 4, 4}},
      {"transpose12", [](FnModule&) {}, [](Context& c, const Tensor& x, FnModule&) { return fn::transpose12(c, x); },
       {2, 3, 2, 5}},
      {"rope", [](FnModule&) {},
       [](Context& c, const Tensor& x, FnModule&) { return fn::rope_(c, fn::gelu(c, x), small_rope()); },
       {1, 2, 3, 4}},
      // gelu(x + E[ids]), the table of 7 rows.
      {"embedding", [](FnModule& m) { m.param("wte", {7, kFeatures}); },
       [](Context& c, const Tensor& x, FnModule& m) {
         return fn::gelu(c, fn::add(c, x, fn::embedding(c, token_ids(c), m.p(0))));
       }},
      // The table holds rows [2, 5) of the 7: ids 0 and 6 give zero rows.
      {"embedding_slice", [](FnModule& m) { m.param("wte", {3, kFeatures}); },
       [](Context& c, const Tensor& x, FnModule& m) {
         return fn::gelu(c, fn::add(c, x, fn::embedding_slice(c, token_ids(c), m.p(0), 2)));
       }},
      // x + P[2 + t] for a table of 6 positions.
      {"add_positional", [](FnModule& m) { m.param("wpe", {6, kFeatures}); },
       [](Context& c, const Tensor& x, FnModule& m) { return fn::gelu(c, fn::add_positional(c, x, m.p(0), 2)); }},
      // q + gelu(k + gelu(v)): each of q, k, v its own gradient, merged into qkv's.
      {"split_qkv", [](FnModule&) {},
       [](Context& c, const Tensor& x, FnModule&) {
         std::array<Tensor, 3> qkv = fn::split_qkv(c, x, 2, 2);
         return fn::add(c, qkv[0], fn::gelu(c, fn::add(c, qkv[1], fn::gelu(c, qkv[2]))));
       },
       {1, 3, 12}},
  };
}

}  // namespace zero::autograd_cases
