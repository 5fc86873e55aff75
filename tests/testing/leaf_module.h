// A module for tests of what is planned over parameters (layouts, buckets,
// the stage-3 trace): parameters of its own, tied ones and children, and no
// compute (forward and backward pass their input through).
#pragma once

#include <string>
#include <utility>

#include "graph/module.h"

namespace zero::testing {

class Leaf : public Module {
 public:
  explicit Leaf(std::string name) : Module(std::move(name)) {}
  Parameter* own(const std::string& name, Shape shape) {
    return add_parameter(name, std::move(shape), ParamInit::zeros());
  }
  void tie(Parameter* p) { use_parameter(p); }
  using Module::add_child;
  Tensor forward(Context&, const Tensor& x) override { return x; }
  Tensor backward(Context&, const Tensor& dy) override { return dy; }
};

}  // namespace zero::testing
