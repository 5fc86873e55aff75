// The stage-3 trace and its decisions; see gather_trace.h.
#include "zero/gather_trace.h"

#include <algorithm>

namespace zero {

int64_t GatherTrace::gather_elements(const Module& m) const {
  int64_t n = 0;
  for (const Parameter* p : m.direct_parameters()) {
    if (!parts_.count(p)) continue;  // another state's (ModelStateOptions::holds)
    const ParamPartition& part = parts_.at(p);
    if (!part.persistent) n += world_ * part.chunk;
  }
  return n;
}

void GatherTrace::begin_iteration() {
  if (state_ == State::kRecord && !trace_.empty()) {
    state_ = State::kComplete;
    prefix_elems_.assign(trace_.size() + 1, 0);
    for (size_t i = 0; i < trace_.size(); ++i) prefix_elems_[i + 1] = prefix_elems_[i] + gather_elements(*trace_[i].module);
  }
  if (state_ == State::kInvalid) {
    trace_.clear();
    state_ = State::kRecord;
  }
  position_ = 0;
}

bool GatherTrace::record(Module& m, bool backward) {
  if (paused_) return true;
  if (state_ == State::kRecord) {
    trace_.push_back({&m, backward});
    return true;
  }
  if (state_ != State::kComplete) return true;
  if (position_ < trace_.size() && trace_[position_].module == &m && trace_[position_].backward == backward) {
    ++position_;
    return true;
  }
  state_ = State::kInvalid;
  return false;
}

std::vector<Parameter*> GatherTrace::prefetch(int64_t budget, absl::FunctionRef<bool(const Parameter*)> held) const {
  std::vector<Parameter*> out;
  if (!complete() || paused_) return out;
  int64_t issued = 0;
  for (size_t j = position_; j < trace_.size() && issued < budget; ++j) {
    for (Parameter* p : trace_[j].module->direct_parameters()) {
      if (issued >= budget) break;
      if (!parts_.count(p)) continue;
      const ParamPartition& part = parts_.at(p);
      if (part.persistent || held(p)) continue;
      if (std::find(out.begin(), out.end(), p) != out.end()) continue;  // a tied parameter, already listed
      out.push_back(p);
      issued += world_ * part.chunk;
    }
  }
  return out;
}

bool GatherTrace::reused_soon(const Parameter* p) const {
  if (!complete() || paused_) return false;
  for (size_t j = position_; j < trace_.size(); ++j) {
    if (prefix_elems_[j] - prefix_elems_[position_] > config_.max_reuse_distance) return false;
    for (const Parameter* q : trace_[j].module->direct_parameters())
      if (q == p) return true;
  }
  return false;
}

}  // namespace zero
