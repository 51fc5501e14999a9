// Floating-point elements between safetensors' dtypes without LibTorch, for
// `accelerate merge-weights --dtype`: to 16 bits by rounding to nearest, ties
// to even, as LibTorch's scalar conversions round (so a merged bf16 file is
// the bytes save_model writes for the model cast to bf16). NaN becomes
// LibTorch's scalar NaN (0x7FC0 in bf16, sign|0x7E00 in fp16).
#pragma once

#include <cstdint>
#include <cstring>

namespace accelerate::safetensors {

inline float float_from_bits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

inline uint32_t bits_of(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}

inline uint16_t bfloat16_bits(float value) {
  const uint32_t bits = bits_of(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;  // NaN
  uint32_t kept = bits >> 16;
  const uint32_t dropped = bits & 0xFFFFu;
  if (dropped > 0x8000u || (dropped == 0x8000u && (kept & 1u)))
    ++kept;  // may carry into inf: right
  return static_cast<uint16_t>(kept);
}

inline uint16_t half_bits(float value) {
  const uint32_t bits = bits_of(value);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t exponent = (bits >> 23) & 0xFFu;
  const uint32_t mantissa = bits & 0x7FFFFFu;
  if (exponent == 0xFF) return static_cast<uint16_t>(sign | 0x7C00u | (mantissa ? 0x200u : 0u));
  const int power = static_cast<int>(exponent) - 127;
  if (power > 15) return static_cast<uint16_t>(sign | 0x7C00u);  // beyond 65504's binade: inf
  uint32_t kept, dropped, halfway;
  if (power >= -14) {  // normal: keep 10 of the 23 mantissa bits
    kept = (static_cast<uint32_t>(power + 15) << 10) | (mantissa >> 13);
    dropped = mantissa & 0x1FFFu;
    halfway = 0x1000u;
  } else {
    // Subnormal: the 24-bit significand in units of 2^-24 (the smallest
    // subnormal); below half of that unit everything rounds to zero.
    if (power < -25) return sign;
    const int shift = -(power + 1);  // 14..24
    const uint32_t significand = mantissa | 0x800000u;
    kept = significand >> shift;
    dropped = significand & ((1u << shift) - 1u);
    halfway = 1u << (shift - 1);
  }
  if (dropped > halfway || (dropped == halfway && (kept & 1u))) ++kept;  // carries are right too
  return static_cast<uint16_t>(sign | kept);
}

inline float float_from_bfloat16(uint16_t bits) { return float_from_bits(uint32_t{bits} << 16); }

inline float float_from_half(uint16_t bits) {
  const uint32_t sign = uint32_t{bits & 0x8000u} << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0x1F) return float_from_bits(sign | 0x7F800000u | (mantissa << 13));
  if (exponent != 0) return float_from_bits(sign | ((exponent + 112) << 23) | (mantissa << 13));
  if (mantissa == 0) return float_from_bits(sign);
  // Subnormal: normalise into a float's exponent.
  int power = -14;
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    --power;
  }
  return float_from_bits(sign | (static_cast<uint32_t>(power + 127) << 23) |
                         ((mantissa & 0x3FFu) << 13));
}

}  // namespace accelerate::safetensors
