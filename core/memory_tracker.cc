// Memory accounting; see memory_tracker.h.
#include "core/memory_tracker.h"

#include <cstring>

#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_format.h"
#include "core/check.h"

namespace zero {

std::string_view mem_category_name(MemCategory c) {
  switch (c) {
    case MemCategory::kParameters: return "parameters";
    case MemCategory::kGradients: return "gradients";
    case MemCategory::kOptimizerState: return "optimizer_state";
    case MemCategory::kActivations: return "activations";
    case MemCategory::kCommBuffers: return "comm_buffers";
    case MemCategory::kSwapBuffers: return "swap_buffers";
    case MemCategory::kWorkspace: return "workspace";
  }
  return "?";
}

std::string_view mem_category_short_name(MemCategory c) {
  switch (c) {
    case MemCategory::kParameters: return "param";
    case MemCategory::kGradients: return "grad";
    case MemCategory::kOptimizerState: return "optim";
    case MemCategory::kActivations: return "act";
    case MemCategory::kCommBuffers: return "comm";
    case MemCategory::kSwapBuffers: return "swap";
    case MemCategory::kWorkspace: return "work";
  }
  return "?";
}

std::string_view tier_name(Tier t) {
  switch (t) {
    case Tier::kHost: return "host";
    case Tier::kDevice: return "device";
    case Tier::kNvme: return "nvme";
  }
  return "?";
}

MemoryTracker& MemoryTracker::global() {
  static MemoryTracker* tracker = new MemoryTracker();  // never destroyed: frees may run at exit
  return *tracker;
}

static void bump(MemCounter& c, int64_t delta) {
  c.current += delta;
  if (c.current > c.peak) c.peak = c.current;
}

void MemoryTracker::add_allocated(Tier tier, MemCategory cat, int64_t delta) {
  std::lock_guard<std::mutex> lock(mu_);
  const int t = static_cast<int>(tier);
  bump(s_.by_category[t][static_cast<int>(cat)], delta);
  bump(s_.allocated[t], delta);
  ZE_CHECK_GE(s_.by_category[t][static_cast<int>(cat)].current, 0) << mem_category_name(cat);
}

void MemoryTracker::add_reserved(Tier tier, int64_t delta) {
  std::lock_guard<std::mutex> lock(mu_);
  bump(s_.reserved[static_cast<int>(tier)], delta);
  ZE_CHECK_GE(s_.reserved[static_cast<int>(tier)].current, 0);
}

MemorySnapshot MemoryTracker::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return s_;
}

void MemoryTracker::reset_peaks() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& tier : s_.by_category)
    for (auto& c : tier) c.peak = c.current;
  for (auto& c : s_.allocated) c.peak = c.current;
  for (auto& c : s_.reserved) c.peak = c.current;
}

int64_t process_rss_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  long size_pages = 0, resident_pages = 0;
  const int n = std::fscanf(f, "%ld %ld", &size_pages, &resident_pages);
  std::fclose(f);
  if (n != 2) return -1;
  return static_cast<int64_t>(resident_pages) * sysconf(_SC_PAGESIZE);
}

namespace {

// The "<key>: <n> kB" line of a /proc file, in bytes; -1 when absent.
int64_t proc_kib_field(const char* path, const char* key) {
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return -1;
  char line[256];
  const size_t key_len = std::strlen(key);
  int64_t kib = -1;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    long v = 0;
    if (std::strncmp(line, key, key_len) == 0 && line[key_len] == ':' &&
        std::sscanf(line + key_len + 1, " %ld kB", &v) == 1) {
      kib = v;
      break;
    }
  }
  std::fclose(f);
  return kib < 0 ? -1 : kib * 1024;
}

}  // namespace

int64_t process_peak_rss_bytes() { return proc_kib_field("/proc/self/status", "VmHWM"); }

int64_t host_memory_available_bytes() { return proc_kib_field("/proc/meminfo", "MemAvailable"); }

std::string format_bytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  const double ab = b < 0 ? -b : b;
  if (ab >= 1024.0 * 1024 * 1024) return absl::StrFormat("%.2f GiB", b / (1024.0 * 1024 * 1024));
  if (ab >= 1024.0 * 1024) return absl::StrFormat("%.1f MiB", b / (1024.0 * 1024));
  if (ab >= 1024.0) return absl::StrFormat("%.1f KiB", b / 1024.0);
  return absl::StrFormat("%d B", bytes);
}

}  // namespace zero
