// SIGINT / SIGTERM handling; see signals.h.
#include "core/signals.h"

#include <semaphore.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

namespace zero {

namespace {

std::atomic<int> g_rank{0};
std::atomic<int> g_stop{0};
std::atomic<bool> g_graceful{false};
std::atomic<bool> g_installed{false};
std::atomic<const char* (*)()> g_probe{nullptr};
sem_t g_watchdog;

// Message building with write(2) only (snprintf is not async-signal-safe).
struct Line {
  char text[1024];
  size_t n = 0;
  Line& add(const char* s) {
    while (*s != '\0' && n < sizeof(text) - 1) text[n++] = *s++;
    return *this;
  }
  Line& add(long v) {
    char digits[24];
    int k = 0;
    const bool negative = v < 0;
    unsigned long u = negative ? 0UL - static_cast<unsigned long>(v) : static_cast<unsigned long>(v);
    do {
      digits[k++] = static_cast<char>('0' + u % 10);
      u /= 10;
    } while (u != 0);
    if (negative) add("-");
    while (k > 0 && n < sizeof(text) - 1) text[n++] = digits[--k];
    return *this;
  }
  void say() const {
    const ssize_t ignored = ::write(STDERR_FILENO, text, n);
    (void)ignored;
  }
};

// The collective in flight, if any (the probe reads fixed buffers and atomics).
const char* operation() {
  const auto probe = g_probe.load();
  const char* op = probe != nullptr ? probe() : "";
  return op[0] != '\0' ? op : "computation (no collective in flight)";
}

[[noreturn]] void exit_now(int sig, const char* why) {
  Line()
      .add("ZeroEngine rank ").add(static_cast<long>(g_rank.load())).add(": terminated by signal ")
      .add(static_cast<long>(sig)).add(why).add(" during ").add(operation())
      .add("; if another rank died, the launcher's message names it\n")
      .say();
  ::_exit(128 + sig);
}

void on_signal(int sig) {
  const int saved_errno = errno;
  int expected = 0;
  if (!g_graceful.load() || !g_stop.compare_exchange_strong(expected, sig)) exit_now(sig, "");
  Line()
      .add("ZeroEngine rank ").add(static_cast<long>(g_rank.load())).add(": signal ").add(static_cast<long>(sig))
      .add(" during ").add(operation())
      .add(": stopping at the end of this step (a second signal stops at once)\n")
      .say();
  sem_post(&g_watchdog);
  errno = saved_errno;
}

}  // namespace

void install_signal_handlers(int rank) {
  g_rank = rank;
  if (g_installed.exchange(true)) return;
  sem_init(&g_watchdog, 0, 0);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;  // a graceful stop goes on running: blocking calls resume
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

void enable_graceful_stop() {
  if (g_graceful.exchange(true)) return;
  const char* env = std::getenv("ZE_STOP_GRACE_S");
  const int grace_s = env != nullptr ? std::max(1, std::atoi(env)) : 30;
  // After a stop request, a step, a save or the teardown may take as long as
  // they take; only a collective that stays in flight for the whole grace
  // period (its peer is gone) ends the run from here.
  std::thread([grace_s] {
    while (sem_wait(&g_watchdog) != 0) {
    }
    std::string stuck;
    int seconds = 0;
    for (;;) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      const auto probe = g_probe.load();
      const std::string op = probe != nullptr ? probe() : "";
      seconds = !op.empty() && op == stuck ? seconds + 1 : 0;
      stuck = op;
      if (seconds >= grace_s) exit_now(g_stop.load(), " (a collective made no progress within ZE_STOP_GRACE_S)");
    }
  }).detach();
}

int stop_requested() { return g_stop.load(); }

void set_operation_probe(const char* (*probe)()) { g_probe = probe; }

void exit_on_fatal_error(const std::string& message) {
  std::fflush(stdout);
  const std::string line = "ZeroEngine rank " + std::to_string(g_rank.load()) + ": " + message + "\n";
  const ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
  ::_exit(1);
}

}  // namespace zero
