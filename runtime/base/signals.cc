// SIGINT / SIGTERM handling; see signals.h.
#include "runtime/base/signals.h"

#include <semaphore.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace zero {

namespace {

constexpr int kSlots = 32;
constexpr size_t kPathBytes = 4096;
char g_paths[kSlots][kPathBytes];
std::atomic<bool> g_used[kSlots];

std::atomic<int> g_rank{0};
std::atomic<int> g_stop{0};
std::atomic<bool> g_graceful{false};
std::atomic<bool> g_installed{false};
std::atomic<const char* (*)()> g_probe{nullptr};
sem_t g_watchdog;

void unlink_registered() {
  for (int i = 0; i < kSlots; ++i)
    if (g_used[i].load(std::memory_order_acquire)) ::unlink(g_paths[i]);
}

void say(const char* text, int n) {
  if (n > 0) {
    const ssize_t ignored = ::write(STDERR_FILENO, text, static_cast<size_t>(std::min<int>(n, 1023)));
    (void)ignored;
  }
}

const char* operation() {
  const auto probe = g_probe.load();
  const char* op = probe != nullptr ? probe() : "";
  return op[0] != '\0' ? op : "computation (no collective in flight)";
}

[[noreturn]] void exit_now(int sig, const char* why) {
  unlink_registered();
  char msg[1024];
  say(msg, std::snprintf(msg, sizeof(msg),
                         "ZeroEngine rank %d: terminated by signal %d%s during %s; swap files removed; if another "
                         "rank died, the launcher's message names it\n",
                         g_rank.load(), sig, why, operation()));
  ::_exit(128 + sig);
}

void on_signal(int sig) {
  unlink_registered();
  int expected = 0;
  if (!g_graceful.load() || !g_stop.compare_exchange_strong(expected, sig)) exit_now(sig, "");
  char msg[1024];
  say(msg, std::snprintf(msg, sizeof(msg),
                         "ZeroEngine rank %d: signal %d during %s: stopping at the end of this step (a second signal "
                         "stops at once)\n",
                         g_rank.load(), sig, operation()));
  sem_post(&g_watchdog);
}

}  // namespace

void install_signal_handlers(int rank) {
  g_rank = rank;
  if (g_installed.exchange(true)) return;
  sem_init(&g_watchdog, 0, 0);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

void enable_graceful_stop() {
  if (g_graceful.exchange(true)) return;
  const char* env = std::getenv("ZE_STOP_GRACE_S");
  const int grace_s = env != nullptr ? std::max(1, std::atoi(env)) : 30;
  std::thread([grace_s] {
    while (sem_wait(&g_watchdog) != 0) {
    }
    std::this_thread::sleep_for(std::chrono::seconds(grace_s));
    exit_now(g_stop.load(), " (no step boundary within ZE_STOP_GRACE_S)");
  }).detach();
}

int stop_requested() { return g_stop.load(); }

void register_cleanup_file(const std::string& path) {
  if (path.size() >= kPathBytes) return;
  for (int i = 0; i < kSlots; ++i) {
    if (g_used[i].load()) continue;
    std::memcpy(g_paths[i], path.c_str(), path.size() + 1);
    g_used[i].store(true, std::memory_order_release);
    return;
  }
}

void unregister_cleanup_file(const std::string& path) {
  for (int i = 0; i < kSlots; ++i) {
    if (g_used[i].load() && path == g_paths[i]) g_used[i].store(false, std::memory_order_release);
  }
}

void set_operation_probe(const char* (*probe)()) { g_probe = probe; }

}  // namespace zero
