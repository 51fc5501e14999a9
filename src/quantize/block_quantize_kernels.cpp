// Loops written so GCC's vectorizer takes them at -O3 (checked with
// -fopt-info-vec; bench/zero/quantize_bench.cpp measures them): no calls,
// no branches, integer max for the absolute maximum, and rounding by the
// 1.5 * 2^23 trick. bf16 and fp16 are read as bits and widened in the
// register, so no converted copy of a block is written.
#include "quantize/block_quantize_kernels.h"

#include <algorithm>
#include <cstring>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

// x86-64 with GCC (or Clang >= 14): each exported loop is compiled for
// AVX-512, AVX2 and the baseline, and the loader picks one (an ifunc).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__INTEL_COMPILER) && \
    (!defined(__clang__) || __clang_major__ >= 14)
#define ACCELERATE_QUANTIZE_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define ACCELERATE_QUANTIZE_CLONES
#endif
#define ACCELERATE_QUANTIZE_INLINE __attribute__((always_inline)) inline

namespace accelerate::quantize::kernels {
namespace {

ACCELERATE_QUANTIZE_INLINE float bits_to_float(std::uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

ACCELERATE_QUANTIZE_INLINE std::uint32_t float_to_bits(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

// The three input types, widened to fp32 exactly.
// Each also reads two neighbours as one integer word (`pair`: element 2k in
// the low half on a little-endian machine), which keeps the loops over pairs
// free of the shuffles that splitting even and odd elements costs.
struct Fp32 {
  using type = float;
  using pair = std::uint64_t;
  static ACCELERATE_QUANTIZE_INLINE float load(float x) { return x; }
  static ACCELERATE_QUANTIZE_INLINE float first(pair w) {
    return bits_to_float(static_cast<std::uint32_t>(w));
  }
  static ACCELERATE_QUANTIZE_INLINE float second(pair w) {
    return bits_to_float(static_cast<std::uint32_t>(w >> 32));
  }
};
struct Bf16 {
  using type = std::uint16_t;
  using pair = std::uint32_t;
  static ACCELERATE_QUANTIZE_INLINE float load(std::uint16_t x) {
    return bits_to_float(std::uint32_t{x} << 16);
  }
  static ACCELERATE_QUANTIZE_INLINE float first(pair w) { return bits_to_float(w << 16); }
  static ACCELERATE_QUANTIZE_INLINE float second(pair w) { return bits_to_float(w & 0xffff0000u); }
};
struct Fp16 {
  using type = std::uint16_t;
  // c10::detail::fp16_ieee_to_fp32_value's arithmetic, with its branch
  // between normal and subnormal halves written as a mask (the test compares
  // all 65536 halves with c10's conversion).
  static ACCELERATE_QUANTIZE_INLINE float load(std::uint16_t x) {
    const std::uint32_t w = std::uint32_t{x} << 16;
    const std::uint32_t sign = w & 0x80000000u;
    const std::uint32_t two_w = w + w;
    // Normal (and inf / NaN): move the exponent, then rescale by 2^-112.
    const float normal = bits_to_float((two_w >> 4) + (0xe0u << 23)) * 0x1.0p-112f;
    // Subnormal: the mantissa as the low bits of 0.5's pattern, minus 0.5.
    const float subnormal = bits_to_float((two_w >> 17) | (126u << 23)) - 0.5f;
    const std::uint32_t is_subnormal = 0u - static_cast<std::uint32_t>(two_w < (1u << 27));
    return bits_to_float(sign | (float_to_bits(subnormal) & is_subnormal) |
                         (float_to_bits(normal) & ~is_subnormal));
  }
  using pair = std::uint32_t;
  static ACCELERATE_QUANTIZE_INLINE float first(pair w) {
    return load(static_cast<std::uint16_t>(w));
  }
  static ACCELERATE_QUANTIZE_INLINE float second(pair w) {
    return load(static_cast<std::uint16_t>(w >> 16));
  }
};

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
constexpr bool kLittleEndian = true;
#else
constexpr bool kLittleEndian = false;
#endif

template <class In>
ACCELERATE_QUANTIZE_INLINE typename In::pair load_pair(const typename In::type* x) {
  typename In::pair w;
  std::memcpy(&w, x, sizeof w);
  return w;
}

// Adding 1.5 * 2^23 to a float of magnitude below 2^22 rounds it to an
// integer k in the current rounding mode (to nearest, ties to even: what
// at::round and DeepSpeed's __float2int_rn do), and as the sum stays in
// [2^23, 2^24), where floats are the integers, its bit pattern is M's plus
// k: its low byte is k as an int8. That is one add and a truncation per
// element, no float-to-int conversion (nearbyint would also need SSE4.1 to
// vectorize). No clamp is needed: with inv = fl(qmax / m) and |x| <= m,
// |x * inv| <= qmax * (1 + 2^-24)^2 < qmax + 0.5, so k is within
// [-qmax, qmax] (the tests check it).
constexpr float kRoundingMagic = 12582912.0f;  // 1.5 * 2^23, bits 0x4b400000

ACCELERATE_QUANTIZE_INLINE std::int8_t quantized_value(float x, float inv) {
  return static_cast<std::int8_t>(float_to_bits(x * inv + kRoundingMagic) & 0xffu);
}

template <class In>
ACCELERATE_QUANTIZE_INLINE void quantize_int8_loop(const typename In::type* x, std::int64_t n,
                                                   float inv, std::int8_t* q) {
  for (std::int64_t i = 0; i < n; ++i) q[i] = quantized_value(In::load(x[i]), inv);
}

// 16-bit inputs a pair at a time: two int8 results written as one uint16.
template <class In>
ACCELERATE_QUANTIZE_INLINE void quantize_int8_pairs(const typename In::type* x, std::int64_t n,
                                                    float inv, std::int8_t* q) {
  if constexpr (!kLittleEndian) {
    quantize_int8_loop<In>(x, n, inv, q);
  } else {
    const std::int64_t pairs = n / 2;
    for (std::int64_t k = 0; k < pairs; ++k) {
      const typename In::pair w = load_pair<In>(x + 2 * k);
      const auto two = static_cast<std::uint16_t>(
          static_cast<std::uint8_t>(quantized_value(In::first(w), inv)) |
          (static_cast<std::uint8_t>(quantized_value(In::second(w), inv)) << 8));
      std::memcpy(q + 2 * k, &two, sizeof two);
    }
    if (n % 2 != 0) q[n - 1] = quantized_value(In::load(x[n - 1]), inv);
  }
}

// int4: byte k holds element 2k in its high nibble and 2k + 1 in its low
// one; an odd last element gets a zero low nibble.
ACCELERATE_QUANTIZE_INLINE std::uint8_t int4_byte(std::int8_t high, std::int8_t low) {
  return static_cast<std::uint8_t>((static_cast<std::uint8_t>(high) << 4) |
                                   (static_cast<std::uint8_t>(low) & 0x0f));
}

template <class In>
ACCELERATE_QUANTIZE_INLINE void quantize_int4_loop(const typename In::type* x, std::int64_t n,
                                                   float inv, std::uint8_t* packed) {
  const std::int64_t pairs = n / 2;
  if constexpr (kLittleEndian) {
    for (std::int64_t k = 0; k < pairs; ++k) {
      const typename In::pair w = load_pair<In>(x + 2 * k);
      packed[k] =
          int4_byte(quantized_value(In::first(w), inv), quantized_value(In::second(w), inv));
    }
  } else {
    for (std::int64_t k = 0; k < pairs; ++k) {
      packed[k] = int4_byte(quantized_value(In::load(x[2 * k]), inv),
                            quantized_value(In::load(x[2 * k + 1]), inv));
    }
  }
  if (n % 2 != 0) packed[pairs] = int4_byte(quantized_value(In::load(x[n - 1]), inv), 0);
}

ACCELERATE_QUANTIZE_INLINE void dequantize_int8_loop(const std::int8_t* q, std::int64_t n,
                                                     float scale, float* out) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(q[i]) * scale;
}

ACCELERATE_QUANTIZE_INLINE void accumulate_int8_loop(const std::int8_t* q, std::int64_t n,
                                                     float scale, float* acc) {
  for (std::int64_t i = 0; i < n; ++i) acc[i] += static_cast<float>(q[i]) * scale;
}

// Elements per step of the int4 dequantizing loops: unpacked into an int8
// stack buffer first, then scaled (two loops the vectorizer handles).
constexpr std::int64_t kInt4Chunk = 512;

// Unpacks up to kInt4Chunk elements starting at element `start` (even);
// a nibble is a two's complement value.
ACCELERATE_QUANTIZE_INLINE std::int64_t unpack_int4_chunk(const std::uint8_t* packed,
                                                          std::int64_t n, std::int64_t start,
                                                          std::int8_t* values) {
  const std::int64_t count = std::min(kInt4Chunk, n - start);
  const std::uint8_t* in = packed + start / 2;
  const std::int64_t pairs = (count + 1) / 2;
  for (std::int64_t k = 0; k < pairs; ++k) {
    values[2 * k] = static_cast<std::int8_t>(static_cast<std::int8_t>(in[k]) >> 4);
    values[2 * k + 1] = static_cast<std::int8_t>(
        static_cast<std::int8_t>(static_cast<std::uint8_t>(in[k] << 4)) >> 4);
  }
  return count;
}

}  // namespace

ACCELERATE_QUANTIZE_CLONES std::uint32_t abs_max_bits(const float* x, std::int64_t n) {
  std::uint32_t largest = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    largest = std::max(largest, float_to_bits(x[i]) & 0x7fffffffu);
  }
  return largest;
}

ACCELERATE_QUANTIZE_CLONES std::uint16_t abs_max_bits16(const std::uint16_t* x, std::int64_t n) {
  // Signed 16-bit max (SSE2 has it) is right: the patterns are <= 0x7fff.
  std::int16_t largest = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    largest = std::max(largest, static_cast<std::int16_t>(x[i] & 0x7fff));
  }
  return static_cast<std::uint16_t>(largest);
}

