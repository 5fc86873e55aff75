// Context: hooks around module calls and saved-activation frames.
#include "runtime/graph/context.h"

#include <chrono>
#include <utility>

namespace zero {

void Context::set_checkpoint_segments(std::vector<std::vector<Module*>> segments) {
  segments_.clear();
  first_of_.clear();
  last_of_.clear();
  for (auto& mods : segments) {
    if (mods.empty()) continue;
    first_of_[mods.front()] = segments_.size();
    last_of_[mods.back()] = segments_.size();
    segments_.push_back({std::move(mods), Tensor(), false});
  }
}

double Context::take_recompute_seconds() { return std::exchange(recompute_seconds_, 0.0); }

void Context::recompute(Segment& s) {
  const auto t0 = std::chrono::steady_clock::now();
  recomputing_ = true;
  Tensor x = s.input;
  for (Module* m : s.modules) x = forward(*m, x);
  recomputing_ = false;
  s.recomputed = true;
  recompute_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Tensor Context::forward(Module& m, const Tensor& x) {
  // Entering a checkpoint segment (not while recomputing it): keep its input only.
  auto seg_first = grad_enabled_ && !recomputing_ ? first_of_.find(&m) : first_of_.end();
  if (seg_first != first_of_.end()) {
    Segment& s = segments_[seg_first->second];
    s.input = x;
    s.recomputed = false;
    ++no_save_depth_;
  }
  if (hooks_) hooks_->pre_forward(m);
  Frame* frame = nullptr;
  if (grad_enabled_ && no_save_depth_ == 0) {
    std::deque<Frame>& stack = frames_[&m];
    stack.emplace_back();
    frame = &stack.back();
  }
  current_.push_back(frame);
  Tensor y = m.forward(*this, x);
  current_.pop_back();
  if (hooks_) hooks_->post_forward(m);
  if (grad_enabled_ && !recomputing_ && no_save_depth_ > 0 && last_of_.count(&m)) --no_save_depth_;
  return y;
}

Tensor Context::backward(Module& m, const Tensor& dy) {
  ZE_CHECK(grad_enabled_) << "backward with grad disabled";
  // The last module of a checkpoint segment: rebuild the segment's frames first.
  auto seg_last = last_of_.find(&m);
  if (seg_last != last_of_.end() && !segments_[seg_last->second].recomputed) recompute(segments_[seg_last->second]);
  auto it = frames_.find(&m);
  ZE_CHECK(it != frames_.end() && !it->second.empty())
      << "backward of " << m.name() << " without a matching forward";
  if (hooks_) hooks_->pre_backward(m);
  current_.push_back(&it->second.back());
  Tensor dx = m.backward(*this, dy);
  current_.pop_back();
  // Re-find: nested calls may have rehashed the map.
  it = frames_.find(&m);
  it->second.pop_back();
  if (it->second.empty()) frames_.erase(it);
  if (hooks_) hooks_->post_backward(m);
  // Leaving a segment's backward (at its first module): its input is no longer needed.
  auto seg_first = first_of_.find(&m);
  if (seg_first != first_of_.end()) {
    Segment& s = segments_[seg_first->second];
    s.input = Tensor();
    s.recomputed = false;
  }
  return dx;
}

void Context::save(const Tensor& t) {
  ZE_CHECK(!current_.empty()) << "save() outside a module call";
  if (current_.back() != nullptr) current_.back()->saved.push_back(t);
}

const Tensor& Context::saved(size_t i) const {
  ZE_CHECK(!current_.empty() && current_.back() != nullptr);
  ZE_CHECK_LT(i, current_.back()->saved.size());
  return current_.back()->saved[i];
}

size_t Context::live_frames() const {
  size_t n = 0;
  for (const auto& [m, stack] : frames_) n += stack.size();
  return n;
}

void Context::clear() {
  frames_.clear();
  current_.clear();
  for (Segment& s : segments_) {
    s.input = Tensor();
    s.recomputed = false;
  }
  no_save_depth_ = 0;
  recomputing_ = false;
}

}  // namespace zero
