// Element types and scalar conversions. bf16 and fp16 are stored as raw 16-bit
// patterns (struct wrappers would hide them from memcpy-style kernels); the
// scalar helpers here are the reference the SIMD casts in kernels/ are tested
// against: fp32 -> bf16 rounds to nearest even, NaN stays NaN.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

#include "absl/status/statusor.h"

namespace zero {

enum class DType : uint8_t { kF32, kBF16, kF16, kI32 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kI32: return 4;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "fp32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "fp16";
    case DType::kI32: return "int32";
  }
  return "?";
}

constexpr bool dtype_is_float(DType t) { return t != DType::kI32; }

// Parses "fp32"/"float32", "bf16"/"bfloat16", "fp16"/"float16".
absl::StatusOr<DType> parse_float_dtype(std::string_view name);

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_fp16(float f) {
  _Float16 h = static_cast<_Float16>(f);  // IEEE round to nearest even (libgcc)
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
inline float fp16_to_float(uint16_t u) {
  _Float16 h;
  std::memcpy(&h, &u, 2);
  return static_cast<float>(h);
}

// Reads element i of a float buffer of dtype t as fp32 (slow path for tests,
// initialisation and small host-side work; kernels use vector casts).
inline float load_as_float(const void* p, DType t, size_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(p)[i];
    case DType::kBF16: return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::kF16: return fp16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::kI32: return static_cast<float>(static_cast<const int32_t*>(p)[i]);
  }
  return 0.f;
}
inline void store_from_float(void* p, DType t, size_t i, float v) {
  switch (t) {
    case DType::kF32: static_cast<float*>(p)[i] = v; break;
    case DType::kBF16: static_cast<uint16_t*>(p)[i] = float_to_bf16(v); break;
    case DType::kF16: static_cast<uint16_t*>(p)[i] = float_to_fp16(v); break;
    case DType::kI32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
  }
}

}  // namespace zero
