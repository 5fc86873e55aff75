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
  for (size_t d = 0; d < shape_.size(); ++d) {
    ZE_CHECK(static_cast<int>(d) == s.dim || shape_[d] == s.global_shape[d]) << name_ << ": dim " << d << " of a slice";
  }
  if (s.runs.empty()) {
    ZE_CHECK(s.blocks >= 1 && shape_[s.dim] % s.blocks == 0 && s.global_shape[s.dim] % s.blocks == 0)
        << name_ << ": " << s.blocks << " blocks of dim " << s.dim;
    const int64_t part = shape_[s.dim] / s.blocks, global_part = s.global_shape[s.dim] / s.blocks;
    ZE_CHECK(s.offset >= 0 && s.offset + part <= global_part) << name_ << ": a slice at offset " << s.offset;
    for (int64_t b = 0; b < s.blocks; ++b) s.runs.push_back({b * global_part + s.offset, part});
  }
  // The runs: in the unsplit dim, in order, not overlapping, making up the local dim.
  int64_t local = 0, end = 0;
  for (const ParamSlice::Run& r : s.runs) {
    ZE_CHECK(r.size > 0 && r.offset >= end && r.offset + r.size <= s.global_shape[s.dim])
        << name_ << ": run [" << r.offset << ", +" << r.size << ") of dim " << s.dim << " (" << s.global_shape[s.dim]
        << ")";
    local += r.size;
    end = r.offset + r.size;
  }
  ZE_CHECK(local == shape_[s.dim]) << name_ << ": runs of " << local << " for a dim of " << shape_[s.dim];
  slice_ = std::move(s);
}

namespace {

// Elements after the slice's dim in one index of it.
int64_t inner_elems(const Shape& shape, int dim) {
  int64_t inner = 1;
  for (size_t d = static_cast<size_t>(dim) + 1; d < shape.size(); ++d) inner *= shape[d];
  return inner;
}

}  // namespace

int64_t Parameter::global_index(int64_t i) const {
  if (!slice_) return i;
  // Row-major: split i into (outer, along, inner) around the slice's dim.
  const int64_t inner = inner_elems(shape_, slice_->dim);
  const int64_t along = shape_[slice_->dim], global_along = slice_->global_shape[slice_->dim];
  const int64_t outer = i / (along * inner), r = i % inner;
  int64_t a = (i / inner) % along;
  for (const ParamSlice::Run& run : slice_->runs) {
    if (a < run.size) return (outer * global_along + run.offset + a) * inner + r;
    a -= run.size;
  }
  ZE_CHECK(false) << name_ << ": element " << i << " outside its runs";
  return -1;
}

int64_t Parameter::local_index(int64_t g) const {
  if (!slice_) return g >= 0 && g < numel_ ? g : -1;
  if (g < 0) return -1;
  const int64_t inner = inner_elems(shape_, slice_->dim);
  const int64_t along = shape_[slice_->dim], global_along = slice_->global_shape[slice_->dim];
  const int64_t outer = g / (global_along * inner), ga = (g / inner) % global_along, r = g % inner;
  if (outer >= numel_ / (along * inner)) return -1;
  int64_t before = 0;  // local indices of the runs before
  for (const ParamSlice::Run& run : slice_->runs) {
    if (ga >= run.offset && ga < run.offset + run.size) return (outer * along + before + ga - run.offset) * inner + r;
    before += run.size;
  }
  return -1;
}

void Parameter::for_each_global_run(int64_t begin, int64_t end,
                                    const std::function<void(int64_t, int64_t, int64_t)>& fn) const {
  ZE_CHECK(0 <= begin && begin <= end && end <= numel_) << name_ << " [" << begin << ", " << end << ")";
  if (begin == end) return;
  if (!slice_) {
    fn(begin, begin, end - begin);
    return;
  }
  // Each (outer index, run) of the slice is run.size x inner local elements,
  // contiguous in the unsplit tensor.
  const int64_t inner = inner_elems(shape_, slice_->dim), along = shape_[slice_->dim];
  for (int64_t i = begin; i < end;) {
    // The run holding local element i, and where it stops.
    const int64_t a = (i / inner) % along, row_start = i - i % (along * inner);
    int64_t run_end = 0;
    for (const ParamSlice::Run& run : slice_->runs) {
      run_end += run.size;
      if (a < run_end) break;
    }
    const int64_t stop = std::min(end, row_start + run_end * inner);
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
