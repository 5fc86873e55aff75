// Module tree bookkeeping.
#include "graph/module.h"

#include <algorithm>

#include "core/check.h"
#include "core/strings.h"
#include "graph/context.h"

namespace zero {

Tensor Module::backward(Context& ctx, const Tensor& dy) { return ctx.replay(*this, dy); }

absl::Status Parameter::set_requires_grad(bool requires_grad) {
  if (requires_grad == requires_grad_) return absl::OkStatus();
  if (index_ >= 0) {
    return absl::FailedPreconditionError(cat(
        "parameter ", name_, ": cannot ", requires_grad ? "unfreeze" : "freeze",
        " it while an engine holds the model (its gradient, master weights and optimizer state were laid out when "
        "the engine was built); set requires_grad before initialize / Engine::create"));
  }
  requires_grad_ = requires_grad;
  return absl::OkStatus();
}

void Parameter::set_slice(ParamSlice s) {
  ZE_CHECK(s.global_shape.size() == shape_.size() && s.dim >= 0 && s.dim < static_cast<int>(shape_.size()))
      << name_ << ": a slice of a " << s.global_shape.size() << "-d tensor along dim " << s.dim;
  ZE_CHECK(s.blocks >= 1 && shape_[s.dim] % s.blocks == 0 && s.global_shape[s.dim] % s.blocks == 0)
      << name_ << ": " << s.blocks << " blocks of dim " << s.dim;
  for (size_t d = 0; d < shape_.size(); ++d) {
    const bool along = static_cast<int>(d) == s.dim;
    ZE_CHECK(along ? s.offset >= 0 && s.offset + shape_[d] / s.blocks <= s.global_shape[d] / s.blocks
                   : shape_[d] == s.global_shape[d])
        << name_ << ": dim " << d << " of a slice at offset " << s.offset;
  }
  slice_ = std::move(s);
}

int64_t Parameter::global_index(int64_t i) const {
  if (!slice_) return i;
  // Row-major: split i into (outer, along, inner) around the slice's dim.
  int64_t inner = 1;
  for (size_t d = static_cast<size_t>(slice_->dim) + 1; d < shape_.size(); ++d) inner *= shape_[d];
  const int64_t along = shape_[slice_->dim], global_along = slice_->global_shape[slice_->dim];
  const int64_t outer = i / (along * inner), a = (i / inner) % along, r = i % inner;
  // Block b of the slice's `blocks`, position w in this rank's part of it.
  const int64_t part = along / slice_->blocks, b = a / part, w = a % part;
  return (outer * global_along + b * (global_along / slice_->blocks) + slice_->offset + w) * inner + r;
}

int64_t Parameter::local_index(int64_t g) const {
  if (!slice_) return g >= 0 && g < numel_ ? g : -1;
  int64_t inner = 1;
  for (size_t d = static_cast<size_t>(slice_->dim) + 1; d < shape_.size(); ++d) inner *= shape_[d];
  const int64_t along = shape_[slice_->dim], global_along = slice_->global_shape[slice_->dim];
  const int64_t outer = g / (global_along * inner), ga = (g / inner) % global_along, r = g % inner;
  const int64_t part = along / slice_->blocks, global_part = global_along / slice_->blocks;
  const int64_t b = ga / global_part, w = ga % global_part - slice_->offset;
  if (g < 0 || w < 0 || w >= part) return -1;
  return (outer * along + b * part + w) * inner + r;
}

void Parameter::for_each_global_run(int64_t begin, int64_t end,
                                    const std::function<void(int64_t, int64_t, int64_t)>& fn) const {
  ZE_CHECK(0 <= begin && begin <= end && end <= numel_) << name_ << " [" << begin << ", " << end << ")";
  if (begin == end) return;
  if (!slice_) {
    fn(begin, begin, end - begin);
    return;
  }
  // Each (outer index, block) of the slice is part x inner local elements,
  // contiguous in the unsplit tensor.
  int64_t inner = 1;
  for (size_t d = static_cast<size_t>(slice_->dim) + 1; d < shape_.size(); ++d) inner *= shape_[d];
  const int64_t unit = shape_[slice_->dim] / slice_->blocks * inner;
  for (int64_t i = begin; i < end;) {
    const int64_t stop = std::min(end, (i / unit + 1) * unit);
    fn(i, global_index(i), stop - i);
    i = stop;
  }
}

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
