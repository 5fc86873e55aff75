// The communication "stream" of the CPU communicators: one thread per
// communicator (the world and every group split from it) that runs that
// communicator's collectives in the order they were issued, so they overlap
// the compute thread's work and every rank sees the same sequence on each
// group. Why one thread per group rather than one for the process: MPI
// requires a communicator's collectives in the same order on every rank, but
// nothing orders two groups' collectives against each other, and a single
// FIFO would (a tensor-parallel all-reduce queued behind a data-parallel
// reduce-scatter waits for it, and two rank pairs that issue collectives on
// two groups in opposite orders deadlock). Point-to-point transfers do not
// use these threads at all (MpiCommunicator posts them non-blocking).
//
// Each queued task is a CommWork whose wait() returns the task's status, or
// DEADLINE_EXCEEDED naming the collective when it has not finished within
// the timeout (a peer that died or hangs; the launcher usually ends the job
// first). After one such timeout, waits for work queued behind the stuck
// operation fail at once, naming it, so a rank stops within one timeout, not
// one per operation.
//
// What runs now, for the termination message: every thread that runs or
// waits on an operation holds an OperationSlot (a fixed slot of a static
// table) naming it while it runs, cleared when it ends;
// CommThread::current_operation() reads the table without locks or
// allocation (async-signal-safe) and reports one operation in flight, or "".
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

// One entry of the process's table of operations in flight: claimed for the
// lifetime of this object (a communication thread, or one wait on a
// point-to-point transfer), set while an operation runs and cleared when it
// ends. When all slots are taken (more than 64 at once) it records nothing.
class OperationSlot {
 public:
  OperationSlot();
  ~OperationSlot();
  OperationSlot(const OperationSlot&) = delete;
  OperationSlot& operator=(const OperationSlot&) = delete;
  void set(const std::string& what);  // truncated to 255 bytes
  void clear();

 private:
  int index_;  // -1: the table was full
};

class CommThread {
 public:
  // timeout_s: how long wait() waits for one collective before failing.
  CommThread(int rank, double timeout_s);
  ~CommThread();  // drains the queue, then joins

  // Runs fn on the communication thread after everything queued before it.
  // `what` names the collective in errors ("all_reduce of 12.0 MiB fp32").
  CommHandle enqueue(std::string what, std::function<absl::Status()> fn);

  // The description of one operation running now on any thread (a
  // collective, or a point-to-point transfer being waited on), or "" when
  // none is (for the termination message; async-signal-safe).
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
  OperationSlot slot_;  // names the collective running on thread_
  std::thread thread_;  // last: it starts running loop() once the members above exist
};

}  // namespace zero
