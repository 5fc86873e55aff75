// 2 MiB pages for I/O buffers; see huge_pages.h.
#include "offload/huge_pages.h"

#include <sys/mman.h>

#include <cerrno>

namespace zero {

namespace {

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1; older kernels answer EINVAL
#endif
constexpr uintptr_t kHugePageBytes = uintptr_t{2} << 20;

struct AlignedRange {
  uintptr_t begin, end;  // empty when end <= begin
};

AlignedRange aligned_part(uint8_t* data, size_t bytes) {
  return {(reinterpret_cast<uintptr_t>(data) + kHugePageBytes - 1) & ~(kHugePageBytes - 1),
          (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kHugePageBytes - 1)};
}

bool advise(const AlignedRange& r) {
  return r.end > r.begin && ::madvise(reinterpret_cast<void*>(r.begin), r.end - r.begin, MADV_HUGEPAGE) == 0;
}

}  // namespace

void advise_huge_pages(uint8_t* data, size_t bytes) { advise(aligned_part(data, bytes)); }

size_t collapse_to_huge_pages(uint8_t* data, size_t bytes) {
  const AlignedRange r = aligned_part(data, bytes);
  // MADV_HUGEPAGE first, so the pages stay huge if the range is faulted again.
  if (!advise(r)) return 0;
  size_t collapsed = 0;
  for (uintptr_t p = r.begin; p < r.end; p += kHugePageBytes) {
    if (::madvise(reinterpret_cast<void*>(p), kHugePageBytes, MADV_COLLAPSE) == 0) {
      collapsed += kHugePageBytes;
    } else if (errno == EINVAL || errno == EPERM) {
      break;  // not supported here: the other pages will not fare better
    }
  }
  return collapsed;
}

}  // namespace zero
