// The communication thread's timeouts: an operation that does not finish
// (a frozen peer) fails its wait after the timeout, naming it; the work
// queued behind it then fails at once, naming the stuck operation, instead
// of one more timeout each; once the stuck operation finishes, everything
// behind it runs and completes normally. A timeout handler, where one is
// installed, is called by each wait that gives up, while the operation runs.
// Waits add the time they blocked to the process's communication wait. The
// operation in flight (the termination message's) is named while it runs on
// any thread and cleared when it ends.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/comm_thread.h"

namespace zero {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// comm_wait_seconds(): a wait on an operation that takes 50 ms adds the time
// the caller was blocked; a wait on finished work adds nothing.
TEST(CommThreadTest, WaitsAddTheTimeBlockedToTheProcessCommWait) {
  CommThread thread(/*rank=*/0, /*timeout_s=*/10);
  const double before = comm_wait_seconds();
  CommHandle slow = thread.enqueue("all_reduce of 4 B (slow)", [] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return absl::OkStatus();
  });
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(slow->wait().ok());
  const double blocked = seconds_since(t0);
  const double added = comm_wait_seconds() - before;
  EXPECT_GE(added, 0.03);
  EXPECT_LE(added, blocked + 1e-6);
  ASSERT_TRUE(slow->wait().ok());  // done: no blocking, nothing added
  EXPECT_EQ(comm_wait_seconds() - before, added);
}

TEST(CommThreadTest, AfterOneTimeoutTheWorkBehindTheStuckOperationFailsAtOnce) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  CommThread thread(/*rank=*/3, /*timeout_s=*/0.2);
  CommHandle stuck = thread.enqueue("all_gather of 8 B (the frozen one)", [&] {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return release; });
    return absl::OkStatus();
  });
  CommHandle behind = thread.enqueue("reduce_scatter of 16 B", [] { return absl::OkStatus(); });
  CommHandle further = thread.enqueue("all_reduce of 4 B", [] { return absl::OkStatus(); });

  auto t0 = std::chrono::steady_clock::now();
  const absl::Status first = stuck->wait();
  EXPECT_GE(seconds_since(t0), 0.2);
  EXPECT_EQ(first.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(first.message().find("rank 3: all_gather of 8 B (the frozen one) did not finish within 0.2 s"),
            std::string_view::npos)
      << first;

  // The message is the fast path's: these waits did not run timers of their own.
  for (const CommHandle& h : {behind, further}) {
    const absl::Status s = h->wait();
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_NE(s.message().find("the communication thread is still in all_gather of 8 B (the frozen one) (collective #1)"),
              std::string_view::npos)
        << s;
  }

  // The peer wakes up: the stuck operation finishes, and so does the rest.
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  t0 = std::chrono::steady_clock::now();
  while (!further->done() && seconds_since(t0) < 10) std::this_thread::yield();
  EXPECT_TRUE(stuck->wait().ok());
  EXPECT_TRUE(behind->wait().ok());
  EXPECT_TRUE(further->wait().ok());
  // No longer stuck: new work waits normally.
  EXPECT_TRUE(thread.enqueue("barrier", [] { return absl::OkStatus(); })->wait().ok());
}

TEST(CommThreadTest, TheCurrentOperationIsNamedWhileItRunsAndClearedAfter) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  EXPECT_STREQ(CommThread::current_operation(), "");
  CommThread a(/*rank=*/0, /*timeout_s=*/10), b(/*rank=*/0, /*timeout_s=*/10);
  CommHandle running = a.enqueue("all_reduce of 4 B (held)", [&] {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return release; });
    return absl::OkStatus();
  });
  ASSERT_TRUE(b.enqueue("broadcast of 8 B", [] { return absl::OkStatus(); })->wait().ok());
  const auto t0 = std::chrono::steady_clock::now();
  while (std::string(CommThread::current_operation()).empty() && seconds_since(t0) < 10) std::this_thread::yield();
  // b's finished broadcast is not reported; a's running all-reduce is.
  EXPECT_STREQ(CommThread::current_operation(), "all_reduce of 4 B (held) (collective #1)");
  {
    OperationSlot waiting;
    waiting.set("receive of 4 B from rank 1");
    {
      std::lock_guard<std::mutex> lock(mu);
      release = true;
    }
    cv.notify_all();
    ASSERT_TRUE(running->wait().ok());
    EXPECT_STREQ(CommThread::current_operation(), "receive of 4 B from rank 1");
  }
  EXPECT_STREQ(CommThread::current_operation(), "") << "a finished operation stays named (stale after SIGTERM)";
}

// A program that ends on a timeout (zero-train) installs a handler: each
// wait that gives up on an operation still in flight calls it, with the
// wait's error, before returning, while the operation is still running (so
// the program can end the process before anything it uses is freed).
std::vector<std::string> g_handled;
std::atomic<bool> g_still_running{false};

TEST(CommThreadTest, AWaitThatGivesUpCallsTheTimeoutHandlerWhileTheOperationRuns) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  CommThread thread(/*rank=*/1, /*timeout_s=*/0.2);
  set_comm_timeout_handler([](const absl::Status& s) {
    g_handled.push_back(std::string(s.message()));
    EXPECT_TRUE(g_still_running.load()) << "the handler ran after the operation finished";
  });
  g_still_running = true;
  CommHandle stuck = thread.enqueue("all_gather of 8 B", [&] {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return release; });
    g_still_running = false;
    return absl::OkStatus();
  });
  CommHandle behind = thread.enqueue("reduce_scatter of 16 B", [] { return absl::OkStatus(); });
  const absl::Status first = stuck->wait();  // the handler returns here: the error comes back as before
  EXPECT_EQ(first.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(behind->wait().code(), absl::StatusCode::kDeadlineExceeded);
  ASSERT_EQ(g_handled.size(), 2u);
  EXPECT_EQ(g_handled[0], std::string(first.message()));
  EXPECT_NE(g_handled[0].find("rank 1: all_gather of 8 B did not finish within 0.2 s"), std::string::npos);
  EXPECT_NE(g_handled[1].find("reduce_scatter of 16 B cannot run: the communication thread is still in all_gather"),
            std::string::npos);
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  const auto t0 = std::chrono::steady_clock::now();
  while (!behind->done() && seconds_since(t0) < 10) std::this_thread::yield();
  // Waits that succeed never call it.
  EXPECT_TRUE(stuck->wait().ok());
  EXPECT_TRUE(thread.enqueue("barrier", [] { return absl::OkStatus(); })->wait().ok());
  EXPECT_EQ(g_handled.size(), 2u);
  set_comm_timeout_handler(nullptr);
}

}  // namespace
}  // namespace zero
