// The inner loops of block quantization (block_quantize.h), one block at a
// time on raw pointers; bf16 and fp16 are passed as their raw bits. They
// live in their own source, compiled at -O3 with floating-point contraction
// off (src/quantize/sources.cmake): -O3 lets GCC vectorize them, and without
// contraction a multiply-add is always two roundings. On x86-64 (GCC) the
// loops exist for AVX-512 and AVX2 besides the baseline; the first call
// picks the best kernel_capability() allows (accelerate/common/cpu_capability.h). Every set does
// the same IEEE operations, so every machine writes the same bytes (the tests compare each set the
// processor runs with the reference). Internal.
#pragma once

#include <cstdint>
#include <vector>

#include "accelerate/common/cpu_capability.h"

namespace accelerate::quantize::kernels {

// The instruction sets the loops are compiled for are the CpuCapability
// values; those this process may run (kDefault always, none above
// kernel_capability()), and the one in use.
std::vector<CpuCapability> supported_isas();
CpuCapability active_isa();
// For tests and the bench: use `isa` from now on (false, and no change, if
// the processor lacks it), or go back to the best. Not for concurrent use
// with running kernels.
bool use_isa(CpuCapability isa);
void use_best_isa();

// The largest |x| as a bit pattern (sign cleared). For non-negative floats
// the integer order is the float order, and every NaN lies above +inf's
// pattern (fp32 0x7f800000, bf16 0x7f80, fp16 0x7c00), so one integer
// max-reduction finds max|x| and whether the block is finite.
std::uint32_t abs_max_bits(const float* x, std::int64_t n);
std::uint16_t abs_max_bits16(const std::uint16_t* x, std::int64_t n);  // bf16 or fp16

// q[i] = round_half_even(x[i] * inv), qmax 127; x must be finite and
// |x| <= qmax / inv.
void quantize_int8(const float* x, std::int64_t n, float inv, std::int8_t* q);
void quantize_int8_bf16(const std::uint16_t* x, std::int64_t n, float inv, std::int8_t* q);
void quantize_int8_fp16(const std::uint16_t* x, std::int64_t n, float inv, std::int8_t* q);
// The same with qmax 7, packed two per byte (element 2k in the high nibble);
// an odd n leaves the last byte's low nibble zero. Writes (n + 1) / 2 bytes.
void quantize_int4(const float* x, std::int64_t n, float inv, std::uint8_t* packed);
void quantize_int4_bf16(const std::uint16_t* x, std::int64_t n, float inv, std::uint8_t* packed);
void quantize_int4_fp16(const std::uint16_t* x, std::int64_t n, float inv, std::uint8_t* packed);

// out[i] = q[i] * scale (fp32).
void dequantize_int8(const std::int8_t* q, std::int64_t n, float scale, float* out);
// acc[i] += q[i] * scale, the product rounded to fp32 first.
void accumulate_int8(const std::int8_t* q, std::int64_t n, float scale, float* acc);
// The int4 forms: n elements from (n + 1) / 2 packed bytes.
void dequantize_int4(const std::uint8_t* packed, std::int64_t n, float scale, float* out);
void accumulate_int4(const std::uint8_t* packed, std::int64_t n, float scale, float* acc);

// fp16 (raw bits) to fp32, exact: c10's arithmetic without its branch.
void half_to_float(const std::uint16_t* x, std::int64_t n, float* out);
// fp32 to bf16 / fp16 (raw bits), rounding to nearest even as c10 does.
void float_to_bf16(const float* x, std::int64_t n, std::uint16_t* out);
void float_to_half(const float* x, std::int64_t n, std::uint16_t* out);

}  // namespace accelerate::quantize::kernels
