// Loops written so GCC's vectorizer takes them at -O3 (checked with
// -fopt-info-vec; bench/zero/quantize_bench.cpp measures them): no calls,
// no branches, integer max for the absolute maximum, and rounding by the
// 1.5 * 2^23 trick. bf16 and fp16 are read as bits and widened in the
// register, so no converted copy of a block is written.
#include "quantize/block_quantize_kernels.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <type_traits>
#include <vector>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

// x86-64 with GCC: the loops are compiled for AVX-512 and AVX2 besides the
// baseline (`#pragma GCC target`), and the first call picks the best the
// processor has. Other compilers and processors get the baseline.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__INTEL_COMPILER)
#define ACCELERATE_QUANTIZE_X86_SETS 1
#else
#define ACCELERATE_QUANTIZE_X86_SETS 0
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

// Elements per step of the chunked int4 loops: an int8 stack buffer.
constexpr std::int64_t kInt4Chunk = 512;

// Packs int8 values (even count) into nibble pairs, reading each pair as one
// uint16 (element 2k in its low byte on a little-endian machine).
ACCELERATE_QUANTIZE_INLINE void pack_int4(const std::int8_t* values, std::int64_t pairs,
                                          std::uint8_t* packed) {
  for (std::int64_t k = 0; k < pairs; ++k) {
    std::uint16_t w;
    std::memcpy(&w, values + 2 * k, sizeof w);
    packed[k] = static_cast<std::uint8_t>(((w & 0x0fu) << 4) | ((w >> 8) & 0x0fu));
  }
}

