// Process-wide (= per-rank) accounting of every tracked byte, by category and
// tier. Two figures per tier:
//   allocated — bytes held by live tensors/buffers, per category (current, peak);
//   reserved  — bytes the allocators hold from the OS or the driver, which is
//               allocated plus what a caching allocator keeps for reuse. This is
//               the figure RSS (host) and cudaMemGetInfo (device) must agree with.
// Peaks are of the running sums, not sums of per-category peaks.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

namespace zero {

enum class MemCategory : uint8_t {
  kParameters,
  kGradients,
  kOptimizerState,
  kActivations,
  kCommBuffers,
  kSwapBuffers,
  kWorkspace,
};
inline constexpr int kNumMemCategories = 7;

// kHost: CPU memory (pageable or pinned); kDevice: accelerator memory;
// kNvme: bytes held in swap files. The CPU backend computes in kHost.
enum class Tier : uint8_t { kHost, kDevice, kNvme };
inline constexpr int kNumTiers = 3;

std::string_view mem_category_name(MemCategory c);  // "parameters", "gradients", ...
std::string_view mem_category_short_name(MemCategory c);  // "param", "grad", "optim", ...
std::string_view tier_name(Tier t);                  // "host", "device", "nvme"

struct MemCounter {
  int64_t current = 0;
  int64_t peak = 0;
};

struct MemorySnapshot {
  std::array<std::array<MemCounter, kNumMemCategories>, kNumTiers> by_category{};
  std::array<MemCounter, kNumTiers> allocated{};  // sum over categories
  std::array<MemCounter, kNumTiers> reserved{};

  const MemCounter& at(Tier t, MemCategory c) const {
    return by_category[static_cast<int>(t)][static_cast<int>(c)];
  }
};

class MemoryTracker {
 public:
  static MemoryTracker& global();

  // Signed deltas: positive on allocation, negative on free.
  void add_allocated(Tier tier, MemCategory cat, int64_t delta_bytes);
  void add_reserved(Tier tier, int64_t delta_bytes);

  MemorySnapshot snapshot() const;
  // Sets every peak to its current value (e.g. after initialisation, so a
  // benchmark sees the peak of the steady-state step).
  void reset_peaks();

 private:
  mutable std::mutex mu_;
  MemorySnapshot s_;
};

// Resident set size of this process in bytes, from /proc/self/statm.
int64_t process_rss_bytes();
// Peak resident set size of this process (VmHWM of /proc/self/status).
int64_t process_peak_rss_bytes();
// Memory the machine can still give without swapping (MemAvailable of
// /proc/meminfo), in bytes; -1 when unknown.
int64_t host_memory_available_bytes();

// "1.23 GiB"-style formatting shared by logs and tools.
std::string format_bytes(int64_t bytes);

}  // namespace zero
