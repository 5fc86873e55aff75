// A whole model's layout over a mesh; see model.h.
#include "graph/model.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>
#include <typeinfo>

namespace zero {

namespace {

// The layout of a model that implements none: one stage, unsplit. Stateless,
// so one instance serves every such model.
Model& whole_model() {
  static Model whole;
  return whole;
}

}  // namespace

Model& model_of(Module& root) {
  if (auto* m = dynamic_cast<Model*>(&root)) return *m;
  return whole_model();
}

const Model& model_of(const Module& root) {
  if (const auto* m = dynamic_cast<const Model*>(&root)) return *m;
  return whole_model();
}

std::string model_type_name(const Module& root) {
  const char* mangled = typeid(root).name();
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> demangled(abi::__cxa_demangle(mangled, nullptr, nullptr, &status),
                                                        &std::free);
  return status == 0 && demangled != nullptr ? std::string(demangled.get()) : std::string(mangled);
}

}  // namespace zero