template <class In>
ACCELERATE_QUANTIZE_INLINE void quantize_int4_loop(const typename In::type* x, std::int64_t n,
                                                   float inv, std::uint8_t* packed) {
  const std::int64_t pairs = n / 2;
  if constexpr (kLittleEndian && std::is_same_v<In, Fp32>) {
    // fp32: a pair is 64 bits, which AVX2 narrows slowly; quantize a chunk
    // to int8, then pack it.
    std::int8_t values[kInt4Chunk];
    for (std::int64_t start = 0; start < 2 * pairs; start += kInt4Chunk) {
      const std::int64_t count = std::min(kInt4Chunk, 2 * pairs - start);
      quantize_int8_loop<In>(x + start, count, inv, values);
      pack_int4(values, count / 2, packed + start / 2);
    }
  } else if constexpr (kLittleEndian) {
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

// The three copies of the loops (block_quantize_kernel_set.inc).
namespace baseline {
#include "quantize/block_quantize_kernel_set.inc"
}  // namespace baseline
#if ACCELERATE_QUANTIZE_X86_SETS
#pragma GCC push_options
#pragma GCC target("avx2")
namespace avx2 {
#include "quantize/block_quantize_kernel_set.inc"
}  // namespace avx2
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx2,avx512f,avx512bw,avx512vl,avx512dq")
namespace avx512 {
#include "quantize/block_quantize_kernel_set.inc"
}  // namespace avx512
#pragma GCC pop_options
#endif

namespace {

struct KernelTable {
  CpuCapability isa;
  decltype(&baseline::abs_max_bits) abs_max_bits;
  decltype(&baseline::abs_max_bits16) abs_max_bits16;
  decltype(&baseline::quantize_int8) quantize_int8;
  decltype(&baseline::quantize_int8_bf16) quantize_int8_bf16;
  decltype(&baseline::quantize_int8_fp16) quantize_int8_fp16;
  decltype(&baseline::quantize_int4) quantize_int4;
  decltype(&baseline::quantize_int4_bf16) quantize_int4_bf16;
  decltype(&baseline::quantize_int4_fp16) quantize_int4_fp16;
  decltype(&baseline::dequantize_int8) dequantize_int8;
  decltype(&baseline::accumulate_int8) accumulate_int8;
  decltype(&baseline::dequantize_int4) dequantize_int4;
  decltype(&baseline::accumulate_int4) accumulate_int4;
  decltype(&baseline::half_to_float) half_to_float;
  decltype(&baseline::float_to_bf16) float_to_bf16;
};

#define ACCELERATE_QUANTIZE_TABLE(isa, ns)                                                         \
  KernelTable {                                                                                    \
    isa, ns::abs_max_bits, ns::abs_max_bits16, ns::quantize_int8, ns::quantize_int8_bf16,          \
        ns::quantize_int8_fp16, ns::quantize_int4, ns::quantize_int4_bf16, ns::quantize_int4_fp16, \
        ns::dequantize_int8, ns::accumulate_int8, ns::dequantize_int4, ns::accumulate_int4,        \
        ns::half_to_float, ns::float_to_bf16                                                       \
  }

const KernelTable kBaseline = ACCELERATE_QUANTIZE_TABLE(CpuCapability::kDefault, baseline);
#if ACCELERATE_QUANTIZE_X86_SETS
const KernelTable kAvx2 = ACCELERATE_QUANTIZE_TABLE(CpuCapability::kAvx2, avx2);
const KernelTable kAvx512 = ACCELERATE_QUANTIZE_TABLE(CpuCapability::kAvx512, avx512);
#endif
#undef ACCELERATE_QUANTIZE_TABLE

// A set runs only up to kernel_capability(): this CPU's highest, or the cap
// ACCELERATE_CPU_CAPABILITY sets (x86-64-v4 covers AVX-512 F/BW/VL/DQ).
const KernelTable* table_for(CpuCapability isa) {
#if ACCELERATE_QUANTIZE_X86_SETS
  const CpuCapability capability = kernel_capability();
  if (isa == CpuCapability::kAvx512) {
    return capability == CpuCapability::kAvx512 ? &kAvx512 : nullptr;
  }
  if (isa == CpuCapability::kAvx2) return capability >= CpuCapability::kAvx2 ? &kAvx2 : nullptr;
#endif
  return isa == CpuCapability::kDefault ? &kBaseline : nullptr;
}

const KernelTable* best_table() {
  for (CpuCapability isa : {CpuCapability::kAvx512, CpuCapability::kAvx2}) {
    if (const KernelTable* table = table_for(isa)) return table;
  }
  return &kBaseline;
}

std::atomic<const KernelTable*> active_table{nullptr};

const KernelTable& active() {
  const KernelTable* table = active_table.load(std::memory_order_acquire);
  if (table == nullptr) {
    table = best_table();
    active_table.store(table, std::memory_order_release);
  }
  return *table;
}

}  // namespace

std::vector<CpuCapability> supported_isas() {
  std::vector<CpuCapability> isas;
  for (CpuCapability isa : kAllCpuCapabilities) {
    if (table_for(isa) != nullptr) isas.push_back(isa);
  }
  return isas;
}

CpuCapability active_isa() { return active().isa; }

bool use_isa(CpuCapability isa) {
  const KernelTable* table = table_for(isa);
  if (table == nullptr) return false;
  active_table.store(table, std::memory_order_release);
  return true;
}

void use_best_isa() { active_table.store(best_table(), std::memory_order_release); }

std::uint32_t abs_max_bits(const float* x, std::int64_t n) { return active().abs_max_bits(x, n); }
std::uint16_t abs_max_bits16(const std::uint16_t* x, std::int64_t n) {
  return active().abs_max_bits16(x, n);
}
void quantize_int8(const float* x, std::int64_t n, float inv, std::int8_t* q) {
  active().quantize_int8(x, n, inv, q);
}
void quantize_int8_bf16(const std::uint16_t* x, std::int64_t n, float inv, std::int8_t* q) {
  active().quantize_int8_bf16(x, n, inv, q);
}
void quantize_int8_fp16(const std::uint16_t* x, std::int64_t n, float inv, std::int8_t* q) {
  active().quantize_int8_fp16(x, n, inv, q);
}
void quantize_int4(const float* x, std::int64_t n, float inv, std::uint8_t* packed) {
  active().quantize_int4(x, n, inv, packed);
}
void quantize_int4_bf16(const std::uint16_t* x, std::int64_t n, float inv, std::uint8_t* packed) {
  active().quantize_int4_bf16(x, n, inv, packed);
}
void quantize_int4_fp16(const std::uint16_t* x, std::int64_t n, float inv, std::uint8_t* packed) {
  active().quantize_int4_fp16(x, n, inv, packed);
}
void dequantize_int8(const std::int8_t* q, std::int64_t n, float scale, float* out) {
  active().dequantize_int8(q, n, scale, out);
}
void accumulate_int8(const std::int8_t* q, std::int64_t n, float scale, float* acc) {
  active().accumulate_int8(q, n, scale, acc);
}
void dequantize_int4(const std::uint8_t* packed, std::int64_t n, float scale, float* out) {
  active().dequantize_int4(packed, n, scale, out);
}
void accumulate_int4(const std::uint8_t* packed, std::int64_t n, float scale, float* acc) {
  active().accumulate_int4(packed, n, scale, acc);
}
void half_to_float(const std::uint16_t* x, std::int64_t n, float* out) {
  active().half_to_float(x, n, out);
}
void float_to_bf16(const float* x, std::int64_t n, std::uint16_t* out) {
  active().float_to_bf16(x, n, out);
}

// Scalar (c10's branches): only dequantizing into fp16 uses it.
void float_to_half(const float* x, std::int64_t n, std::uint16_t* out) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = c10::detail::fp16_ieee_from_fp32_value(x[i]);
}

}  // namespace accelerate::quantize::kernels
