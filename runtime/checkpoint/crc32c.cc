// CRC-32C; see crc32c.h.
#include "runtime/checkpoint/crc32c.h"

#include <nmmintrin.h>

#include <array>
#include <cstring>

namespace zero {

namespace {

constexpr uint32_t kPoly = 0x82f63b78u;  // reflected Castagnoli polynomial

std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}

uint32_t crc_table(const unsigned char* p, size_t n, uint32_t crc) {
  static const std::array<uint32_t, 256> table = make_table();
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc;
}

__attribute__((target("sse4.2"))) uint32_t crc_hw(const unsigned char* p, size_t n, uint32_t crc) {
  uint64_t c = crc;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n-- > 0) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}

}  // namespace

uint32_t crc32c(const void* data, size_t bytes, uint32_t crc) {
  static const bool hw = __builtin_cpu_supports("sse4.2");
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  crc = hw ? crc_hw(p, bytes, crc) : crc_table(p, bytes, crc);
  return ~crc;
}

}  // namespace zero
