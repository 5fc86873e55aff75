// The communication threads and the table of operations in flight; see
// comm_thread.h.
#include "comm/comm_thread.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "core/strings.h"

namespace zero {

namespace {

// The operations in flight, one slot per communication thread or waiting
// thread. Two buffers per slot, written alternately, so the signal handler
// reads a complete string (index: the buffer holding the current one, -1
// when none runs).
constexpr int kOperationSlots = 64;
struct OperationEntry {
  std::atomic<bool> claimed{false};
  std::atomic<int> index{-1};
  int last_written = 1;  // the writer's own; the next write goes to the other buffer
  char text[2][256];
};
OperationEntry g_operations[kOperationSlots];

}  // namespace

OperationSlot::OperationSlot() : index_(-1) {
  for (int i = 0; i < kOperationSlots; ++i) {
    bool expected = false;
    if (g_operations[i].claimed.compare_exchange_strong(expected, true)) {
      index_ = i;
      return;
    }
  }
}

OperationSlot::~OperationSlot() {
  if (index_ < 0) return;
  clear();
  g_operations[index_].claimed.store(false);
}

void OperationSlot::set(const std::string& what) {
  if (index_ < 0) return;
  OperationEntry& e = g_operations[index_];
  const int next = 1 - e.last_written;
  std::snprintf(e.text[next], sizeof(e.text[next]), "%s", what.c_str());
  e.last_written = next;
  e.index.store(next);
}

void OperationSlot::clear() {
  if (index_ >= 0) g_operations[index_].index.store(-1);
}

const char* CommThread::current_operation() {
  for (const OperationEntry& e : g_operations) {
    const int i = e.index.load();
    if (i >= 0) return e.text[i];
  }
  return "";
}

namespace {

class ThreadWork final : public CommWork {
 public:
  ThreadWork(std::string what, int rank, double timeout_s, std::shared_ptr<CommThreadState> state)
      : what_(std::move(what)), rank_(rank), timeout_s_(timeout_s), state_(std::move(state)) {}
  absl::Status wait() override {
    std::unique_lock<std::mutex> lock(mu_);
    if (done_) return status_;
    // Once a wait has timed out, the thread is stuck in that operation and
    // nothing queued behind it will start: fail at once, naming it, rather
    // than one more timeout per operation (a frozen peer would otherwise
    // hold every rank for timeout x operations before the job ends).
    if (std::string stuck = state_->stuck(); !stuck.empty()) {
      lock.unlock();
      return comm_gave_up(absl::DeadlineExceededError(cat("rank ", rank_, ": ", what_, " cannot run: the communication "
                                                     "thread is still in ", stuck, ", which did not finish within ",
                                                     timeout_s_, " s (a peer rank is not responding)")));
    }
    const auto t0 = std::chrono::steady_clock::now();
    const bool finished = cv_.wait_for(lock, std::chrono::duration<double>(timeout_s_), [&] { return done_; });
    add_comm_wait_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (!finished) {
      state_->mark_stuck();
      lock.unlock();
      return comm_gave_up(absl::DeadlineExceededError(
          cat("rank ", rank_, ": ", what_, " did not finish within ", timeout_s_,
              " s: a peer rank is not responding (it died, hangs, or never reached this collective)")));
    }
    return status_;
  }
  bool done() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }
  void finish(absl::Status s) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      status_ = std::move(s);
      done_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::string what_;
  int rank_;
  double timeout_s_;
  std::shared_ptr<CommThreadState> state_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  absl::Status status_;
};

}  // namespace

CommThread::CommThread(int rank, double timeout_s) : rank_(rank), timeout_s_(timeout_s), thread_([this] { loop(); }) {}

CommThread::~CommThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CommThreadState::begin(const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  running_ = what;
}

void CommThreadState::end() {
  std::lock_guard<std::mutex> lock(mu_);
  running_.clear();
  stuck_ = false;
}

void CommThreadState::mark_stuck() {
  std::lock_guard<std::mutex> lock(mu_);
  stuck_ = !running_.empty();
}

std::string CommThreadState::stuck() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stuck_ ? running_ : std::string();
}

CommHandle CommThread::enqueue(std::string what, std::function<absl::Status()> fn) {
  auto work = std::make_shared<ThreadWork>(what, rank_, timeout_s_, state_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t seq = ++seq_;
    tasks_.push_back([this, work, state = state_, fn = std::move(fn), what = cat(what, " (collective #", seq, ")")] {
      slot_.set(what);
      state->begin(what);
      absl::Status s = fn();
      state->end();
      slot_.clear();  // a finished operation is not "in flight" in a later termination message
      if (!s.ok()) s = absl::Status(s.code(), cat(what, ": ", std::string(s.message())));
      work->finish(std::move(s));
    });
  }
  cv_.notify_all();
  return work;
}

void CommThread::loop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace zero
