// CPU backend; see cpu_backend.h.
#include "kernels/cpu/cpu_backend.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace zero {

namespace {

class CpuEvent final : public Event {
 public:
  bool query() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }
  void complete() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
  }
  void wait() const {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool done_ = false;
};

std::shared_ptr<CpuEvent> completed_event() {
  auto e = std::make_shared<CpuEvent>();
  e->complete();
  return e;
}

}  // namespace

// A worker thread draining a FIFO of tasks.
class CpuStream {
 public:
  CpuStream() : thread_([this] { loop(); }) {}
  ~CpuStream() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void enqueue(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(fn));
    }
    cv_.notify_all();
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
        if (tasks_.empty()) return;  // stop_ and drained
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::thread thread_;
};

CpuBackend::CpuBackend() : ops_(std::make_unique<cpu::CpuOps>(*this)) {}

CpuBackend::~CpuBackend() {
  streams_.clear();  // drain and join workers before the allocator goes away
  ops_.reset();
}

RawAllocator* CpuBackend::raw_allocator(Tier tier) {
  return tier == Tier::kHost ? &host_ : nullptr;
}

StreamId CpuBackend::create_stream() {
  streams_.push_back(std::make_unique<CpuStream>());
  return static_cast<StreamId>(streams_.size());
}

CpuStream& CpuBackend::stream(StreamId id) {
  ZE_CHECK(id >= 1 && id <= static_cast<StreamId>(streams_.size())) << "stream " << id;
  return *streams_[id - 1];
}

void CpuBackend::enqueue(StreamId id, std::function<void()> fn) {
  if (id == kComputeStream) {
    fn();
    return;
  }
  stream(id).enqueue(std::move(fn));
}

EventPtr CpuBackend::record_event(StreamId id) {
  if (id == kComputeStream) return completed_event();
  auto e = std::make_shared<CpuEvent>();
  stream(id).enqueue([e] { e->complete(); });
  return e;
}

void CpuBackend::wait_event(StreamId id, const EventPtr& event) {
  auto e = std::static_pointer_cast<CpuEvent>(event);
  enqueue(id, [e] { e->wait(); });
}

void CpuBackend::synchronize(const EventPtr& event) {
  std::static_pointer_cast<CpuEvent>(event)->wait();
}

void CpuBackend::synchronize_stream(StreamId id) {
  if (id == kComputeStream) return;
  synchronize(record_event(id));
}

void CpuBackend::copy_async(void* dst, const void* src, size_t bytes, StreamId id) {
  enqueue(id, [dst, src, bytes] { std::memcpy(dst, src, bytes); });
}

}  // namespace zero
