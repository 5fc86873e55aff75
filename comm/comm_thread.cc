// The communication thread; see comm_thread.h.
#include "comm/comm_thread.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "core/strings.h"

namespace zero {

namespace {

// Two buffers, so the signal handler always reads a complete string.
char g_current[2][256];
std::atomic<int> g_current_index{-1};

void set_current(const std::string& what) {
  const int next = g_current_index.load() == 0 ? 1 : 0;
  std::snprintf(g_current[next], sizeof(g_current[next]), "%s", what.c_str());
  g_current_index.store(next);
}

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

const char* CommThread::current_operation() {
  const int i = g_current_index.load();
  return i < 0 ? "" : g_current[i];
}


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
    tasks_.push_back([work, state = state_, fn = std::move(fn), what = cat(what, " (collective #", seq, ")")] {
      set_current(what);
      state->begin(what);
      absl::Status s = fn();
      state->end();
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
