// Freezing parameters: choosing, before the engine is built, which of a
// model's parameters training leaves as they are (Parameter::requires_grad,
// graph/module.h). The engine then gives the frozen ones no gradient, no
// reduction, no fp32 master and no optimizer state at any ZeRO stage (they
// stay in the model dtype, sharded and gathered under stage 3), keeps them
// out of the gradient norm, and checkpoints their weights only. LoRA freezes
// a base model this way and trains its adapters.
//
// By name: a pattern is an ECMAScript regular expression (std::regex) that
// must match a parameter's whole dotted name ("wte\\.weight", "h\\.0\\..*",
// ".*\\.ln_[12]\\..*"), as Parameter::name() spells it, so "h\\.1\\..*"
// never catches h.10. A pattern that matches nothing is an error naming it
// (a typo must not silently train what the user meant to freeze).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "graph/module.h"

namespace zero {

// Counts of a freeze: parameters newly or already frozen by it, their
// elements, and how many parameters each pattern matched (in pattern order).
struct FreezeCount {
  int64_t parameters = 0;
  int64_t elements = 0;
  std::vector<int64_t> per_pattern;
};

// A pattern that matches no parameter of the module: an error (the default),
// or allowed, for a caller that checks across modules (the stages of a
// pipeline each hold part of the model; the sum of per_pattern over the
// stages must then be > 0 for each pattern).
enum class UnmatchedPattern { kRefuse, kAllow };

// Sets requires_grad on every parameter of `module`'s subtree (PyTorch's
// module.requires_grad_(b)); a parameter only used here but owned elsewhere
// (a tied one) is left alone. Fails (changing nothing) when an engine holds
// the model.
absl::Status set_requires_grad(Module& module, bool requires_grad);
inline absl::Status freeze(Module& module) { return set_requires_grad(module, false); }

// Freezes every parameter of `root` that `predicate` accepts.
absl::StatusOr<FreezeCount> freeze_parameters(Module& root, const std::function<bool(const Parameter&)>& predicate);

// Freezes every parameter of `root` whose whole name matches one of
// `patterns`. Errors (INVALID_ARGUMENT, nothing frozen): a pattern that is
// not a valid regular expression, or (kRefuse) one that matches no
// parameter, naming it and a few of the model's parameter names.
absl::StatusOr<FreezeCount> freeze_matching(Module& root, absl::Span<const std::string> patterns,
                                            UnmatchedPattern unmatched = UnmatchedPattern::kRefuse);

// Elements of `root`'s parameters that train (requires_grad) and that do not.
struct TrainableCount {
  int64_t trainable = 0, frozen = 0;
};
TrainableCount count_trainable(const Module& root);

}  // namespace zero
