// Inline float math for the library's own CPU kernels (gelu_kernels.cpp,
// cross_entropy_kernels.cpp): written so that GCC vectorizes the loops that
// use it (no libm calls, no branches), in a file compiled at -O3 with one
// copy per x86 instruction set (common/kernel_dispatch.h).
#pragma once

#include <cstdint>
#include <cstring>

#define ACCELERATE_ALWAYS_INLINE inline __attribute__((always_inline))

namespace accelerate {
namespace detail {
namespace vector_math {

ACCELERATE_ALWAYS_INLINE float bits_to_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

ACCELERATE_ALWAYS_INLINE uint32_t float_to_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

// exp(z) for z <= 0 without libm, so that the loops vectorize: z = n ln2 + r
// with |r| <= ln2/2, exp(r) by its degree-6 Taylor polynomial (relative
// error ~1.2e-7, one float ulp), 2^n put into the exponent bits. Below -87
// it is 0: the rest is subnormal, and 1 - tanh^2 must vanish there rather
// than be scaled back up by x^3 in the derivative.
ACCELERATE_ALWAYS_INLINE float fast_exp_nonpositive(float z) {
  const bool underflows = z < -87.0f;
  z = underflows ? -87.0f : (z > 0.0f ? 0.0f : z);
  // Adding 1.5 * 2^23 rounds z / ln2 to an integer held in the low mantissa bits.
  constexpr float kShifter = 12582912.0f;
  const float shifted = z * 1.4426950408889634f + kShifter;
  const float n = shifted - kShifter;
  const int32_t n_int = static_cast<int32_t>(float_to_bits(shifted) - float_to_bits(kShifter));
  const float r = (z - n * 0.693145751953125f) - n * 1.428606765330187e-06f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float value = p * bits_to_float(static_cast<uint32_t>(n_int + 127) << 23);
  return underflows ? 0.0f : value;
}

ACCELERATE_ALWAYS_INLINE float load(float v) { return v; }
ACCELERATE_ALWAYS_INLINE float load(uint16_t v) { return bits_to_float(uint32_t{v} << 16); }

ACCELERATE_ALWAYS_INLINE void store(float v, float* out) { *out = v; }
// Round to nearest even, as c10::BFloat16 does; NaN becomes the quiet NaN.
ACCELERATE_ALWAYS_INLINE void store(float v, uint16_t* out) {
  const uint32_t bits = float_to_bits(v);
  const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  *out = static_cast<uint16_t>(v != v ? 0x7FC0u : rounded);
}

}  // namespace vector_math
}  // namespace detail
}  // namespace accelerate