ACCELERATE_QUANTIZE_CLONES void quantize_int8(const float* x, std::int64_t n, float inv,
                                              std::int8_t* q) {
  quantize_int8_loop<Fp32>(x, n, inv, q);
}
ACCELERATE_QUANTIZE_CLONES void quantize_int8_bf16(const std::uint16_t* x, std::int64_t n,
                                                   float inv, std::int8_t* q) {
  quantize_int8_pairs<Bf16>(x, n, inv, q);
}
ACCELERATE_QUANTIZE_CLONES void quantize_int8_fp16(const std::uint16_t* x, std::int64_t n,
                                                   float inv, std::int8_t* q) {
  quantize_int8_pairs<Fp16>(x, n, inv, q);
}

ACCELERATE_QUANTIZE_CLONES void quantize_int4(const float* x, std::int64_t n, float inv,
                                              std::uint8_t* packed) {
  quantize_int4_loop<Fp32>(x, n, inv, packed);
}
ACCELERATE_QUANTIZE_CLONES void quantize_int4_bf16(const std::uint16_t* x, std::int64_t n,
                                                   float inv, std::uint8_t* packed) {
  quantize_int4_loop<Bf16>(x, n, inv, packed);
}
ACCELERATE_QUANTIZE_CLONES void quantize_int4_fp16(const std::uint16_t* x, std::int64_t n,
                                                   float inv, std::uint8_t* packed) {
  quantize_int4_loop<Fp16>(x, n, inv, packed);
}

