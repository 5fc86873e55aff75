// CRC-32C (Castagnoli), the checksum of every checkpoint segment and file
// header: hardware-accelerated with SSE4.2's crc32 instruction when the CPU
// has it (chosen once at run time), a table otherwise. Incremental:
// crc32c(b, crc32c(a)) == crc32c(a ++ b).
#pragma once

#include <cstddef>
#include <cstdint>

namespace zero {

uint32_t crc32c(const void* data, size_t bytes, uint32_t crc = 0);

}  // namespace zero
