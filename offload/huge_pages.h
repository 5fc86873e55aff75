// 2 MiB pages for I/O buffers. A request's buffer reaches the device as one
// descriptor per physically contiguous run: in scattered 4 KiB pages a 1 MiB
// request is ~256 of them, which on a virtio disk without indirect
// descriptors lets the device hold one request at a time (bench/io_bench.cc);
// in 2 MiB pages it is a few. Both calls act on the 2 MiB-aligned part of the
// range, are best effort (THP off or "never", no MADV_COLLAPSE before Linux
// 6.1, fragmented memory: the pages stay as they are) and keep the contents.
#pragma once

#include <cstddef>
#include <cstdint>

namespace zero {

// MADV_HUGEPAGE: pages first touched after this are 2 MiB ones (cheap; call
// it before filling a new buffer).
void advise_huge_pages(uint8_t* data, size_t bytes);

// Also MADV_COLLAPSE, one 2 MiB page at a time: pages already touched are
// moved into 2 MiB pages (a copy, ~3 ms per 2 MiB, unless they are already).
// Returns the bytes that are now in 2 MiB pages.
size_t collapse_to_huge_pages(uint8_t* data, size_t bytes);

}  // namespace zero
