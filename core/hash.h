// Counter-based hashing for deterministic pseudo-randomness (parameter
// initialisation, data sampling): splitmix64 (Steele, Lea, Flood 2014) turns
// any 64-bit counter into a well-mixed 64-bit value, so a random draw is a
// pure function of (seed, index) and never depends on call order or threads.
#pragma once

#include <cstdint>

namespace zero {

constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace zero
