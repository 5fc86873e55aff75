// Module tree bookkeeping.
#include "graph/module.h"

namespace zero {

Parameter* Module::add_parameter(const std::string& local_name, Shape shape, ParamInit init) {
  owned_.push_back(std::make_unique<Parameter>(child_name(local_name), std::move(shape), init));
  direct_.push_back(owned_.back().get());
  return owned_.back().get();
}

void Module::collect_owned(std::vector<Parameter*>& out) const {
  for (const auto& p : owned_) out.push_back(p.get());
  for (const auto& c : children_) c->collect_owned(out);
}

std::vector<Parameter*> Module::parameters() const {
  std::vector<Parameter*> out;
  collect_owned(out);
  return out;
}

std::vector<Module*> Module::modules() {
  std::vector<Module*> out{this};
  for (const auto& c : children_) {
    std::vector<Module*> sub = c->modules();
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

}  // namespace zero
