// The communication "stream" of the CPU communicators: one thread that runs
// collectives in the order they were issued, so they overlap the compute
// thread's work and every rank sees the same sequence. Each queued task is a
// CommWork whose wait() returns the task's status, or DEADLINE_EXCEEDED
// naming the collective when it has not finished within the timeout (a peer
// that died or hangs; the launcher usually ends the job first). After one
// such timeout, waits for work queued behind the stuck operation fail at
// once, naming it, so a rank stops within one timeout, not one per operation.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "comm/communicator.h"

namespace zero {

// What the thread is running, shared with the work it hands out: once a
// wait has timed out on the running operation the thread counts as stuck in
// it, and work queued behind it fails at once, until it finishes.
class CommThreadState {
 public:
  void begin(const std::string& what);
  void end();
  void mark_stuck();
  // The operation the thread is stuck in, or "".
  std::string stuck() const;

 private:
  mutable std::mutex mu_;
  std::string running_;
  bool stuck_ = false;
};

class CommThread {
 public:
  // timeout_s: how long wait() waits for one collective before failing.
  CommThread(int rank, double timeout_s);
  ~CommThread();  // drains the queue, then joins

  // Runs fn on the communication thread after everything queued before it.
  // `what` names the collective in errors ("all_reduce of 12.0 MiB fp32").
  CommHandle enqueue(std::string what, std::function<absl::Status()> fn);

  // The description of the collective running now, or "" (for the
  // termination message; async-signal-safe to read).
  static const char* current_operation();

 private:
  void loop();

  int rank_;
  double timeout_s_;
  std::shared_ptr<CommThreadState> state_ = std::make_shared<CommThreadState>();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  int64_t seq_ = 0;
  std::thread thread_;
};

}  // namespace zero
