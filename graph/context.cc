// Context: hooks around module calls and saved-activation frames.
#include "graph/context.h"

#include <chrono>
#include <utility>

#include "comm/communicator.h"
#include "core/status.h"
#include "core/strings.h"

namespace zero {

absl::StatusOr<std::vector<std::vector<Module*>>> split_checkpoint_segments(const std::vector<Module*>& layers,
                                                                            int64_t k) {
  if (layers.empty()) {
    return absl::InvalidArgumentError(
        "activation_checkpointing.number_checkpoints: this model has no checkpointable layers; mark segments with "
        "Engine::set_checkpoint_segments");
  }
  if (k < 1 || k > static_cast<int64_t>(layers.size())) {
    return absl::InvalidArgumentError(cat("activation_checkpointing.number_checkpoints: ", k,
                                          " must be between 1 and the model's ", layers.size(), " layers"));
  }
  std::vector<std::vector<Module*>> segments(static_cast<size_t>(k));
  for (size_t i = 0; i < layers.size(); ++i) segments[i * static_cast<size_t>(k) / layers.size()].push_back(layers[i]);
  return segments;
}

void Context::set_checkpoint_segments(std::vector<std::vector<Module*>> segments) {
  segments_.clear();
  first_of_.clear();
  last_of_.clear();
  for (auto& mods : segments) {
    if (mods.empty()) continue;
    first_of_[mods.front()] = segments_.size();
    last_of_[mods.back()] = segments_.size();
    segments_.push_back({std::move(mods), Tensor(), false, Tensor(), nullptr, nullptr, Tensor(), Shape()});
  }
  forward_segments_.clear();
}

void Context::set_checkpoint_offload(Backend* host) {
  ZE_CHECK(host == nullptr || forward_segments_.empty()) << "set_checkpoint_offload between forward and backward";
  ZE_CHECK(host == nullptr || host->compute_tier() == Tier::kHost || host == &backend_)
      << "checkpoint host copies on " << host->name();
  host_ = host;
  if (host_ != nullptr && copy_stream_ < 0) copy_stream_ = backend_.create_stream();
}

void Context::set_checkpoint_partition(Communicator* group) {
  ZE_CHECK(forward_segments_.empty()) << "set_checkpoint_partition between forward and backward";
  partition_ = group != nullptr && group->world_size() > 1 ? group : nullptr;
}

int64_t Context::partition_block(int64_t n) const {
  const int64_t t = partition_->world_size();
  return (n + t - 1) / t;
}

Tensor Context::partition_view(const Segment& s) const {
  const int64_t n = s.input.numel(), block = partition_block(n), first = std::min(n, partition_->rank() * block);
  return s.input.view({n}).slice(first, {std::min(block, n - first)});
}

void Context::gather_input(Segment& s) {
  const int64_t block = partition_block(shape_numel(s.input_shape));
  Tensor whole = backend_.empty({partition_->world_size() * block}, s.part.dtype(), MemCategory::kActivations);
  backend_.copy(whole.slice(partition_->rank() * block, {block}), s.part);
  note(annotate(partition_->all_gather(whole.data(), block, block, whole.dtype()),
                cat("partition_activations: all-gather of the input of the segment at ", s.modules.front()->name())));
  s.input = whole.slice(0, s.input_shape);
  s.part = Tensor();
}

double Context::take_recompute_seconds() { return std::exchange(recompute_seconds_, 0.0); }

// The copy out waits for the compute that produced the input (an event on the
// compute stream); the input stays referenced until the copy has landed
// (Context::forward waits for copied_out before dropping it).
void Context::start_copy_out(Segment& s) {
  // Partitioned, only this rank's piece goes (into a buffer of a whole block).
  const Tensor src = partitioned() ? partition_view(s) : s.input;
  const Shape kept = partitioned() ? Shape{partition_block(s.input.numel())} : s.input.shape();
  s.host_input = host_->empty(kept, s.input.dtype(), MemCategory::kActivations, Tier::kHost);
  backend_.wait_event(copy_stream_, backend_.record_event(kComputeStream));
  backend_.copy_async(s.host_input.data(), src.data(), src.nbytes(), copy_stream_);
  s.copied_out = backend_.record_event(copy_stream_);
}

// The host copy is complete (forward waited for it), so the copy back waits
// for nothing; the new buffer's memory is free for any stream (the caching
// allocators hand a block out again only once the compute stream has passed
// its release). Whoever reads `input` waits for copied_back first.
void Context::start_copy_back(Segment& s) {
  if (s.input.defined() || s.part.defined()) return;
  ZE_CHECK(s.host_input.defined()) << "checkpoint segment of " << s.modules.front()->name() << " has no saved input";
  Tensor& dst = partitioned() ? s.part : s.input;
  dst = backend_.empty(s.host_input.shape(), s.host_input.dtype(), MemCategory::kActivations);
  backend_.copy_async(dst.data(), s.host_input.data(), s.host_input.nbytes(), copy_stream_);
  s.copied_back = backend_.record_event(copy_stream_);
}

void Context::wait_copies(Segment& s) {
  if (s.copied_out) backend_.synchronize(std::exchange(s.copied_out, nullptr));
  if (s.copied_back) backend_.synchronize(std::exchange(s.copied_back, nullptr));
}

void Context::recompute(Segment& s) {
  const auto t0 = std::chrono::steady_clock::now();
  recomputing_ = true;
  recompute_base_ = current_.size();
  Tensor x = s.input;
  for (Module* m : s.modules) x = forward(*m, x);
  recompute_base_ = SIZE_MAX;
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
    s.input_shape = x.shape();
    s.recomputed = false;
    ++no_save_depth_;
    if (host_ != nullptr) {
      forward_segments_.push_back(seg_first->second);
      start_copy_out(s);
    }
  }
  const ProfilePhase phase = recomputing_ ? ProfilePhase::kRecompute : ProfilePhase::kForward;
  if (profiler_) profiler_->enter(m, phase);
  if (hooks_) note(hooks_->pre_forward(m));
  Frame* frame = nullptr;
  if (grad_enabled_ && no_save_depth_ == 0) {
    std::deque<Frame>& stack = frames_[&m];
    stack.emplace_back();
    frame = &stack.back();
    frame->tape.begin(x);
  }
  current_.push_back(frame);
  calls_.push_back(&m);
  Tensor y = m.forward(*this, x);
  calls_.pop_back();
  current_.pop_back();
  if (frame != nullptr) frame->tape.end(y);
  // In the caller's tape the call is one op, whose rule is the module's
  // backward (not again when a checkpoint segment is recomputed: its calls
  // were recorded by the forward, and the caller's tape is being replayed).
  if (current_.size() != recompute_base_ && recording()) {
    current_.back()->tape.record(
        cat("module ", m.name().empty() ? "(root)" : m.name()), {x}, y,
        [&m](Context& ctx, const Tensor& dy) { return std::vector<Tensor>{ctx.backward(m, dy)}; }, {}, &m);
  }
  if (hooks_) note(hooks_->post_forward(m));
  if (grad_enabled_ && !recomputing_ && no_save_depth_ > 0) {
    auto seg_last = last_of_.find(&m);
    if (seg_last != last_of_.end()) {
      --no_save_depth_;
      // Offload: the input (or its partition) is in host memory once its
      // copy has landed. Partitioned: this rank keeps its piece only.
      Segment& s = segments_[seg_last->second];
      if (host_ != nullptr && s.host_input.defined()) {
        wait_copies(s);
        s.input = Tensor();
      } else if (partitioned() && s.input.defined()) {
        const Tensor piece = partition_view(s);
        s.part = backend_.empty({partition_block(s.input.numel())}, s.input.dtype(), MemCategory::kActivations);
        if (piece.numel() > 0) backend_.copy(s.part.slice(0, {piece.numel()}), piece);
        s.input = Tensor();
      }
    }
  }
  if (profiler_) profiler_->exit(m, phase);
  return y;
}

