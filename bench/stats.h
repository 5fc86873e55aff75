// Small statistics the benchmarks share: the median of a sample (the figure
// quoted where a host is noisy) and the process's minor page faults so far
// (memory touched for the first time, read before and after a step).
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <vector>

namespace zero::bench {

// The median of v (0 when empty); the mean of the middle two for even sizes.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Minor page faults this process has taken.
inline double minor_page_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_minflt);
}

}  // namespace zero::bench
