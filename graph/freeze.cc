// Freezing parameters; see freeze.h.
#include "graph/freeze.h"

#include <algorithm>
#include <regex>

#include "core/status.h"
#include "core/strings.h"

namespace zero {

namespace {

// Every parameter's flag is checked settable first, so a refusal changes nothing.
absl::Status set_all(const std::vector<Parameter*>& params, bool requires_grad) {
  for (Parameter* p : params) {
    // A parameter an engine holds refuses, changing nothing: its refusal.
    if (p->index() >= 0 && p->requires_grad() != requires_grad) return p->set_requires_grad(requires_grad);
  }
  for (Parameter* p : params) ZE_RETURN_IF_ERROR(p->set_requires_grad(requires_grad));
  return absl::OkStatus();
}

// "a, b, c, ... (N in all)" for a message.
std::string some_names(const std::vector<Parameter*>& params) {
  std::string out;
  const size_t shown = std::min<size_t>(params.size(), 6);
  for (size_t i = 0; i < shown; ++i) out += cat(i == 0 ? "" : ", ", params[i]->name());
  if (shown < params.size()) out += cat(", ... (", params.size(), " in all)");
  return out;
}

}  // namespace

absl::Status set_requires_grad(Module& module, bool requires_grad) {
  return set_all(module.parameters(), requires_grad);
}

absl::StatusOr<FreezeCount> freeze_parameters(Module& root, const std::function<bool(const Parameter&)>& predicate) {
  std::vector<Parameter*> chosen;
  for (Parameter* p : root.parameters())
    if (predicate(*p)) chosen.push_back(p);
  ZE_RETURN_IF_ERROR(set_all(chosen, false));
  FreezeCount count;
  for (const Parameter* p : chosen) {
    ++count.parameters;
    count.elements += p->numel();
  }
  return count;
}

namespace {

// Hugging Face's separate projections name tensors the Llama family fuses
// (self_attn.qkv_proj, mlp.gate_up_proj): a pattern written against them
// matches nothing, and the error says what to freeze instead.
std::string fused_names_hint(const std::string& pattern, const std::vector<Parameter*>& params) {
  auto any_named = [&](std::string_view part) {
    for (const Parameter* p : params)
      if (p->name().find(part) != std::string::npos) return true;
    return false;
  };
  const bool attention = pattern.find("q_proj") != std::string::npos || pattern.find("k_proj") != std::string::npos ||
                         (pattern.find("v_proj") != std::string::npos && pattern.find("qkv_proj") == std::string::npos);
  const bool mlp = pattern.find("gate_proj") != std::string::npos ||
                   (pattern.find("up_proj") != std::string::npos && pattern.find("gate_up_proj") == std::string::npos);
  if (attention && any_named("qkv_proj")) {
    return "; q_proj, k_proj and v_proj are one fused self_attn.qkv_proj here (Hugging Face's names are for the "
           "weights in and out), so freeze qkv_proj";
  }
  if (mlp && any_named("gate_up_proj")) {
    return "; gate_proj and up_proj are one fused mlp.gate_up_proj here (Hugging Face's names are for the weights in "
           "and out), so freeze gate_up_proj";
  }
  return "";
}

}  // namespace

absl::StatusOr<FreezeCount> freeze_matching(Module& root, absl::Span<const std::string> patterns,
                                            UnmatchedPattern unmatched) {
  std::vector<std::regex> compiled;
  for (const std::string& pattern : patterns) {
    try {
      compiled.emplace_back(pattern, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      return absl::InvalidArgumentError(
          cat("freeze pattern \"", pattern, "\" is not a valid regular expression (", e.what(), ")"));
    }
  }
  const std::vector<Parameter*> params = root.parameters();
  FreezeCount count;
  count.per_pattern.assign(patterns.size(), 0);
  std::vector<Parameter*> chosen;
  for (Parameter* p : params) {
    bool any = false;
    for (size_t i = 0; i < compiled.size(); ++i) {
      if (std::regex_match(p->name(), compiled[i])) {
        ++count.per_pattern[i];
        any = true;
      }
    }
    if (any) chosen.push_back(p);
  }
  if (unmatched == UnmatchedPattern::kRefuse) {
    for (size_t i = 0; i < patterns.size(); ++i) {
      if (count.per_pattern[i] > 0) continue;
      return absl::InvalidArgumentError(cat(
          "freeze pattern \"", patterns[i], "\" matches no parameter (a pattern must match a whole dotted name, e.g. "
          "\"h\\\\.0\\\\..*\" for every parameter of block 0; the model's are ", some_names(params), ")",
          fused_names_hint(patterns[i], params)));
    }
  }
  ZE_RETURN_IF_ERROR(set_all(chosen, false));
  for (const Parameter* p : chosen) {
    ++count.parameters;
    count.elements += p->numel();
  }
  return count;
}

TrainableCount count_trainable(const Module& root) {
  TrainableCount c;
  for (const Parameter* p : root.parameters()) (p->requires_grad() ? c.trainable : c.frozen) += p->numel();
  return c;
}

}  // namespace zero
