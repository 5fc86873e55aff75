// LoRA adapters; see lora.h.
#include "graph/lora.h"

#include <cmath>

#include "core/strings.h"
#include "graph/collective_ops.h"
#include "graph/functional.h"

namespace zero {

namespace {

constexpr std::string_view kA = ".lora_A.weight", kB = ".lora_B.weight";

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool split_group(const Communicator* group) { return group != nullptr && group->world_size() > 1; }

}  // namespace

float LoraConfig::scaling() const {
  const double r_term = use_rslora ? std::sqrt(static_cast<double>(r)) : static_cast<double>(r);
  return static_cast<float>(alpha / r_term);
}

bool LoraConfig::targets(std::string_view hf_module) const {
  if (!enabled()) return false;
  for (const std::string& t : target_modules) {
    if (t == "all-linear" || hf_module == t) return true;
    if (hf_module.size() > t.size() && ends_with(hf_module, t) &&
        hf_module[hf_module.size() - t.size() - 1] == '.') {
      return true;
    }
  }
  return false;
}

bool LoraConfig::targets_any(std::string_view hf_prefix, std::initializer_list<std::string_view> names) const {
  for (std::string_view n : names) {
    if (targets(cat(hf_prefix, n))) return true;
  }
  return false;
}

std::string lora_a_name(const std::string& module) { return cat(module, kA); }
std::string lora_b_name(const std::string& module) { return cat(module, kB); }

bool is_lora_parameter(std::string_view name, std::string* module) {
  for (std::string_view suffix : {kA, kB}) {
    if (name.size() > suffix.size() && ends_with(name, suffix)) {
      if (module != nullptr) *module = std::string(name.substr(0, name.size() - suffix.size()));
      return true;
    }
  }
  return false;
}

LoraLinear::LoraLinear(std::unique_ptr<Module> base, const Parameter& base_weight, const LoraConfig& config,
                       LoraSplit split, Communicator* group, int64_t dropout_site)
    : Module(base->name()),
      scaling_(config.scaling()),
      dropout_(config.dropout),
      split_(split_group(group) ? split : LoraSplit::kNone),
      group_(split_group(group) ? group : nullptr),
      dropout_site_(dropout_site) {
  ZE_CHECK(config.enabled() && base_weight.shape().size() == 2) << name() << ": LoRA of " << base_weight.name();
  const int64_t r = config.r, out = base_weight.shape()[0], in = base_weight.shape()[1];
  const Shape& global = base_weight.global_shape();
  // PEFT's default: A Kaiming-uniform (a = sqrt(5)) over the unsplit layer's inputs, B zeros.
  a_ = add_parameter("lora_A.weight", {r, in},
                     ParamInit::uniform(static_cast<float>(1.0 / std::sqrt(static_cast<double>(global[1])))));
  b_ = add_parameter("lora_B.weight", {out, r}, ParamInit::zeros());
  if (split_ != LoraSplit::kNone) {
    ZE_CHECK(base_weight.slice().has_value()) << base_weight.name() << ": a split layer's weight is a slice";
    const ParamSlice& s = *base_weight.slice();
    if (split_ == LoraSplit::kColumn) {
      ZE_CHECK(s.dim == 0) << base_weight.name();
      ParamSlice rows = s;  // B's rows as W's
      rows.global_shape = {global[0], r};
      b_->set_slice(std::move(rows));
    } else {
      ZE_CHECK(s.dim == 1 && s.runs.size() == 1) << base_weight.name();
      a_->set_slice({{r, global[1]}, 1, s.runs[0].offset, 1, {}});  // A's columns as W's
      first_feature_ = s.runs[0].offset;
    }
  }
  base_ = adopt_child(std::move(base));
}

Tensor LoraLinear::forward(Context& ctx, const Tensor& x) {
  Tensor y = ctx.forward(*base_, x);
  // The mask of the unsplit layer's input (a row-parallel slice: its features').
  const Tensor in = dropout_ > 0.0f ? fn::dropout(ctx, x, dropout_, dropout_site_, 0, first_feature_) : x;
  // h = scaling A x: [..., r], the same on every rank of a split layer's group.
  Tensor h = fn::linear(ctx, in, *a_);
  if (split_ == LoraSplit::kRow) h = fn::reduce_from_group(ctx, std::move(h), *group_);
  if (split_ == LoraSplit::kColumn) h = fn::copy_to_group(ctx, h, *group_);
  h = fn::scale(ctx, h, scaling_);
  return fn::add_(ctx, std::move(y), fn::linear(ctx, h, *b_));
}

}  // namespace zero
