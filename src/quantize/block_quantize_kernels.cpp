// Loops written so GCC's vectorizer takes them at -O3 (checked with
// -fopt-info-vec; bench/zero/quantize_bench.cpp measures them): no calls,
// no early exits, integer max for the absolute maximum, and rounding by the
// 1.5 * 2^23 trick instead of nearbyint, which baseline x86-64 (no SSE4.1)
// cannot vectorize.
#include "quantize/block_quantize_kernels.h"

#include <algorithm>
#include <cstring>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

namespace accelerate::quantize::kernels {
namespace {

// Adding then subtracting 1.5 * 2^23 rounds a float of magnitude below 2^22
// to an integer in the current rounding mode (to nearest, ties to even: what
// at::round and DeepSpeed's __float2int_rn do). No clamp is needed: with
// inv = fl(qmax / m) and |x| <= m, |x * inv| <= qmax * (1 + 2^-24)^2 <
// qmax + 0.5, so the result is within [-qmax, qmax] (the tests check it).
// (A clamp, a branch to GCC, would also stop the loop's vectorization.)
constexpr float kRoundingMagic = 12582912.0f;

inline std::int8_t quantized_value(float x, float inv) {
  const float rounded = (x * inv + kRoundingMagic) - kRoundingMagic;
  return static_cast<std::int8_t>(static_cast<std::int32_t>(rounded));
}

inline float bits_to_float(std::uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

inline std::uint32_t float_to_bits(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

// An int4 nibble (two's complement) as a signed value.
inline int high_nibble(std::uint8_t byte) { return static_cast<std::int8_t>(byte) >> 4; }
inline int low_nibble(std::uint8_t byte) {
  return static_cast<std::int8_t>(static_cast<std::uint8_t>(byte << 4)) >> 4;
}

// Elements per step of the int4 loops: one stack buffer of int8 values.
constexpr std::int64_t kInt4Chunk = 512;

}  // namespace

std::uint32_t abs_max_bits(const float* x, std::int64_t n) {
  std::uint32_t largest = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    largest = std::max(largest, float_to_bits(x[i]) & 0x7fffffffu);
  }
  return largest;
}

void bf16_to_float(const std::uint16_t* x, std::int64_t n, float* out) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = bits_to_float(std::uint32_t{x[i]} << 16);
}

void half_to_float(const std::uint16_t* x, std::int64_t n, float* out) {
  // c10::detail::fp16_ieee_to_fp32_value's arithmetic with its branch
  // between normal and subnormal halves written as a mask, which GCC
  // vectorizes (the test compares all 65536 halves with c10's conversion).
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint32_t w = std::uint32_t{x[i]} << 16;
    const std::uint32_t sign = w & 0x80000000u;
    const std::uint32_t two_w = w + w;
    // Normal (and inf/NaN): move the exponent, then rescale by 2^-112.
    const float normal = bits_to_float((two_w >> 4) + (0xe0u << 23)) * 0x1.0p-112f;
    // Subnormal: the mantissa as the low bits of 0.5's pattern, minus 0.5.
    const float subnormal = bits_to_float((two_w >> 17) | (126u << 23)) - 0.5f;
    const std::uint32_t is_subnormal = 0u - static_cast<std::uint32_t>(two_w < (1u << 27));
    out[i] = bits_to_float(sign | (float_to_bits(subnormal) & is_subnormal) |
                           (float_to_bits(normal) & ~is_subnormal));
  }
}

void quantize_int8(const float* x, std::int64_t n, float inv, std::int8_t* q) {
  for (std::int64_t i = 0; i < n; ++i) {
    q[i] = quantized_value(x[i], inv);
  }
}

void quantize_int4(const float* x, std::int64_t n, float inv, std::uint8_t* packed) {
  // Quantize a chunk into int8 first, then pack pairs: each loop alone is
  // one the vectorizer handles.
  std::int8_t values[kInt4Chunk];
  for (std::int64_t start = 0; start < n; start += kInt4Chunk) {
    const std::int64_t count = std::min(kInt4Chunk, n - start);
    const float* in = x + start;
    for (std::int64_t i = 0; i < count; ++i) {
      values[i] = quantized_value(in[i], inv);
    }
    if (count % 2 != 0) values[count] = 0;  // the zero low nibble after an odd last element
    std::uint8_t* out = packed + start / 2;
    const std::int64_t pairs = (count + 1) / 2;
    for (std::int64_t k = 0; k < pairs; ++k) {
      out[k] = static_cast<std::uint8_t>((static_cast<std::uint8_t>(values[2 * k]) << 4) |
                                         (static_cast<std::uint8_t>(values[2 * k + 1]) & 0x0f));
    }
  }
}

void dequantize_int8(const std::int8_t* q, std::int64_t n, float scale, float* out) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(q[i]) * scale;
}

void accumulate_int8(const std::int8_t* q, std::int64_t n, float scale, float* acc) {
  for (std::int64_t i = 0; i < n; ++i) acc[i] += static_cast<float>(q[i]) * scale;
}

namespace {
// Unpacks up to kInt4Chunk elements starting at element `start` (even).
std::int64_t unpack_int4_chunk(const std::uint8_t* packed, std::int64_t n, std::int64_t start,
                               std::int8_t* values) {
  const std::int64_t count = std::min(kInt4Chunk, n - start);
  const std::uint8_t* in = packed + start / 2;
  const std::int64_t pairs = (count + 1) / 2;
  for (std::int64_t k = 0; k < pairs; ++k) {
    values[2 * k] = static_cast<std::int8_t>(high_nibble(in[k]));
    values[2 * k + 1] = static_cast<std::int8_t>(low_nibble(in[k]));
  }
  return count;
}
}  // namespace

void dequantize_int4(const std::uint8_t* packed, std::int64_t n, float scale, float* out) {
  std::int8_t values[kInt4Chunk];
  for (std::int64_t start = 0; start < n; start += kInt4Chunk) {
    const std::int64_t count = unpack_int4_chunk(packed, n, start, values);
    dequantize_int8(values, count, scale, out + start);
  }
}

void accumulate_int4(const std::uint8_t* packed, std::int64_t n, float scale, float* acc) {
  std::int8_t values[kInt4Chunk];
  for (std::int64_t start = 0; start < n; start += kInt4Chunk) {
    const std::int64_t count = unpack_int4_chunk(packed, n, start, values);
    accumulate_int8(values, count, scale, acc + start);
  }
}

void float_to_bf16(const float* x, std::int64_t n, std::uint16_t* out) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = c10::detail::round_to_nearest_even(x[i]);
}

void float_to_half(const float* x, std::int64_t n, std::uint16_t* out) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = c10::detail::fp16_ieee_from_fp32_value(x[i]);
}

}  // namespace accelerate::quantize::kernels
