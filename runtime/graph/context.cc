// Context: hooks around module calls and saved-activation frames.
#include "runtime/graph/context.h"

namespace zero {

Tensor Context::forward(Module& m, const Tensor& x) {
  if (hooks_) hooks_->pre_forward(m);
  Frame* frame = nullptr;
  if (grad_enabled_) {
    std::deque<Frame>& stack = frames_[&m];
    stack.emplace_back();
    frame = &stack.back();
  }
  current_.push_back(frame);
  Tensor y = m.forward(*this, x);
  current_.pop_back();
  if (hooks_) hooks_->post_forward(m);
  return y;
}

Tensor Context::backward(Module& m, const Tensor& dy) {
  ZE_CHECK(grad_enabled_) << "backward with grad disabled";
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
}

}  // namespace zero