ACCELERATE_QUANTIZE_CLONES void dequantize_int8(const std::int8_t* q, std::int64_t n, float scale,
                                                float* out) {
  dequantize_int8_loop(q, n, scale, out);
}

ACCELERATE_QUANTIZE_CLONES void accumulate_int8(const std::int8_t* q, std::int64_t n, float scale,
                                                float* acc) {
  accumulate_int8_loop(q, n, scale, acc);
}

ACCELERATE_QUANTIZE_CLONES void dequantize_int4(const std::uint8_t* packed, std::int64_t n,
                                                float scale, float* out) {
  std::int8_t values[kInt4Chunk];
  for (std::int64_t start = 0; start < n; start += kInt4Chunk) {
    const std::int64_t count = unpack_int4_chunk(packed, n, start, values);
    dequantize_int8_loop(values, count, scale, out + start);
  }
}

ACCELERATE_QUANTIZE_CLONES void accumulate_int4(const std::uint8_t* packed, std::int64_t n,
                                                float scale, float* acc) {
  std::int8_t values[kInt4Chunk];
  for (std::int64_t start = 0; start < n; start += kInt4Chunk) {
    const std::int64_t count = unpack_int4_chunk(packed, n, start, values);
    accumulate_int8_loop(values, count, scale, acc + start);
  }
}

ACCELERATE_QUANTIZE_CLONES void half_to_float(const std::uint16_t* x, std::int64_t n, float* out) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = Fp16::load(x[i]);
}

ACCELERATE_QUANTIZE_CLONES void float_to_bf16(const float* x, std::int64_t n, std::uint16_t* out) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = c10::detail::round_to_nearest_even(x[i]);
}

// Scalar (c10's branches): only dequantizing into fp16 uses it.
void float_to_half(const float* x, std::int64_t n, std::uint16_t* out) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = c10::detail::fp16_ieee_from_fp32_value(x[i]);
}

}  // namespace accelerate::quantize::kernels