Tensor Context::backward(Module& m, const Tensor& dy) {
  ZE_CHECK(grad_enabled_) << "backward with grad disabled";
  // The last module of a checkpoint segment: rebuild the segment's frames first.
  auto seg_last = last_of_.find(&m);
  if (seg_last != last_of_.end() && !segments_[seg_last->second].recomputed) {
    Segment& s = segments_[seg_last->second];
    if (host_ != nullptr && s.host_input.defined()) {
      // Its input back on the compute tier (unless prefetched), and the next
      // segment's in backward order on its way while this one recomputes.
      start_copy_back(s);
      ZE_CHECK(!forward_segments_.empty() && forward_segments_.back() == seg_last->second)
          << "checkpoint segments' backward out of forward order at " << m.name();
      if (forward_segments_.size() >= 2) {
        Segment& next = segments_[forward_segments_[forward_segments_.size() - 2]];
        if (next.host_input.defined()) start_copy_back(next);
      }
      backend_.wait_event(kComputeStream, s.copied_back);
    }
    if (partitioned() && !s.input.defined()) gather_input(s);
    recompute(s);
  }
  auto it = frames_.find(&m);
  ZE_CHECK(it != frames_.end() && !it->second.empty())
      << "backward of " << m.name() << " without a matching forward";
  if (profiler_) profiler_->enter(m, ProfilePhase::kBackward);
  if (hooks_) note(hooks_->pre_backward(m));
  current_.push_back(&it->second.back());
  calls_.push_back(&m);
  Tensor dx = m.backward(*this, dy);
  calls_.pop_back();
  current_.pop_back();
  // Re-find: nested calls may have rehashed the map.
  it = frames_.find(&m);
  it->second.pop_back();
  if (it->second.empty()) frames_.erase(it);
  if (hooks_) note(hooks_->post_backward(m));
  // Leaving a segment's backward (at its first module): its input is no longer needed.
  auto seg_first = first_of_.find(&m);
  if (seg_first != first_of_.end()) {
    Segment& s = segments_[seg_first->second];
    wait_copies(s);
    s.input = Tensor();
    s.host_input = Tensor();
    s.part = Tensor();
    s.recomputed = false;
    if (!forward_segments_.empty() && forward_segments_.back() == seg_first->second) forward_segments_.pop_back();
  }
  if (profiler_) profiler_->exit(m, ProfilePhase::kBackward);
  return dx;
}

Tensor Context::replay(const Module& m, const Tensor& dy) {
  ZE_CHECK(recording()) << m.name() << ": backward without its forward's tape";
  return current_.back()->tape.replay(*this, dy, m.name().empty() ? "the model" : m.name());
}

std::string Context::module_name() const {
  if (calls_.empty()) return "";
  return calls_.back()->name().empty() ? "the model" : calls_.back()->name();
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
  calls_.clear();
  for (Segment& s : segments_) {
    wait_copies(s);
    s.input = Tensor();
    s.host_input = Tensor();
    s.part = Tensor();
    s.recomputed = false;
  }
  forward_segments_.clear();
  no_save_depth_ = 0;
  recomputing_ = false;
  recompute_base_ = SIZE_MAX;
  status_ = absl::OkStatus();
}

}  // namespace zero
